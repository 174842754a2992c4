package console

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
)

// Tokens of the tests.
const (
	operatorToken = "operator-token-0123456789"
	viewerToken   = "viewer-token-0123456789ab"
	// approverToken is carol's, one of ops's approval.approvers;
	// outsiderToken is erin's, an approver the personality does not list.
	approverToken = "approver-token-0123456789"
	outsiderToken = "outsider-token-0123456789"
)

// personalities of the tests: default may call echo and the progress
// tool; reader only read_file; ops calls echo, and an echo of "pay" or
// "refund" waits for carol's or dave's decision.
var testPersonalities = map[string]string{
	"default": "id: default\ntoolset: [echo, steps, read_file]\n",
	"reader":  "id: reader\ntoolset: [read_file]\nfs_reach: {workdir: /srv/work, read: [\"${WORKDIR}\"]}\n",
	"ops":     "id: ops\ntoolset: [echo]\napproval:\n  require:\n    - tool: echo\n      when: {text: [pay, refund]}\n  approvers: [carol, dave]\n",
}

// stepsTool emits a dashboard and an internal progress event, then
// returns "done".
func stepsTool() tool.Tool {
	return tool.Tool{Name: "steps", Description: "Emits progress events.", Toolset: "debug",
		Execute: func(_ context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			half := 50.0
			if err := tc.Emit(tool.Progress{Message: "halfway there", Percent: &half, Audience: tool.AudienceDashboard}); err != nil {
				return tool.Result{}, err
			}
			if err := tc.Emit(tool.Progress{Message: "internal detail"}); err != nil {
				return tool.Result{}, err
			}
			return tool.Result{OK: true, Value: "done"}, nil
		}}
}

// env is a real embedded NATS server, a worker with the built-in tools and
// the steps tool, a client and a console connection.
type env struct {
	url    string
	client *client.Client
	conn   *bus.Conn
	worker *worker.Worker
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := bustest.Server(t)
	dir := workertest.Personalities(t, testPersonalities)
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), WorkerID: "console-worker", PersonalitiesDir: dir,
		Concurrency: 3, ShutdownGrace: time.Millisecond, SecretsBackend: worker.SecretsNone,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, append(builtin.All(), stepsTool())...)
	require.NoError(t, err)
	workertest.Run(t, w, nil)
	c, err := client.New(ctxT(t), client.Config{NATSURL: url, NATSCreds: bustest.Creds(url), Name: "console-test"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &env{url: url, client: c, conn: bustest.Conn(t, url, ""), worker: w}
}

// serve starts a console with tokens over httptest.
func (e *env) serve(t *testing.T, tokens []Token) (*Console, *httptest.Server) {
	t.Helper()
	con, err := New(Config{Client: e.client, Conn: e.conn, Tokens: tokens, TraceURL: "http://jaeger.test/trace/{trace_id}",
		Local:  &LocalWorker{ID: e.worker.ID(), Slots: 3, Version: "test", Readiness: e.worker.Readiness},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	stop, err := con.Start(context.Background())
	require.NoError(t, err)
	t.Cleanup(stop)
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	return con, srv
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// noRedirect is an HTTP client that returns redirects as they are.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// do sends a request with an optional bearer token and returns the status
// and body.
func do(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
