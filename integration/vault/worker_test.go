package vault_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

const workerSecret = "ghp-worker-secret-0xC0FFEE"

// showSecret reads the secret named by its "ref" argument and returns it in
// its result, its error and a progress message: the worker must redact all
// three.
func showSecret() tool.Tool {
	return tool.Tool{
		Name:         "show_secret",
		Description:  "Returns a secret (a test tool).",
		Schema:       json.RawMessage(`{"type":"object","properties":{"ref":{"type":"string"},"fail":{"type":"boolean"}},"required":["ref"]}`),
		Capabilities: tool.Capabilities{Secrets: []string{"providers/*"}, SecretsRaw: []string{"providers/*"}},
		Execute: func(ctx context.Context, args json.RawMessage, tc *tool.Context) (tool.Result, error) {
			var a struct {
				Ref  string `json:"ref"`
				Fail bool   `json:"fail"`
			}
			if err := json.Unmarshal(args, &a); err != nil {
				return tool.Result{}, err
			}
			v, err := tc.Secrets.Secret(ctx, a.Ref)
			if err != nil {
				return tool.Result{}, err
			}
			if err := tc.Emit(tool.Progress{Message: "using " + v}); err != nil {
				return tool.Result{}, err
			}
			if a.Fail {
				return tool.Result{}, fmt.Errorf("upstream rejected %s", v)
			}
			return tool.OK("the token is " + v), nil
		},
	}
}

type workerRig struct {
	tv     *testVault
	w      *worker.Worker
	c      *client.Client
	logs   *syncBuffer
	secret string // the AppRole secret id
}

func startRig(t *testing.T, maxDeliver int) *workerRig {
	t.Helper()
	tv := startVault(t)
	tv.put(t, "capstan/providers/github", map[string]any{"token": workerSecret})
	roleID, secretID := tv.appRole(t, "worker", "", "", "capstan")

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "default.yaml"),
		[]byte("id: default\ntoolset: [show_secret]\nsecrets: {allow: [\"providers/*\"]}\n"), 0o600))
	url := bustest.Server(t)
	logs := &syncBuffer{}
	w, err := worker.New(worker.Config{
		NATSURL: url, NATSCreds: bustest.Creds(url), PersonalitiesDir: dir, WorkerID: "vault-w1", Concurrency: 4,
		MaxDeliver: maxDeliver, ShutdownGrace: time.Second,
		SecretsBackend: worker.SecretsVault,
		Vault:          worker.VaultConfig{Addr: tv.front.URL(), RoleID: roleID, SecretID: secretID},
		Logger:         slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, showSecret())
	require.NoError(t, err)
	workertest.Run(t, w, nil)
	c, err := client.New(t.Context(), client.Config{NATSURL: url, NATSCreds: bustest.Creds(url)})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &workerRig{tv: tv, w: w, c: c, logs: logs, secret: secretID}
}

func (r *workerRig) submit(t *testing.T, id, args string) {
	t.Helper()
	require.NoError(t, r.c.Submit(t.Context(), &client.Call{CallID: id, Tool: "show_secret", SessionID: "s", Args: json.RawMessage(args)}))
}

func (r *workerRig) await(t *testing.T, id string) client.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	res, err := r.c.Await(ctx, "", id)
	require.NoError(t, err)
	return res
}

// readyz returns /readyz's status code and body.
func (r *workerRig) readyz(t *testing.T) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	r.w.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

func TestWorkerReadsVaultAndRedacts(t *testing.T) {
	t.Parallel()
	r := startRig(t, 5)

	r.submit(t, "ok1", `{"ref":"providers/github/token"}`)
	res := r.await(t, "ok1")
	require.True(t, res.OK, "%s: %s", res.Code, res.Error)
	require.Equal(t, "the token is [REDACTED]", res.Value)
	progress := make(chan string, 8)
	stop, err := r.c.Progress(t.Context(), "internal", "ok1", true, func(p client.Progress) { progress <- p.Message })
	require.NoError(t, err)
	defer stop()
	select {
	case msg := <-progress:
		require.Equal(t, "using [REDACTED]", msg, "progress is redacted too")
	case <-time.After(30 * time.Second):
		t.Fatal("no progress event")
	}

	r.submit(t, "err1", `{"ref":"providers/github/token","fail":true}`)
	res = r.await(t, "err1")
	require.False(t, res.OK)
	require.Equal(t, "execution_failed", string(res.Code))
	require.Equal(t, "upstream rejected [REDACTED]", res.Error)

	r.submit(t, "missing", `{"ref":"providers/github/absent"}`)
	res = r.await(t, "missing")
	require.Equal(t, "execution_failed", string(res.Code))
	require.Equal(t, "secret not found", res.Error)

	r.submit(t, "undeclared", `{"ref":"other/token"}`)
	res = r.await(t, "undeclared")
	require.Equal(t, "SECRET_NOT_DECLARED: requested secret is not permitted for this tool", res.Error)

	code, body := r.readyz(t)
	require.Equal(t, http.StatusOK, code, body)
	requireNoSecret(t, r.logs.String(), workerSecret, r.secret)
}

func TestWorkerHandsCallsBackWhileVaultIsDown(t *testing.T) {
	t.Parallel()
	r := startRig(t, 5)

	r.submit(t, "before", `{"ref":"providers/github/token"}`)
	require.True(t, r.await(t, "before").OK)

	r.tv.front.Down()
	eventually(t, 30*time.Second, func() error {
		if code, body := r.readyz(t); code != http.StatusServiceUnavailable || !strings.Contains(body, "vault unreachable") {
			return fmt.Errorf("readyz %d %s", code, body)
		}
		return nil
	})

	// The cached value would hide the outage; a ref not read yet must ask Vault.
	r.tv.put(t, "capstan/providers/gitlab", map[string]any{"token": "gitlab-secret-value"})
	r.submit(t, "during", `{"ref":"providers/gitlab/token"}`)
	eventually(t, 30*time.Second, func() error {
		if !strings.Contains(r.logs.String(), `"msg":"infrastructure fault; call will be redelivered","call_id":"during"`) {
			return errNotYet
		}
		return nil
	})
	_, found, err := r.c.Result(t.Context(), "during")
	require.NoError(t, err)
	require.False(t, found, "a call that could not read its secret is handed back, not answered")

	r.tv.front.Up()
	res := r.await(t, "during")
	require.True(t, res.OK, "%s: %s", res.Code, res.Error)
	require.Equal(t, "the token is [REDACTED]", res.Value)
	require.GreaterOrEqual(t, res.Deliveries, 2, "it ran again once Vault was back")
	eventually(t, 30*time.Second, func() error {
		if code, body := r.readyz(t); code != http.StatusOK {
			return fmt.Errorf("readyz %d %s", code, body)
		}
		return nil
	})
	requireNoSecret(t, r.logs.String(), workerSecret, "gitlab-secret-value", r.secret)
}

func TestWorkerAbandonsACallWhenVaultStaysDown(t *testing.T) {
	t.Parallel()
	r := startRig(t, 2)
	r.tv.front.Down()
	r.submit(t, "doomed", `{"ref":"providers/github/token"}`)
	res := r.await(t, "doomed")
	require.False(t, res.OK)
	require.Equal(t, "execution_failed", string(res.Code))
	require.True(t, strings.HasPrefix(res.Error, "call abandoned after 2 deliveries: resolve secret: secrets backend unavailable: vault"), res.Error)
	requireNoSecret(t, r.logs.String(), workerSecret, r.secret)
}
