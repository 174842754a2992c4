//go:build capstan_faults

package worker

import (
	"os"
	"syscall"
)

// injectFault kills the process with SIGKILL when CAPSTAN_FAULT names point.
// It exists only in binaries built with -tags capstan_faults, which the
// chaos tests build; production binaries have no fault points.
//
// Points: "after-result-publish" (the result is stored; completion is not
// recorded and the call is not acked).
func injectFault(point string) {
	if os.Getenv("CAPSTAN_FAULT") == point {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns
	}
}
