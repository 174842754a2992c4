// Package shell holds the built-in process tools of tools.md: terminal
// (a bash command line) and run_process (one binary with an argument list).
// They start processes only through the call's tool.Context: tc.Process, the
// scoped runner of the resolved process grant.
//
// Shared rules:
//
//   - No runner (tc.Process nil) → not_available "Process capability not
//     configured for this personality."
//   - Capabilities: besides their binaries, both tools declare the
//     personality's whole fs_reach (read and write "from-personality") and
//     network "*". The runner confines the process (Landlock, where the
//     kernel has it) to that reach, so the process reads and writes what
//     the personality's file tools may, and it may use TCP only when the
//     personality allows some host (any host and port then: Landlock
//     cannot tell hosts apart).
//   - cwd: empty or absent means the call's working dir (tc.WorkingDir; when
//     that is empty too the runner uses "/"). An absolute cwd is cleaned; a
//     relative one is joined to tc.WorkingDir and cleaned. A relative cwd in
//     a call without a working dir is input_invalid. The runner refuses a
//     directory outside the call's fs_reach ("PATH_NOT_REACHABLE: read not
//     permitted for <dir>"); a directory that does not exist fails the
//     start of the process.
//   - timeout_ms (1 to 600,000) bounds the process: when it elapses, the
//     process group is killed and the result is execution_failed
//     "<Command|Process> timed out after <d>", d in Go duration format
//     (time.Duration.String: "30s", "1.5s", "250ms"), followed by ":\n" and
//     the output captured so far when there is any.
//   - A capability denial raised by the runner (BINARY_NOT_ALLOWED,
//     ENV_NOT_ALLOWED, PATH_NOT_REACHABLE) and any other runner failure (binary not found on the
//     trusted PATH, a bad cwd) is returned as a Go error, so the worker
//     reports its message verbatim as execution_failed and records the
//     denial. A cancelled call, or one whose worker-side timeout elapsed
//     first, returns the context's cause.
//   - Output is what the runner captured: each stream capped by the worker's
//     output limit, a cut stream ending with "\n[output truncated]".
//
// terminal's reducer (shape.TerminalReducer, head and tail of long output) is
// registered by the worker, not here.
package shell

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/capstanhq/capstan/tool"
)

// Toolset is the toolset label of every tool of this package.
const Toolset = "terminal"

// MaxTimeoutMS is the largest timeout_ms the tools accept.
const MaxTimeoutMS = 600000

// MsgNoProcess is the not_available message of a call without a process runner.
const MsgNoProcess = "Process capability not configured for this personality."

// Tools returns terminal and run_process, in that order.
func Tools() []tool.Tool {
	return []tool.Tool{Terminal(), RunProcess()}
}

// capabilities returns the capabilities of a process tool that runs
// binaries: see the package comment.
func capabilities(binaries ...string) tool.Capabilities {
	return tool.Capabilities{
		Network: &tool.Network{AllowedHosts: []string{"*"}},
		FSReach: &tool.FSReach{Read: tool.FromPersonality(), Write: tool.FromPersonality()},
		Process: &tool.Process{AllowedBinaries: binaries},
	}
}

// noProcess is the result of a call without a process runner.
func noProcess() tool.Result { return tool.Fail(tool.CodeNotAvailable, MsgNoProcess) }

// workDir returns the directory the process runs in: cwd resolved against
// the call's working dir as the package comment describes. ok is false for
// a relative cwd in a call without a working dir.
func workDir(tc *tool.Context, cwd string) (dir string, ok bool) {
	switch {
	case cwd == "":
		return tc.WorkingDir, true
	case filepath.IsAbs(cwd):
		return filepath.Clean(cwd), true
	case tc.WorkingDir == "":
		return "", false
	}
	return filepath.Join(tc.WorkingDir, cwd), true
}

// relativeCwd is the input_invalid result of a relative cwd without a working dir.
func relativeCwd(cwd string) tool.Result {
	return tool.InvalidArguments(fmt.Sprintf("args.cwd %q is relative and the call has no working dir; give an absolute path", cwd))
}

// timeout returns timeout_ms as a duration: def when ms is nil, otherwise
// ms, which must be a whole number from 1 to MaxTimeoutMS (the schema
// already guarantees it; Execute checks again for direct callers).
func timeout(ms *float64, def time.Duration) (time.Duration, error) {
	if ms == nil {
		return def, nil
	}
	if *ms != math.Trunc(*ms) || *ms < 1 || *ms > MaxTimeoutMS {
		return 0, fmt.Errorf("args.timeout_ms must be a whole number from 1 to %d", MaxTimeoutMS)
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// errTimedOut is the cause of the tool's own timeout.
var errTimedOut = errors.New("shell: timeout_ms elapsed")

// run runs cmd on r under its own timeout d. timedOut is true when d elapsed
// (and the call itself is still alive); then res holds the output captured
// so far, if any. When the call's ctx ended, err is its cause.
func run(ctx context.Context, r tool.Runner, cmd tool.Command, d time.Duration) (res *tool.ProcessResult, timedOut bool, err error) {
	runCtx, cancel := context.WithTimeoutCause(ctx, d, errTimedOut)
	defer cancel()
	res, err = r.Run(runCtx, cmd)
	switch {
	case ctx.Err() != nil:
		return nil, false, context.Cause(ctx)
	case err != nil && errors.Is(err, errTimedOut):
		return res, true, nil
	case err != nil:
		return nil, false, err
	}
	return res, false, nil
}

// timedOutMsg is "<what> timed out after <d>", then ":\n<output>" when
// output is not empty.
func timedOutMsg(what string, d time.Duration, output string) string {
	msg := what + " timed out after " + d.String()
	if output != "" {
		msg += ":\n" + output
	}
	return msg
}
