package workercmd

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/stretchr/testify/require"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestHTTPEndpoints runs the worker in-process with no OTEL_* set (no
// exporter) and reads /healthz, /readyz and /metrics on CAPSTAN_HTTP_ADDR.
func TestHTTPEndpoints(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url), "CAPSTAN_HTTP_ADDR": "127.0.0.1:0", "CAPSTAN_WORKER_ID": "http-1",
		"CAPSTAN_LOG_FORMAT": "json", "CAPSTAN_SHUTDOWN_GRACE": "0s"}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &lockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, nil, func(k string) string { return env[k] }, io.Discard, logs) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("worker did not stop")
		}
	}()

	var addr string
	require.Eventually(t, func() bool {
		for line := range strings.SplitSeq(logs.String(), "\n") {
			var l struct {
				Msg, Addr string
				Traces    bool `json:"traces_exported"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l.Msg, "http endpoints") {
				addr = l.Addr
				require.False(t, l.Traces, "no OTEL_* set: no exporter")
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "no http endpoints line: %s", logs)

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := get("/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	require.Eventually(t, func() bool { code, _ := get("/readyz"); return code == http.StatusOK }, 30*time.Second, 20*time.Millisecond)
	_, body = get("/readyz")
	var rd struct {
		Status  string                     `json:"status"`
		Checks  map[string]string          `json:"checks"`
		Details map[string]json.RawMessage `json:"details"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &rd), body)
	require.Equal(t, "ready", rd.Status)
	require.Equal(t, map[string]string{"consuming": "ok", "nats": "ok", "streams": "ok", "secrets": "ok", "slots": "ok", "disk": "ok"}, rd.Checks)
	require.Contains(t, rd.Details, "process_sandbox", body)
	require.JSONEq(t, `"on: bucket capstan_blobs"`, string(rd.Details["blobs"]))
	require.Contains(t, string(rd.Details["process_sandbox"]), `"landlock_abi":`)
	code, body = get("/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, m := range []string{`capstan_slots_free{capstan_pool="default"} 64`, `capstan_calls_in_flight{capstan_pool="default"} 0`,
		`capstan_calls_pending{capstan_pool="default"} 0`, "capstan_dlq_size 0", `service_name="capstan-worker"`} {
		require.Contains(t, body, m)
	}
	require.NotContains(t, logs.String(), "telemetry export failed")
}
