package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(nodeEnv); spec != "" {
		os.Exit(runNode(spec)) // a node of a procCluster, not the tests
	}
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// ackWait is the pools' AckWait in these tests: a lost worker's calls are
// redelivered after 3 s (leases expire after 2 s, heartbeats every 1 s).
const ackWait = 3 * time.Second

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// workerBinary builds cmd/worker with the capstan_faults tag once per test
// binary.
func workerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "capstan-chaos-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "worker")
		out, err := exec.Command("go", "build", "-tags", "capstan_faults", "-o", binPath, "../../cmd/worker").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binPath
}

// syncBuffer is a bytes.Buffer safe for a writer and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a worker binary running as a subprocess.
type proc struct {
	cmd     *exec.Cmd
	logs    *syncBuffer
	exited  chan struct{} // closed when the process has ended
	exitErr error         // set before exited is closed
}

// startProc runs the worker binary against url with the given extra
// environment and waits until it logs "worker ready". It is killed when the
// test ends if it still runs.
func startProc(t *testing.T, url, id string, extra ...string) *proc {
	t.Helper()
	cmd := exec.Command(workerBinary(t))
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"CAPSTAN_NATS_URL=" + url, "CAPSTAN_NATS_CREDS=" + bustest.Creds(url), "CAPSTAN_WORKER_ID=" + id, "CAPSTAN_ACK_WAIT=" + ackWait.String(),
		"CAPSTAN_HTTP_ADDR=127.0.0.1:0", "CAPSTAN_LOG_FORMAT=json", "CAPSTAN_LOG_LEVEL=info"}, extra...)
	p := &proc{cmd: cmd, logs: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = io.Discard, p.logs
	require.NoError(t, cmd.Start())
	go func() { p.exitErr = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("logs of worker %s:\n%s", id, p.logs)
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(p.logs.String(), `"msg":"worker ready"`) {
		select {
		case <-p.exited:
			t.Fatalf("worker %s exited before ready (%v):\n%s", id, p.exitErr, p.logs)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker %s not ready:\n%s", id, p.logs)
		}
	}
	return p
}

// kill sends SIGKILL and waits for the process to end.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// waitExit waits for the process to end by itself.
func (p *proc) waitExit(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("worker did not exit in %s:\n%s", d, p.logs)
	}
}

// startWorker runs an in-process worker with the built-in tools until the
// test ends. Its log is discarded unless cfg.Logger is set.
func startWorker(t *testing.T, cfg worker.Config) {
	t.Helper()
	cfg.AckWait = ackWait
	cfg.ShutdownGrace = time.Millisecond
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	w, err := worker.New(cfg, builtin.All()...)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-w.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("worker %s: %v", cfg.WorkerID, err)
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatalf("worker %s not ready", cfg.WorkerID)
	}
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// putDefaultPersonality stores a personality that allows every built-in.
func putDefaultPersonality(t *testing.T, conn *bus.Conn) {
	t.Helper()
	kv, err := conn.KV(ctxT(t, time.Minute), bus.Personalities)
	require.NoError(t, err)
	_, err = kv.Put(ctxT(t, time.Minute), "default", []byte("id: default\n"))
	require.NoError(t, err)
}

// echoCall is the body of an echo call that reports its start as a progress
// event (the execution ledger) and then sleeps.
func echoCall(id, batch string, sleepMS int) []byte {
	return fmt.Appendf(nil, `{"call_id":%q,"batch_id":%q,"tool":"echo","session_id":"chaos","args":{"text":%q,"sleep_ms":%d,"progress":[{"message":"started"}]}}`,
		id, batch, id, sleepMS)
}

