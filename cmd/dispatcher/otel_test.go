package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is a loopback OTLP/HTTP trace receiver.
type collector struct {
	mu    sync.Mutex
	names map[string]string // span name -> service.name
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.names[s.Name] = service
			}
		}
	}
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// TestDispatcherExportsTraces runs one call in local mode with
// OTEL_EXPORTER_OTLP_ENDPOINT pointing at a loopback OTLP receiver: the
// dispatcher's producer span and the local pool's spans are exported by the
// real OTLP exporter before the command exits. (t.Setenv: the exporter reads
// the process environment, so this test is not parallel.)
func TestDispatcherExportsTraces(t *testing.T) {
	col := &collector{names: map[string]string{}}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	env := map[string]string{"CAPSTAN_DATA_DIR": t.TempDir(), "CAPSTAN_CONCURRENCY": "2",
		"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, "OTEL_METRICS_EXPORTER": "none"}
	noServer := func(a *app) { a.probeURL = "nats://127.0.0.1:1" }
	code, stdout, stderr := runApp(t, ctxT(t), noServer, env, "", "call", "echo", "--args", `{"text":"traced"}`)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "traced\n", stdout)
	require.NotContains(t, stderr, "telemetry export failed")

	// Shutdown flushed the spans before the command returned.
	col.mu.Lock()
	defer col.mu.Unlock()
	require.Equal(t, "capstan-dispatcher", col.names["send capstan.call.default.default.echo"], "spans: %v", col.names)
	require.Equal(t, "capstan-dispatcher", col.names["process capstan.call.default.default.echo"], "the local pool's spans: %v", col.names)
	require.Contains(t, col.names, "execute_tool echo")
}
