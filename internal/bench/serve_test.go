package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bench"
	"github.com/stretchr/testify/require"
)

// startServe runs bench.Serve in this process behind a pair of pipes, as
// capstan-bench -server-process runs it in a child, and returns its client.
// The server stops at the end of the test (its input closed).
func startServe(t *testing.T, ctx context.Context) (*bench.ServerClient, string) {
	t.Helper()
	dir := t.TempDir()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		err := bench.Serve(ctx, dir, inR, outW)
		_ = outW.CloseWithError(io.EOF)
		served <- err
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case err := <-served:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return within 30s of its input's end")
		}
	})
	c, err := bench.NewServerClient(ctx, inW, outR)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(c.URL(), "nats://127.0.0.1:"), c.URL())
	return c, dir
}

func TestServeAnswersMemoryAndHeapProfile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _ := startServe(t, ctx)

	m, err := c.Memory(ctx)
	require.NoError(t, err)
	require.Positive(t, m.HeapInuse)
	require.Positive(t, m.HeapAlloc)
	require.Positive(t, m.HeapObjects)
	require.GreaterOrEqual(t, m.Sys, m.HeapInuse)
	require.Positive(t, m.RSS, "/proc/self/status is read")

	prof := filepath.Join(t.TempDir(), "heap.out")
	require.NoError(t, c.WriteHeapProfile(ctx, prof))
	st, err := os.Stat(prof)
	require.NoError(t, err)
	require.Positive(t, st.Size())

	missing := filepath.Join(t.TempDir(), "no", "such", "dir", "heap.out")
	require.ErrorContains(t, c.WriteHeapProfile(ctx, missing), "heap profile: open "+missing)
	require.ErrorContains(t, c.WriteHeapProfile(ctx, "a\nmemory"), "must be non-empty, on one line")

	// The protocol stays in step after an error.
	_, err = c.Memory(ctx)
	require.NoError(t, err)
}

func TestServerClientRefusesWhatIsNotAURL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := bench.NewServerClient(ctx, io.Discard, strings.NewReader("bench: embedded server: data dir must be set\n"))
	require.ErrorContains(t, err, `the server printed "bench: embedded server: data dir must be set", not a nats:// URL`)
	_, err = bench.NewServerClient(ctx, io.Discard, strings.NewReader(""))
	require.ErrorContains(t, err, "server URL: unexpected EOF")
}

// TestSoakWithServerProcessProtocol runs a short soak against a server
// that answers Serve's protocol and checks the report's shape: the server's
// memory before and after, the retained results and the costs per result,
// the heap profile, the table and the JSON names. It checks no size.
func TestSoakWithServerProcessProtocol(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, dir := startServe(t, ctx)
	prof := filepath.Join(t.TempDir(), "server-heap.out")
	var progress bytes.Buffer
	rep, err := bench.Soak(ctx, bench.SoakConfig{Calls: 200, Concurrency: 4, ArgBytes: 256, Chunk: 200 * time.Millisecond, Settle: 50 * time.Millisecond,
		ServerURL: c.URL(), ServerCreds: bench.ServeCredsFile(dir), Server: c, ServerHeapProfile: prof, Progress: &progress})
	require.NoError(t, err)
	require.GreaterOrEqual(t, rep.Calls, 200)
	require.Zero(t, rep.Errors)
	require.False(t, rep.ServerInProcess)
	require.NotNil(t, rep.Before.Server)
	require.NotNil(t, rep.After.Server)
	require.GreaterOrEqual(t, rep.RetainedResults, int64(rep.Calls), "every answered call keeps its result")
	require.NotNil(t, rep.ServerHeapBytesPerRetainedResult)
	require.NotNil(t, rep.ServerRSSBytesPerRetainedResult)
	require.NotNil(t, rep.Settled)
	require.NotNil(t, rep.Settled.Server)
	require.NotNil(t, rep.SettledServerHeapBytesPerRetainedResult)
	require.NotNil(t, rep.SettledServerRSSBytesPerRetainedResult)
	require.NotNil(t, rep.ServerLiveBytesPerRetainedResult)
	require.NotNil(t, rep.SettledServerLiveBytesPerRetainedResult)
	require.Greater(t, rep.ResultsDiskBytesPerRetainedResult, 256.0, "a result carries the text back")
	require.Positive(t, rep.AuditDiskBytesPerCall)
	require.Contains(t, progress.String(), "soak: ")
	for _, p := range []string{prof, prof + ".settled"} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Positive(t, st.Size(), p)
	}

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	for _, want := range []string{"in its own process", "server Go heap in use", "per retained result", "server heap", "server heap, settled", "server live heap objects, settled", "settled (50ms later)", "audit stream", "CAPSTAN_RESULTS"} {
		require.Contains(t, table.String(), want)
	}
	data, err := json.Marshal(rep)
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(data, &back))
	for _, key := range []string{"server_heap_bytes_per_retained_result", "server_rss_bytes_per_retained_result", "server_live_bytes_per_retained_result", "settled_server_live_bytes_per_retained_result", "audit_disk_bytes_per_call", "retained_results", "nats_server"} {
		require.Contains(t, back, key)
	}
}

// TestSoakInProcess: with the server in the benchmark's process, the
// server's own memory is not measured and the report says so.
func TestSoakInProcess(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := bench.Soak(ctx, bench.SoakConfig{Calls: 100, Concurrency: 4, ArgBytes: 256, Chunk: 200 * time.Millisecond, Dir: t.TempDir()})
	require.NoError(t, err)
	require.True(t, rep.ServerInProcess)
	require.Nil(t, rep.ServerHeapBytesPerRetainedResult)
	require.Positive(t, rep.RetainedResults)
	require.Positive(t, rep.AuditDiskBytesPerCall)
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), "not measured (the server shares the process; use -server-process)")

	_, err = bench.Soak(ctx, bench.SoakConfig{Calls: 1, ServerHeapProfile: "heap.out"})
	require.ErrorContains(t, err, "a server heap profile needs a server in its own process")
}
