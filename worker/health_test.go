package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func readiness(t *testing.T, h http.Handler) (int, worker.Readiness) {
	t.Helper()
	code, body := get(t, h, "/readyz")
	var rd worker.Readiness
	require.NoError(t, json.Unmarshal([]byte(body), &rd), body)
	return code, rd
}

func TestHealthEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, err := worker.New(worker.Config{NATSURL: e.url, NATSCreds: bustest.Creds(e.url), Logger: quietLogger()}, echo.Tool())
	require.NoError(t, err)
	h := w.Handler()

	code, body := get(t, h, "/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)

	code, rd := readiness(t, h)
	require.Equal(t, http.StatusServiceUnavailable, code, "not ready before Run")
	require.Equal(t, "not_ready", rd.Status)
	require.Equal(t, "not consuming calls yet", rd.Checks["consuming"])

	w = e.start(worker.Config{}, echo.Tool())
	h = w.Handler()
	code, rd = readiness(t, h)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready", rd.Status)
	require.Equal(t, map[string]string{"consuming": "ok", "nats": "ok", "streams": "ok", "secrets": "ok", "slots": "ok", "disk": "ok"}, rd.Checks)
	// The process sandbox's status, as the kernel allows it.
	sb, err := json.Marshal(process.Sandbox())
	require.NoError(t, err)
	var want map[string]any
	require.NoError(t, json.Unmarshal(sb, &want))
	require.Equal(t, map[string]any{"process_sandbox": want, "blobs": "on: bucket capstan_blobs"}, rd.Details)
	w.SetReadyDetail("process_sandbox", nil)
	w.SetReadyDetail("blobs", nil)

	// Other parts add checks and details.
	w.SetReadyDetail("sandbox", map[string]any{"landlock": "abi 4"})
	w.AddReadyCheck("sandbox", func(context.Context) error { return errors.New("landlock unavailable") })
	code, rd = readiness(t, h)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not_ready", rd.Status)
	require.Equal(t, "landlock unavailable", rd.Checks["sandbox"])
	require.Equal(t, "ok", rd.Checks["nats"])
	require.Equal(t, map[string]any{"sandbox": map[string]any{"landlock": "abi 4"}}, rd.Details)

	w.AddReadyCheck("sandbox", func(context.Context) error { panic("oops") })
	_, rd = readiness(t, h)
	require.Equal(t, "check panicked", rd.Checks["sandbox"])
	w.AddReadyCheck("sandbox", func(context.Context) error { return nil })
	w.SetReadyDetail("sandbox", nil)
	code, rd = readiness(t, h)
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, rd.Details)

	code, _ = get(t, h, "/nope")
	require.Equal(t, http.StatusNotFound, code)
}
