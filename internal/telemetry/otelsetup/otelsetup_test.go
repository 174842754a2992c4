package otelsetup_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/internal/telemetry/otelsetup"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestSetupPlan(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name              string
		env               map[string]string
		traces, metrics   bool
		err               string
		promIsAlwaysThere bool
	}{
		{name: "nothing set: no exporter", env: map[string]string{}},
		{name: "generic endpoint: both", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, traces: true, metrics: true},
		{name: "traces endpoint only", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, traces: true},
		{name: "exporter none wins over endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "prometheus"}},
		{name: "exporter otlp without endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, traces: true},
		{name: "sdk disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, traces: true, metrics: true},
		{name: "bad exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: `OTEL_TRACES_EXPORTER "zipkin" must be otlp or none`},
		{name: "bad metrics exporter", env: map[string]string{"OTEL_METRICS_EXPORTER": "statsd"}, err: `OTEL_METRICS_EXPORTER "statsd" must be otlp or none (or prometheus)`},
		{name: "bad protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, err: `OTEL_EXPORTER_OTLP_PROTOCOL "http/json" must be http/protobuf or grpc`},
		{name: "bad per-signal protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"}, err: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL "udp" must be http/protobuf or grpc`},
		{name: "bad sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "yes"}, err: `OTEL_SDK_DISABLED "yes" must be true or false`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tel, err := otelsetup.Setup(context.Background(), otelsetup.Config{ServiceName: "test", Getenv: envOf(c.env), Prometheus: true, Logger: quiet()})
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				_ = tel.Shutdown(ctx)
			})
			require.Equal(t, c.traces, tel.TracesExported)
			require.Equal(t, c.metrics, tel.MetricsExported)
			_, isSDK := tel.TracerProvider.(*sdktrace.TracerProvider)
			require.Equal(t, c.traces, isSDK, "no exporter means a no-op tracer provider")
			require.NotNil(t, tel.MetricsHandler(), "/metrics is served whatever OTEL_* says")
		})
	}
	_, err := otelsetup.Setup(context.Background(), otelsetup.Config{})
	require.ErrorContains(t, err, "ServiceName must be set")
}

// blockingExporter never finishes an export until released, like a
// collector that accepts the connection and never answers.
type blockingExporter struct {
	release chan struct{}
	mu      sync.Mutex
	got     int
}

func (e *blockingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	select {
	case <-e.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	e.mu.Lock()
	e.got += len(spans)
	e.mu.Unlock()
	return nil
}

func (e *blockingExporter) Shutdown(context.Context) error { return nil }

func TestStuckExporterDropsAndCountsSpans(t *testing.T) {
	t.Parallel()
	exp := &blockingExporter{release: make(chan struct{})}
	bsp := sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBlocking(), sdktrace.WithMaxQueueSize(4), sdktrace.WithMaxExportBatchSize(2))
	var drops int
	var mu sync.Mutex
	q := otelsetup.NewDropQueue(bsp, 4, func() { mu.Lock(); drops++; mu.Unlock() })
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q))
	tr := tp.Tracer("t")
	const n = 500
	for range n {
		_, s := tr.Start(context.Background(), "call")
		s.End() // must return although the exporter never answers
	}
	require.Positive(t, q.Dropped(), "a stuck exporter makes the queue drop spans")
	mu.Lock()
	require.Equal(t, int(q.Dropped()), drops, "every drop is counted")
	mu.Unlock()
	require.Less(t, q.Dropped(), uint64(n), "the queues hold some spans")

	close(exp.release)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, tp.ForceFlush(ctx))
	require.NoError(t, tp.Shutdown(ctx))
	exp.mu.Lock()
	defer exp.mu.Unlock()
	require.Equal(t, n-int(q.Dropped()), exp.got, "every span not dropped is exported")
}

// TestUnreachableCollectorNeverBlocksCalls runs the real OTLP exporter
// against a port nothing listens on.
func TestUnreachableCollectorNeverBlocksCalls(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "60000")
	tel, err := otelsetup.Setup(context.Background(), otelsetup.Config{ServiceName: "test", Prometheus: true, Logger: quiet(), SpanQueueSize: 8})
	require.NoError(t, err)
	require.True(t, tel.TracesExported)
	tr := tel.TracerProvider.Tracer("t")
	for range 2000 {
		_, s := tr.Start(context.Background(), "call")
		s.End()
	}
	require.Positive(t, tel.DroppedSpans())
	// The drop counter is a metric too.
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Contains(t, rec.Body.String(), "capstan_spans_dropped_total")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = tel.Shutdown(ctx)
}

func TestPrometheusNames(t *testing.T) {
	t.Parallel()
	tel, err := otelsetup.Setup(context.Background(), otelsetup.Config{ServiceName: "test", Getenv: envOf(nil), Prometheus: true})
	require.NoError(t, err)
	m := telemetry.Meter(tel.MeterProvider)
	c, err := m.Int64Counter(telemetry.MetricCalls)
	require.NoError(t, err)
	c.Add(context.Background(), 2)
	h, err := m.Float64Histogram(telemetry.MetricCallDuration, metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(telemetry.DurationBuckets...))
	require.NoError(t, err)
	h.Record(context.Background(), 0.2)
	g, err := m.Int64ObservableGauge(telemetry.MetricSlotsFree, metric.WithUnit("{slot}"))
	require.NoError(t, err)
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error { o.ObserveInt64(g, 3); return nil }, g)
	require.NoError(t, err)

	pf, err := m.Int64Counter(telemetry.MetricPublishFailures, metric.WithUnit("{failure}"))
	require.NoError(t, err)
	pf.Add(context.Background(), 1, metric.WithAttributes(telemetry.AttrPublishKind.String("result"), telemetry.AttrPublishReason.String("too_large")))
	bb, err := m.Int64Counter(telemetry.MetricBlobBytes, metric.WithUnit("By"))
	require.NoError(t, err)
	bb.Add(context.Background(), 5)

	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{"capstan_calls_total 2", `capstan_call_duration_seconds_bucket{le="0.25"} 1`, "capstan_slots_free 3",
		`capstan_publish_failures_total{capstan_publish_kind="result",capstan_publish_reason="too_large"} 1`, "capstan_blob_bytes_total 5"} {
		require.Contains(t, body, want)
	}
}