// publishCall publishes a call until the stream acknowledges it (retrying
// while the bus is unavailable, with the same Nats-Msg-Id, so a call is
// never stored twice) or ctx ends.
func publishCall(ctx context.Context, conn *bus.Conn, id string, body []byte) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := conn.Publish(pctx, "capstan.call.default.default.echo", body, bus.Header{protocol.HeaderProtocol: {protocol.Version}}, id)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("publish %s: %w (last error: %v)", id, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tally is what a test observed of a batch.
type tally struct {
	results    map[string][]protocol.Result // by call id
	executions map[string]int               // "started" progress events by call id
}

// count reads every stored result and progress event of batch.
func count(t *testing.T, conn *bus.Conn, batch string) tally {
	t.Helper()
	tl, err := tryCount(ctxT(t, time.Minute), conn, batch)
	require.NoError(t, err)
	return tl
}

// tryCount is count for a bus that may be recovering: errors are returned.
func tryCount(ctx context.Context, conn *bus.Conn, batch string) (tally, error) {
	return tryCountOf(ctx, conn, "default", batch)
}

// tryCountOf is tryCount for the calls of personality (a subject token, or
// "*" for every personality).
func tryCountOf(ctx context.Context, conn *bus.Conn, personality, batch string) (tally, error) {
	tl := tally{results: map[string][]protocol.Result{}, executions: map[string]int{}}
	res, err := conn.Messages(ctx, "CAPSTAN_RESULTS", "capstan.result."+personality+"."+batch+".>")
	if err != nil {
		return tally{}, err
	}
	for _, m := range res {
		var r protocol.Result
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return tally{}, fmt.Errorf("result %s: %w", m.Subject, err)
		}
		tl.results[r.CallID] = append(tl.results[r.CallID], r)
	}
	prog, err := conn.Messages(ctx, "CAPSTAN_PROGRESS", "capstan.progress.internal."+personality+"."+batch+".>")
	if err != nil {
		return tally{}, err
	}
	for _, m := range prog {
		var p protocol.Progress
		if err := json.Unmarshal(m.Data, &p); err != nil {
			return tally{}, fmt.Errorf("progress %s: %w", m.Subject, err)
		}
		if p.Message == "started" {
			tl.executions[p.CallID]++
		}
	}
	return tl, nil
}

// waitResults waits until every id has a result and the calls stream is
// empty (every call acknowledged), then returns the tally.
func waitResults(t *testing.T, conn *bus.Conn, batch string, ids []string, d time.Duration) tally {
	t.Helper()
	return waitResultsOf(t, conn, "default", batch, ids, d)
}

// waitResultsOf is waitResults for the calls of personality (tryCountOf).
func waitResultsOf(t *testing.T, conn *bus.Conn, personality, batch string, ids []string, d time.Duration) tally {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		tl, err := tryCountOf(ctxT(t, time.Minute), conn, personality, batch)
		var n uint64
		if err == nil {
			n, err = conn.StreamMsgs(ctxT(t, time.Minute), "CAPSTAN_CALLS")
		}
		if err == nil && n == 0 && len(tl.results) >= len(ids) {
			return tl
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %d of %d calls answered, %d calls unacknowledged (err %v)", d, len(tl.results), len(ids), n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// requireExactlyOnce fails unless every id has exactly one result and no
// result answers an unknown id; it returns the numbers for the log.
func requireExactlyOnce(t *testing.T, tl tally, ids []string) (lost, duplicated int) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
		switch n := len(tl.results[id]); {
		case n == 0:
			lost++
		case n > 1:
			duplicated += n - 1
		}
	}
	for id := range tl.results {
		require.True(t, want[id], "result for unknown call %s", id)
	}
	require.Zero(t, lost, "calls without a result")
	require.Zero(t, duplicated, "duplicate results")
	return lost, duplicated
}

// retryFor runs try until it returns nil, polling every `every`, and fails
// the test naming what and the last error once d has passed: a condition
// with a bound, for operations a cluster refuses while it elects leaders.
func retryFor(t testing.TB, d, every time.Duration, what string, try func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := try()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done within %s: %v", what, d, err)
		}
		time.Sleep(every)
	}
}
