package shell_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/tools/shell"
	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

func TestTerminalOutputs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		command string
		want    tool.Result
	}{
		{"stdout", `echo hi`, tool.OK("hi\n")},
		{"no output", `true`, tool.OK("")},
		{"stderr only", `echo err >&2`, tool.OK("err\n")},
		{"stdout then stderr", `echo err >&2; echo out`, tool.OK("out\nerr\n")},
		{"line break added between streams", `printf out; printf err >&2`, tool.OK("out\nerr")},
		{"shell features", `for i in 1 2; do echo "n=$i"; done | tr n N`, tool.OK("N=1\nN=2\n")},
		{"exit code", `exit 3`, tool.Fail(tool.CodeExecutionFailed, "Command exited with error (code 3):\n")},
		{"exit code with output", `echo boom; echo bad >&2; exit 3`,
			tool.Fail(tool.CodeExecutionFailed, "Command exited with error (code 3):\nboom\nbad\n")},
		{"killed by a signal", `echo going; kill -9 $$`,
			tool.Fail(tool.CodeExecutionFailed, "Command exited with error (code 137):\ngoing\n")},
		{"command not found", `no-such-command-xyz`,
			tool.Fail(tool.CodeExecutionFailed, "Command exited with error (code 127):\nbash: line 1: no-such-command-xyz: command not found\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tc := &tool.Context{Process: runner("bash")}
			got := mustExec(t, shell.Terminal(), jsonArgs(t, map[string]any{"command": tt.command}), tc)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestTerminalCwd(t *testing.T) {
	t.Parallel()
	wd := realDir(t)
	other := realDir(t)
	tests := []struct {
		name       string
		workingDir string
		cwd        string
		want       tool.Result
	}{
		{"working dir", wd, "", tool.OK(wd + "\n")},
		{"relative cwd", wd, "sub/../sub", tool.OK(filepath.Join(wd, "sub") + "\n")},
		{"dot", wd, ".", tool.OK(wd + "\n")},
		{"absolute cwd", wd, other + "/", tool.OK(other + "\n")},
		{"no working dir runs in /", "", "", tool.OK("/\n")},
		{"absolute cwd without working dir", "", other, tool.OK(other + "\n")},
		{"relative cwd without working dir", "", "sub",
			tool.Fail(tool.CodeInputInvalid, `invalid arguments: args.cwd "sub" is relative and the call has no working dir; give an absolute path`)},
		{"cwd leaving the reach", wd, "..", tool.Result{}},
	}
	require.NoError(t, os.Mkdir(filepath.Join(wd, "sub"), 0o755))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tc := &tool.Context{Process: runnerIn([]string{wd, other}, "bash"), WorkingDir: tt.workingDir}
			args := map[string]any{"command": "pwd"}
			if tt.cwd != "" {
				args["cwd"] = tt.cwd
			}
			if !tt.want.OK && tt.want.Code == "" {
				_, err := call(t, shell.Terminal(), jsonArgs(t, args), tc)
				require.ErrorIs(t, err, tool.ErrPathNotReachable)
				require.EqualError(t, err, "PATH_NOT_REACHABLE: read not permitted for "+filepath.Dir(wd))
				return
			}
			require.Equal(t, tt.want, mustExec(t, shell.Terminal(), jsonArgs(t, args), tc))
		})
	}
}

func TestTerminalMissingCwdFailsTheStart(t *testing.T) {
	t.Parallel()
	wd := realDir(t)
	tc := &tool.Context{Process: runnerIn([]string{wd}, "bash"), WorkingDir: wd}
	_, err := call(t, shell.Terminal(), `{"command":"pwd","cwd":"missing"}`, tc)
	require.EqualError(t, err, "process: working directory "+wd+"/missing: no such file or directory")
}

func TestTerminalTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		command string
		ms      int
		want    string
	}{
		{"silent", `sleep 30`, 200, "Command timed out after 200ms"},
		// Long enough for a confined shell to start and print on a loaded machine.
		{"with output so far", `echo started; echo warn >&2; sleep 30`, 3000, "Command timed out after 3s:\nstarted\nwarn\n"},
		{"background job", `sleep 30 & wait`, 1500, "Command timed out after 1.5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tc := &tool.Context{Process: runner("bash")}
			start := time.Now()
			got := mustExec(t, shell.Terminal(), jsonArgs(t, map[string]any{"command": tt.command, "timeout_ms": tt.ms}), tc)
			require.Equal(t, tool.Fail(tool.CodeExecutionFailed, tt.want), got)
			require.Less(t, time.Since(start), 10*time.Second, "the command was killed")
		})
	}
}

func TestTerminalDefaultTimeoutIsNotHitByShortCommands(t *testing.T) {
	t.Parallel()
	tc := &tool.Context{Process: runner("bash")}
	require.Equal(t, tool.OK("done\n"), mustExec(t, shell.Terminal(), `{"command":"sleep 0.1; echo done"}`, tc))
	require.Equal(t, 30*time.Second, shell.TerminalDefaultTimeout)
}

func TestTerminalCallCancellationIsReturned(t *testing.T) {
	t.Parallel()
	cause := errors.New("cancelled: by request")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		time.Sleep(100 * time.Millisecond)
		cancel(cause)
	}()
	tc := &tool.Context{Process: runner("bash")}
	_, err := shell.Terminal().Execute(ctx, []byte(`{"command":"sleep 30","timeout_ms":600000}`), tc)
	require.ErrorIs(t, err, cause)

	// A worker timeout shorter than timeout_ms is the worker's to report.
	ctx, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	_, err = shell.Terminal().Execute(ctx, []byte(`{"command":"sleep 30"}`), tc)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

