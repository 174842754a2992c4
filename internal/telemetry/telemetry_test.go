package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/internal/telemetry/telemetrytest"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

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
