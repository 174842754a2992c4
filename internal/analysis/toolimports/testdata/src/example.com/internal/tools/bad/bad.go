// Package bad is a built-in tool package that reaches for I/O directly.
package bad

import (
	"context"
	"net"      // want `tool package example.com/internal/tools/bad imports net: tools must use the scoped accessors in tool.Context \(Fetch, FS, Secrets, Process, KV\) instead`
	"net/http" // want `tool package example.com/internal/tools/bad imports net/http: tools must use the scoped accessors`
	"os"       // want `imports os: tools must use`
	"os/exec"  // want `imports os/exec: tools must use`
	"syscall"  // want `imports syscall: tools must use`
)

// Run does everything a tool must not do itself.
func Run(ctx context.Context) error {
	if _, err := os.ReadFile("/etc/passwd"); err != nil {
		return err
	}
	if _, err := http.Get("https://example.com"); err != nil {
		return err
	}
	if _, err := net.Dial("tcp", "example.com:80"); err != nil {
		return err
	}
	_ = syscall.Getpid()
	return exec.CommandContext(ctx, "true").Run()
}
