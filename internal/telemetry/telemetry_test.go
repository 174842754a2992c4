package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/internal/telemetry/telemetrytest"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestCarrierIsCaseSensitiveAndLowerCase(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	cases := []struct {
		name   string
		header map[string][]string
		valid  bool
	}{
		{"lower-case from another language", map[string][]string{"traceparent": {tp}}, true},
		{"canonical MIME case is not the trace context", map[string][]string{"Traceparent": {tp}}, false},
		{"upper case is not the trace context", map[string][]string{"TRACEPARENT": {tp}}, false},
		{"malformed", map[string][]string{"traceparent": {"00-zz-yy-01"}}, false},
		{"absent", map[string][]string{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), c.header))
			require.Equal(t, c.valid, sc.IsValid())
			if c.valid {
				require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
				require.True(t, sc.IsRemote())
			}
		})
	}
}

func TestInjectWritesLowerCaseNamesAndNoBaggage(t *testing.T) {
	t.Parallel()
	tp, _ := telemetrytest.Tracing(t)
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	m, err := baggage.NewMember("user", "alice")
	require.NoError(t, err)
	b, err := baggage.New(m)
	require.NoError(t, err)
	ctx = baggage.ContextWithBaggage(ctx, b)
	ts, err := trace.ParseTraceState("vendor=value")
	require.NoError(t, err)
	ctx = trace.ContextWithSpanContext(ctx, span.SpanContext().WithTraceState(ts))

	h := map[string][]string{}
	telemetry.Inject(ctx, h)
	require.ElementsMatch(t, []string{"traceparent", "tracestate"}, telemetry.HeaderCarrier(h).Keys())
	require.Equal(t, "vendor=value", h["tracestate"][0])
	require.Contains(t, h["traceparent"][0], span.SpanContext().TraceID().String())
}

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
			tel, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "test", Getenv: envOf(c.env), Prometheus: true, Logger: quiet()})
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
	_, err := telemetry.Setup(context.Background(), telemetry.Config{})
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
	q := telemetry.NewDropQueue(bsp, 4, func() { mu.Lock(); drops++; mu.Unlock() })
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
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "test", Prometheus: true, Logger: quiet(), SpanQueueSize: 8})
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
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{ServiceName: "test", Getenv: envOf(nil), Prometheus: true})
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

func TestHTTPTransportKeepsURLsOffSpans(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "fail") {
			w.WriteHeader(http.StatusInternalServerError)
		}
		_, _ = io.WriteString(w, r.Header.Get("traceparent"))
	}))
	t.Cleanup(srv.Close)
	tp, rec := telemetrytest.Tracing(t)
	client := &http.Client{Transport: telemetry.HTTPTransport(http.DefaultTransport, tp, noop.NewMeterProvider())}
	ctx, parent := tp.Tracer("t").Start(context.Background(), "execute")
	const secret = "tok-1234567890"
	for _, u := range []string{srv.URL + "/users/" + secret + "?key=" + secret, srv.URL + "/fail/" + secret, "http://127.0.0.1:1/" + secret} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		require.NoError(t, err)
		req.Header.Set("User-Agent", secret)
		if resp, err := client.Do(req); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Contains(t, string(body), parent.SpanContext().TraceID().String(), "trace context is injected")
		}
	}
	req, err := http.NewRequestWithContext(ctx, "XSECRETX", srv.URL, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	parent.End()

	spans := rec.Ended()
	require.Len(t, spans, 5)
	for _, s := range spans {
		if s.Name() == "execute" {
			continue
		}
		require.Contains(t, []string{"GET", "HTTP"}, s.Name())
		require.NotContains(t, s.Status().Description, secret)
		for _, kv := range s.Attributes() {
			require.NotContains(t, kv.Value.String(), secret, "attribute %s", kv.Key)
			require.NotContains(t, kv.Value.String(), "XSECRETX", "attribute %s", kv.Key)
			if kv.Key == "url.full" {
				require.NotContains(t, strings.TrimPrefix(kv.Value.String(), "http://"), "/", "url.full is only the origin")
			}
		}
		for _, e := range s.Events() {
			for _, kv := range e.Attributes {
				require.NotContains(t, kv.Value.String(), secret)
			}
		}
	}
}

func TestTraceHandlerAddsTraceID(t *testing.T) {
	t.Parallel()
	var buf strings.Builder
	log := slog.New(telemetry.TraceHandler(slog.NewJSONHandler(&buf, nil))).With("worker_id", "w1")
	tp, _ := telemetrytest.Tracing(t)
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	log.InfoContext(ctx, "call finished", "call_id", "c1")
	log.Info("no span")
	span.End()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	require.Contains(t, lines[0], `"trace_id":"`+span.SpanContext().TraceID().String()+`"`)
	require.Contains(t, lines[0], `"span_id":"`+span.SpanContext().SpanID().String()+`"`)
	require.Contains(t, lines[0], `"worker_id":"w1"`)
	require.NotContains(t, lines[1], "trace_id")
}
