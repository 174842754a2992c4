package process

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
	"github.com/capstanhq/capstan/internal/scoped/process/zygote"
)

// probeBinary is a path that does not exist: the probe child gets through
// every confinement step and fails at execve.
const probeBinary = "/capstan-zygote-probe/does-not-exist"

// probeZygote checks that the zygote confines a child with everything the
// launcher probes found (cgroups aside; the tmpfs too when the launcher
// could mount one): the child must reach execve and report ENOENT there. nil means confined children start through it.
func probeZygote(p probes) error {
	if !zygote.Available() {
		return errors.New("this binary was built without cgo")
	}
	spec := launcher.Spec{Landlock: p.abiErr == nil, Seccomp: p.seccompErr == nil, NetNS: p.netnsErr == nil}
	if spec.NetNS {
		spec.Net = launcher.NetProxy
	}
	if spec.NetNS && p.tmpErr == nil {
		t := tmpProbeSpec()
		spec.Tmp, spec.TmpBytes = t.Tmp, t.TmpBytes
	}
	ours, theirs, err := launcher.Channel()
	if err != nil {
		return err
	}
	defer closeAll(ours, theirs)
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	req := zygote.Request{
		Path: probeBinary, Argv: []string{"probe"}, Dir: "/",
		NetNS: spec.NetNS, Proxy: spec.Net == launcher.NetProxy, UID: os.Geteuid(), GID: os.Getegid(), ProxyPort: launcher.ProxyPort,
		Tmp: spec.Tmp, TmpBytes: spec.TmpBytes, Status: theirs, Stdin: null, Stdout: null, Stderr: null,
	}
	if spec.Landlock {
		if req.Ruleset, err = launcher.Ruleset(spec); err != nil {
			return err
		}
		defer closeAll(req.Ruleset)
		if spec.Tmp != "" {
			if req.TmpAccess, err = launcher.TmpAccess(); err != nil {
				return err
			}
		}
	}
	if spec.Seccomp {
		if req.Filter, err = launcher.Filter(true); err != nil {
			return err
		}
	}
	pid, err := zygote.Spawn(req)
	if err != nil {
		return err
	}
	closeAll(theirs)
	if proc, err := os.FindProcess(pid); err == nil {
		defer func() { _, _ = proc.Wait() }()
	}
	files, err := launcher.AwaitFiles(ours)
	files.Close()
	var le *launcher.Error
	switch {
	case errors.As(err, &le) && le.Step == "exec "+probeBinary && errors.Is(err, syscall.ENOENT):
		return nil
	case err == nil:
		return errors.New("the probe child executed a binary that does not exist")
	}
	return fmt.Errorf("the probe child failed: %w", err)
}

func closeFile(f *os.File) {
	if f != nil {
		_ = f.Close()
	}
}
