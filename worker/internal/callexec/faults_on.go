//go:build capstan_faults

package callexec

import (
	"bytes"
	"os"
	"syscall"

	"github.com/capstanhq/capstan/internal/protocol"
)

// injectFault kills the process with SIGKILL when CAPSTAN_FAULT names point.
// It exists only in binaries built with -tags capstan_faults, which the
// chaos tests build; production binaries have no fault points.
//
// Points: "after-result-publish" (the result is stored; the audit record is
// not written and the call is not acked).
func injectFault(point string) {
	if os.Getenv("CAPSTAN_FAULT") == point {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns
	}
}

// injectCallFault stands for a tool that panics in a goroutine of its own,
// which no recover can catch: when CAPSTAN_FAULT is "panic-on-poison" and
// the call's arguments contain POISON, the whole process crashes (Go exits
// with status 2), as it would in production.
func injectCallFault(call *protocol.Call) {
	if os.Getenv("CAPSTAN_FAULT") == "panic-on-poison" && bytes.Contains(call.Args, []byte("POISON")) {
		crashed := make(chan struct{})
		go func() { panic("poison call: a tool panicked outside the worker's recover") }()
		<-crashed
	}
}