var stillRunningRE = regexp.MustCompile(`^still running: [0-9]+s$`)

func TestTerminalProgress(t *testing.T) {
	t.Parallel()
	require.Equal(t, 5*time.Second, shell.ProgressInterval())

	rec := &recorder{}
	tc := &tool.Context{Process: runner("bash"), EmitFunc: rec.emit}
	got := mustExec(t, shell.TerminalEvery(50*time.Millisecond), `{"command":"sleep 0.5; echo done"}`, tc)
	require.Equal(t, tool.OK("done\n"), got)
	events := rec.events()
	require.GreaterOrEqual(t, len(events), 3, "one event every 50ms for 500ms")
	for _, ev := range events {
		require.Equal(t, tool.AudienceUser, ev.Audience)
		require.Regexp(t, stillRunningRE, ev.Message)
		require.Nil(t, ev.Percent)
	}
	require.Never(t, func() bool { return len(rec.events()) != len(events) }, 300*time.Millisecond, 20*time.Millisecond,
		"no progress after the command ended")
}

func TestTerminalProgressCountsSeconds(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	tc := &tool.Context{Process: runner("bash"), EmitFunc: rec.emit}
	require.Equal(t, tool.OK(""), mustExec(t, shell.TerminalEvery(time.Second), `{"command":"sleep 2.5"}`, tc))
	var msgs []string
	for _, ev := range rec.events() {
		msgs = append(msgs, ev.Message)
	}
	require.GreaterOrEqual(t, len(msgs), 2)
	require.Equal(t, []string{"still running: 1s", "still running: 2s"}, msgs[:2], "whole seconds since the start")
}

func TestTerminalProgressAlsoOnFailureAndNoneWhenFast(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	tc := &tool.Context{Process: runner("bash"), EmitFunc: rec.emit}
	got := mustExec(t, shell.TerminalEvery(50*time.Millisecond), `{"command":"sleep 30","timeout_ms":300}`, tc)
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "Command timed out after 300ms"), got)
	require.NotEmpty(t, rec.events())

	fast := &recorder{}
	tc = &tool.Context{Process: runner("bash"), EmitFunc: fast.emit}
	require.Equal(t, tool.OK("x\n"), mustExec(t, shell.Terminal(), `{"command":"echo x"}`, tc))
	require.Empty(t, fast.events(), "a command faster than the interval reports nothing")
}

func TestTerminalEmitErrorsDoNotFailTheCall(t *testing.T) {
	t.Parallel()
	tc := &tool.Context{Process: runner("bash"), EmitFunc: func(tool.Progress) error { return errors.New("bus down") }}
	require.Equal(t, tool.OK("ok\n"), mustExec(t, shell.TerminalEvery(20*time.Millisecond), `{"command":"sleep 0.2; echo ok"}`, tc))
}

func TestTerminalDenials(t *testing.T) {
	t.Parallel()
	t.Run("not granted", func(t *testing.T) {
		t.Parallel()
		got := mustExec(t, shell.Terminal(), `{"command":"echo hi"}`, &tool.Context{})
		require.Equal(t, tool.Fail(tool.CodeNotAvailable, "Process capability not configured for this personality."), got)
		require.Equal(t, shell.MsgNoProcess, got.Error)
	})
	t.Run("bash not allowed", func(t *testing.T) {
		t.Parallel()
		var denied []error
		r := process.New(&capability.BinaryGrant{Declared: []string{"bash"}, Ceiling: &capability.Ceiling{Allow: []string{"git"}}},
			process.Reach{}, resolver, process.Config{}, func(err error) { denied = append(denied, err) })
		_, err := call(t, shell.Terminal(), `{"command":"echo hi"}`, &tool.Context{Process: r})
		require.ErrorIs(t, err, tool.ErrBinaryNotAllowed)
		require.EqualError(t, err, "BINARY_NOT_ALLOWED: bash is not in the declared allowedBinaries")
		code, ok := tool.DenialCode(err)
		require.True(t, ok)
		require.Equal(t, "BINARY_NOT_ALLOWED", code)
		require.Len(t, denied, 1, "the runner reported the denial")
	})
	t.Run("resolved grant", func(t *testing.T) {
		t.Parallel()
		term := shell.Terminal()
		g, err := capability.Resolve(&term, &capability.Personality{}, capability.CallView{Tool: term.Name, SessionID: "s"})
		require.NoError(t, err)
		require.Equal(t, []string{"bash"}, g.Process.Declared)
		tc := &tool.Context{Process: process.New(g.Process, process.Reach{}, resolver, process.Config{}, nil)}
		require.Equal(t, tool.OK("hi\n"), mustExec(t, term, `{"command":"echo hi"}`, tc))
	})
}

func TestTerminalLongOutputIsReturnedWhole(t *testing.T) {
	t.Parallel()
	// The reducer (shape.TerminalReducer) and the budget trim shorten it later.
	tc := &tool.Context{Process: runner("bash")}
	got := mustExec(t, shell.Terminal(), `{"command":"seq 1 500"}`, tc)
	require.True(t, got.OK)
	require.Equal(t, 500, strings.Count(got.Value, "\n"))
}
