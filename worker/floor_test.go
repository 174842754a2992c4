package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seedOf returns the NKey seed line of a credentials file the test may
// read.
func seedOf(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	for line := range strings.Lines(string(data)) {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "SU") {
			return line
		}
	}
	t.Fatalf("no seed in %s", file)
	return ""
}

// TestAttackChildReadsEmbeddedCredentials is the attack of issue 26
// through a real worker and its embedded server: under a personality with
// `fs_reach: {read: ["/"]}` and `process: {allow: [cat]}`, run_process
// `cat <data dir>/embedded.creds` printed the server's NKey seed, and
// `cat /etc/shadow` the password hashes, although read_file refuses both.
// The floor binds children now: both fail with EACCES and no seed is in
// the result, while the same child reads a file beside the data dir.
func TestAttackChildReadsEmbeddedCredentials(t *testing.T) {
	t.Parallel()
	if s := process.Sandbox(); !s.Landlock {
		t.Skipf("needs Landlock to confine children's files; this machine: %s", s.Reason)
	}
	url, dataDir := embeddedWorker(t, &lockedBuffer{}, builtin.All()...)
	dataDir, err := filepath.EvalSymlinks(dataDir)
	require.NoError(t, err)
	creds := filepath.Join(dataDir, "embedded.creds")
	seed := seedOf(t, creds)
	beside, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	note := filepath.Join(beside, "note")
	require.NoError(t, os.WriteFile(note, []byte("readable"), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, bus.Config{URL: url, Creds: creds})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	e := &env{t: t, url: url, conn: c, names: c.Names()}
	e.putPersonality("default", "id: default\n")
	e.putPersonality("everything", "id: everything\nfs_reach:\n  read: [\"/\"]\nprocess: {allow: [cat, bash]}\n")

	cat := func(path string) (protocol.Result, error) {
		args, err := json.Marshal(map[string]any{"binary": "cat", "args": []string{path}})
		require.NoError(t, err)
		return tryDo(ctxT(t), e, protocol.Call{Tool: "run_process", PersonalityID: "everything", Args: args})
	}
	// The control: the worker sees the personality through its watch, and
	// its child reads an ordinary file under the same reach.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r, err := cat(note)
		require.NoError(c, err)
		assert.True(c, r.OK, r.Error)
		assert.Equal(c, "exit code 0\n--- stdout ---\nreadable\n--- stderr ---\n", r.Value)
	}, 15*time.Second, 20*time.Millisecond)

	for _, path := range []string{creds, "/etc/shadow"} {
		r, err := cat(path)
		require.NoError(t, err)
		require.True(t, r.OK, r.Error)
		require.Equal(t, fmt.Sprintf("exit code 1\n--- stdout ---\n\n--- stderr ---\ncat: %s: Permission denied\n", path), r.Value)
		require.NotContains(t, r.Value, seed)
		require.NotContains(t, string(r.Structured), seed)
	}
	// The terminal tool's shell and what it starts keep to the floor too.
	args, err := json.Marshal(map[string]any{"command": "cat " + creds + "; cat /etc/shadow"})
	require.NoError(t, err)
	r, err := tryDo(ctxT(t), e, protocol.Call{Tool: "terminal", PersonalityID: "everything", Args: args})
	require.NoError(t, err)
	require.False(t, r.OK)
	require.Equal(t, fmt.Sprintf("Command exited with error (code 1):\ncat: %s: Permission denied\ncat: /etc/shadow: Permission denied\n", creds), r.Error)
	require.NotContains(t, r.Value+r.Error, seed)
}

// TestWorkerCredentialsRedacted: a tool that gets hold of the worker's
// NATS credentials (here by reading the file itself, as no accessor lets
// it) hands them back every way it can; the seed is in no result value,
// structured payload, error (the abandonment reason of a panic included)
// or progress event.
func TestWorkerCredentialsRedacted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	file := bustest.Creds(e.url) // the file the worker connects with
	seed := seedOf(t, file)
	leak := func(ctx context.Context, tc *tool.Context) string {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		return string(data)
	}
	tools := []tool.Tool{
		{Name: "leak_value", Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			text := leak(ctx, tc)
			if err := tc.Emit(tool.Progress{Message: "found " + text}); err != nil {
				return tool.Result{}, err
			}
			return tool.Result{OK: true, Value: "found " + text, Structured: map[string]any{"creds": text, "seed": seed}}, nil
		}},
		{Name: "leak_error", Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			return tool.Result{}, fmt.Errorf("cannot use %s", leak(ctx, tc))
		}},
		// A structured value whose encoding panics with the seed: the
		// worker's own fault, retried, then abandoned with the reason.
		{Name: "leak_panic", Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			return tool.Result{OK: true, Value: "v", Structured: map[string]any{"x": explosiveValue{msg: leak(ctx, tc)}}}, nil
		}},
	}
	progress := e.tail(e.names.ProgressStream(), e.names.Prefix()+".progress.>")
	e.start(worker.Config{WorkerID: "w1", MaxDeliver: 2}, tools...)
	for _, tl := range tools {
		e.call(protocol.Call{CallID: tl.Name, Tool: tl.Name})
	}
	for _, tl := range tools {
		r := e.result(tl.Name, tl.Name)
		for what, s := range map[string]string{"value": r.Value, "error": r.Error, "structured": string(r.Structured)} {
			require.NotContains(t, s, seed, "%s of %s", what, tl.Name)
		}
		require.Contains(t, r.Value+r.Error, "[REDACTED]", tl.Name)
	}
	m := recv(t, progress)
	require.NotContains(t, string(m.Data), seed, "progress event")
	require.Contains(t, string(m.Data), "[REDACTED]")
}
