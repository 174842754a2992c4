package shell_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/tools/shell"
	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

func TestRunProcessOutputs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   map[string]any
		value  string
		exit   int
		stdout string
		stderr string
	}{
		{"both streams, non-zero exit is ok",
			map[string]any{"binary": "bash", "args": []string{"-c", "echo out; echo err >&2; exit 4"}},
			"exit code 4\n--- stdout ---\nout\n\n--- stderr ---\nerr\n", 4, "out\n", "err\n"},
		{"no output", map[string]any{"binary": "true"},
			"exit code 0\n--- stdout ---\n\n--- stderr ---\n", 0, "", ""},
		{"args are passed as they are, without a shell",
			map[string]any{"binary": "printf", "args": []string{"%s|", "a b", "$HOME", "*", "`id`"}},
			"exit code 0\n--- stdout ---\na b|$HOME|*|`id`|\n--- stderr ---\n", 0, "a b|$HOME|*|`id`|", ""},
		{"env", map[string]any{"binary": "bash", "args": []string{"-c", `printf %s "$FOO"`}, "env": map[string]string{"FOO": "bar baz"}},
			"exit code 0\n--- stdout ---\nbar baz\n--- stderr ---\n", 0, "bar baz", ""},
		{"worker environment is not inherited", map[string]any{"binary": "bash", "args": []string{"-c", `printf %s "${GOPATH-unset}"`}},
			"exit code 0\n--- stdout ---\nunset\n--- stderr ---\n", 0, "unset", ""},
		{"killed by a signal", map[string]any{"binary": "bash", "args": []string{"-c", "kill -9 $$"}},
			"exit code 137\n--- stdout ---\n\n--- stderr ---\n", 137, "", ""},
		{"absolute binary", map[string]any{"binary": "/bin/bash", "args": []string{"-c", "exit 1"}},
			"exit code 1\n--- stdout ---\n\n--- stderr ---\n", 1, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tc := &tool.Context{Process: runner("*")}
			got := mustExec(t, shell.RunProcess(), jsonArgs(t, tt.args), tc)
			want := tool.OK(tt.value)
			want.Structured = map[string]any{"exit_code": tt.exit, "stdout": tt.stdout, "stderr": tt.stderr}
			require.Equal(t, want, got)
		})
	}
}

func TestRunProcessCwd(t *testing.T) {
	t.Parallel()
	wd := realDir(t)
	tc := &tool.Context{Process: runnerIn([]string{parent(wd)}, "*"), WorkingDir: wd}
	got := mustExec(t, shell.RunProcess(), `{"binary":"pwd","cwd":".."}`, tc)
	require.Equal(t, "exit code 0\n--- stdout ---\n"+parent(wd)+"\n\n--- stderr ---\n", got.Value)

	got = mustExec(t, shell.RunProcess(), `{"binary":"pwd"}`, tc)
	require.Equal(t, wd+"\n", got.Structured["stdout"])

	got = mustExec(t, shell.RunProcess(), `{"binary":"pwd","cwd":"x"}`, &tool.Context{Process: runner("*")})
	require.Equal(t, tool.Fail(tool.CodeInputInvalid, `invalid arguments: args.cwd "x" is relative and the call has no working dir; give an absolute path`), got)

	_, err := call(t, shell.RunProcess(), `{"binary":"pwd","cwd":"/etc"}`, tc)
	require.ErrorIs(t, err, tool.ErrPathNotReachable)
	require.EqualError(t, err, "PATH_NOT_REACHABLE: read not permitted for /etc")
}

func parent(dir string) string {
	for i := len(dir) - 1; i > 0; i-- {
		if dir[i] == '/' {
			return dir[:i]
		}
	}
	return "/"
}

func TestRunProcessTimeout(t *testing.T) {
	t.Parallel()
	tc := &tool.Context{Process: runner("*")}
	got := mustExec(t, shell.RunProcess(), `{"binary":"sleep","args":["30"],"timeout_ms":200}`, tc)
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "Process timed out after 200ms"), got)

	// Long enough for a confined child to start and print on a loaded
	// machine (the launcher adds a Go start-up).
	got = mustExec(t, shell.RunProcess(), `{"binary":"bash","args":["-c","echo so far; sleep 30"],"timeout_ms":3000}`, tc)
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "Process timed out after 3s:\n--- stdout ---\nso far\n\n--- stderr ---\n"), got)
	require.Equal(t, 60*time.Second, shell.RunProcessDefaultTimeout)
}

func TestRunProcessDenials(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		runner  tool.Runner
		args    string
		kind    error
		message string
	}{
		{"binary outside the ceiling",
			process.New(&capability.BinaryGrant{Declared: []string{"*"}, Ceiling: &capability.Ceiling{Allow: []string{"git"}}}, process.Reach{}, resolver, process.Config{}, nil),
			`{"binary":"bash"}`, tool.ErrBinaryNotAllowed, "BINARY_NOT_ALLOWED: bash is not in the declared allowedBinaries"},
		{"loader variable", runner("*"), `{"binary":"true","env":{"LD_PRELOAD":"/tmp/x.so"}}`,
			tool.ErrEnvNotAllowed, "ENV_NOT_ALLOWED: LD_PRELOAD may not be set for a child process"},
		{"loader variable any case", runner("*"), `{"binary":"true","env":{"dyld_insert_libraries":"x"}}`,
			tool.ErrEnvNotAllowed, "ENV_NOT_ALLOWED: dyld_insert_libraries may not be set for a child process"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := call(t, shell.RunProcess(), tt.args, &tool.Context{Process: tt.runner})
			require.ErrorIs(t, err, tt.kind)
			require.EqualError(t, err, tt.message)
		})
	}
	t.Run("not granted", func(t *testing.T) {
		t.Parallel()
		got := mustExec(t, shell.RunProcess(), `{"binary":"true"}`, &tool.Context{})
		require.Equal(t, tool.Fail(tool.CodeNotAvailable, "Process capability not configured for this personality."), got)
	})
	t.Run("binary not on the trusted PATH", func(t *testing.T) {
		t.Parallel()
		_, err := call(t, shell.RunProcess(), `{"binary":"no-such-binary-xyz"}`, &tool.Context{Process: runner("*")})
		require.ErrorContains(t, err, `resolve binary "no-such-binary-xyz" on the trusted PATH`)
		_, isDenial := tool.DenialCode(err)
		require.False(t, isDenial)
	})
}

