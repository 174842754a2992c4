package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// TestResultBlobWritesTheFullOutput: "result --blob <file>" writes the full
// output a cut result refers to, its digest checked, refuses a blob whose
// stored bytes no longer match (leaving no file), and says when a result
// has none.
func TestResultBlobWritesTheFullOutput(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t, bustest.MaxPayload(bustest.StockMaxPayload))
	conn := bustest.Conn(t, url, "")
	kv, err := conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	_, err = kv.Put(ctxT(t), "default", []byte("id: default\n"))
	require.NoError(t, err)
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), WorkerID: "blob-w",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, builtin.All()...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	<-w.Ready()
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}

	text := strings.Repeat("abcdefghij", 20_000) // over the 80,000-character budget
	args, err := json.Marshal(map[string]string{"text": text})
	require.NoError(t, err)
	code, stdout, stderr := runT(t, env, "", "call", "echo", "--json", "--args", string(args))
	require.Equal(t, exitOK, code, stderr)
	var r client.Result
	require.NoError(t, json.Unmarshal([]byte(stdout), &r))
	require.True(t, r.Truncated)
	require.NotNil(t, r.Blob)

	file := filepath.Join(t.TempDir(), "out.txt")
	code, stdout, stderr = runT(t, env, "", "result", r.CallID, "--blob", file)
	require.Equal(t, exitOK, code, stderr)
	require.True(t, strings.HasPrefix(stdout, text[:80_000]+"\n[truncated — 200000 chars total]"), "the result as call prints it")
	require.Contains(t, stderr, "capstan: result: wrote value of 200.0 kB (text/plain; charset=utf-8, SHA-256 "+r.Blob.SHA256+") to "+file)
	got, err := os.ReadFile(file)
	require.NoError(t, err)
	require.True(t, string(got) == text, "the whole value")
	info, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	// Stored bytes changed behind the reference (one more chunk): the
	// check fails, exit 2, and no file is left.
	subject, err := r.Blob.ChunkSubject()
	require.NoError(t, err)
	_, err = conn.Publish(ctxT(t), subject, []byte("tampered"), nil, "")
	require.NoError(t, err)
	bad := filepath.Join(t.TempDir(), "bad.txt")
	code, _, stderr = runT(t, env, "", "result", r.CallID, "--blob", bad)
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "blob does not match its reference")
	require.NoFileExists(t, bad)

	code, stdout, _ = runT(t, env, "", "call", "echo", "--json", "--args", `{"text":"short"}`)
	require.Equal(t, exitOK, code)
	require.NoError(t, json.Unmarshal([]byte(stdout), &r))
	code, _, stderr = runT(t, env, "", "result", r.CallID, "--blob", filepath.Join(t.TempDir(), "none"))
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "capstan: result: call "+r.CallID+" has no blob")
}