// limited returns a real runner of binaries with small ceilings, skipping
// the test where the machine enforces no such ceiling.
func limited(t *testing.T, ceiling string, binaries ...string) tool.Runner {
	t.Helper()
	if s := process.Sandbox(); !slices.Contains(s.Ceilings, ceiling) {
		t.Skipf("needs the %s ceiling; this machine: %s", ceiling, s.Reason)
	}
	g := &capability.BinaryGrant{Declared: binaries, Limits: capability.ProcessLimits{MemoryBytes: 64 << 20, MemoryText: "64MiB", Pids: 32}}
	return process.New(g, process.Reach{}, resolver, process.Config{}, nil)
}

func TestRunProcessCeilings(t *testing.T) {
	t.Parallel()
	t.Run("pids", func(t *testing.T) {
		t.Parallel()
		tc := &tool.Context{Process: limited(t, "pids", "*")}
		script := `i=0; while [ $i -lt 200 ]; do sleep 60 & i=$((i+1)); done; echo started $i`
		got := mustExec(t, shell.RunProcess(), jsonArgs(t, map[string]any{"binary": "sh", "args": []string{"-c", script}}), tc)
		require.True(t, got.OK, "%+v", got)
		require.True(t, strings.HasSuffix(got.Value, "\n--- limits ---\npids limit 32 reached"), got.Value)
		require.Equal(t, []string{"pids limit 32 reached"}, got.Structured["limits_hit"])
	})
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		tc := &tool.Context{Process: limited(t, "memory", "*")}
		script := `x=$(head -c 300000000 /dev/zero | tr '\0' a); echo ${#x}`
		_, err := call(t, shell.RunProcess(), jsonArgs(t, map[string]any{"binary": "bash", "args": []string{"-c", script}}), tc)
		require.EqualError(t, err, "Process killed: memory limit 64MiB reached")
	})
	t.Run("tmp", func(t *testing.T) {
		t.Parallel()
		if s := process.Sandbox(); !s.TmpLimit {
			t.Skipf("needs the tmp limit (user and mount namespaces); this machine: %s", s.Reason)
		}
		g := &capability.BinaryGrant{Declared: []string{"*"}, Limits: capability.ProcessLimits{TmpBytes: 1 << 20, TmpText: "1MiB"}}
		tc := &tool.Context{Process: process.New(g, process.Reach{}, resolver, process.Config{}, nil)}
		script := `head -c 2097152 /dev/zero > "$TMPDIR/f"; echo exit $?`
		got := mustExec(t, shell.RunProcess(), jsonArgs(t, map[string]any{"binary": "bash", "args": []string{"-c", script}}), tc)
		require.True(t, got.OK, "%+v", got)
		require.Contains(t, got.Value, "No space left on device")
		require.True(t, strings.HasSuffix(got.Value, "\n--- limits ---\ntmp limit 1MiB reached"), got.Value)
		require.Equal(t, []string{"tmp limit 1MiB reached"}, got.Structured["limits_hit"])
	})
	t.Run("terminal shows the pids ceiling", func(t *testing.T) {
		t.Parallel()
		tc := &tool.Context{Process: limited(t, "pids", "bash")}
		got := mustExec(t, shell.Terminal(), jsonArgs(t, map[string]any{"command": `exec sh -c 'i=0; while [ $i -lt 100 ]; do sleep 60 & i=$((i+1)); done'`}), tc)
		require.Contains(t, got.Value+got.Error, "[pids limit 32 reached]")
	})
}

func TestRunProcessStructuredKeepsOnlyTheStartOfLongStreams(t *testing.T) {
	t.Parallel()
	tc := &tool.Context{Process: runner("*")}
	// 100,000 NUL bytes on stdout (six bytes each in JSON), "é" cut in the
	// middle on stderr.
	script := `head -c 100000 /dev/zero; printf 'a%.0s' $(seq 32767) >&2; printf 'é' >&2`
	got := mustExec(t, shell.RunProcess(), jsonArgs(t, map[string]any{"binary": "bash", "args": []string{"-c", script}}), tc)
	require.True(t, got.OK, "%+v", got)
	require.Equal(t, "exit code 0\n--- stdout ---\n"+strings.Repeat("\x00", 100000)+"\n--- stderr ---\n"+strings.Repeat("a", 32767)+"é", got.Value,
		"the value holds both streams in full")
	require.Equal(t, map[string]any{
		"exit_code": 0,
		"stdout":    strings.Repeat("\x00", shell.StructuredStreamBytes), "stdout_truncated": true, "stdout_bytes": 100000,
		"stderr": strings.Repeat("a", 32767), "stderr_truncated": true, "stderr_bytes": 32769,
	}, got.Structured)
}
