package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// HTTPTransport wraps next with otelhttp client spans (and metrics) made by
// tp and mp, for the tools' outbound requests. Only the W3C trace context is
// injected into the request (never baggage).
//
// The URL of a tool's request comes from its arguments and may carry
// credentials in its path or query, so the spans keep only attributes that
// cannot: the method (a standard one, else _OTHER), the scheme, the origin
// (scheme://host[:port]) as url.full, server.address and server.port, the
// protocol, the status code and error.type. Status descriptions and error
// messages are dropped; an error is recorded by its Go type only.
func HTTPTransport(next http.RoundTripper, tp trace.TracerProvider, mp metric.MeterProvider) http.RoundTripper {
	return otelhttp.NewTransport(next,
		otelhttp.WithTracerProvider(scrubProvider{tp: tp}),
		otelhttp.WithMeterProvider(mp),
		otelhttp.WithPropagators(Propagator()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return httpSpanName(r.Method) }),
	)
}

var standardMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true,
	http.MethodDelete: true, http.MethodConnect: true, http.MethodOptions: true, http.MethodTrace: true,
}

// httpSpanName is "{method}" for a standard method and "HTTP" otherwise
// (OTel HTTP conventions): a made-up method is an argument value.
func httpSpanName(method string) string {
	if standardMethods[method] {
		return method
	}
	return "HTTP"
}

// safeHTTPKeys are the only attributes an HTTP client span keeps.
var safeHTTPKeys = map[attribute.Key]bool{
	"http.request.method":       true,
	"http.response.status_code": true,
	"server.address":            true,
	"server.port":               true,
	"network.protocol.name":     true,
	"network.protocol.version":  true,
	"error.type":                true,
	"url.scheme":                true,
}

// scrubHTTP keeps the safe attributes and cuts url.full to its origin.
func scrubHTTP(kvs []attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		switch {
		case kv.Key == "url.full":
			if u, err := url.Parse(kv.Value.AsString()); err == nil && u.Host != "" {
				out = append(out, attribute.String("url.full", u.Scheme+"://"+u.Host))
			}
		case safeHTTPKeys[kv.Key]:
			out = append(out, kv)
		}
	}
	return out
}

type scrubProvider struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

func (p scrubProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return scrubTracer{t: p.tp.Tracer(name, opts...)}
}

type scrubTracer struct {
	embedded.Tracer
	t trace.Tracer
}

func (t scrubTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	clean := []trace.SpanStartOption{
		trace.WithAttributes(scrubHTTP(cfg.Attributes())...),
		trace.WithSpanKind(cfg.SpanKind()),
		trace.WithLinks(cfg.Links()...),
	}
	if ts := cfg.Timestamp(); !ts.IsZero() {
		clean = append(clean, trace.WithTimestamp(ts))
	}
	if cfg.NewRoot() {
		clean = append(clean, trace.WithNewRoot())
	}
	ctx, s := t.t.Start(ctx, name, clean...)
	ss := scrubSpan{Span: s}
	return trace.ContextWithSpan(ctx, ss), ss
}

// scrubSpan filters what otelhttp records after the start.
type scrubSpan struct{ trace.Span }

func (s scrubSpan) SetAttributes(kvs ...attribute.KeyValue) { s.Span.SetAttributes(scrubHTTP(kvs)...) }

// SetStatus keeps the code and drops the description (an error message that
// may quote the URL or the response).
func (s scrubSpan) SetStatus(code codes.Code, _ string) { s.Span.SetStatus(code, "") }

// RecordError records the error's Go type only.
func (s scrubSpan) RecordError(err error, _ ...trace.EventOption) {
	if err == nil {
		return
	}
	s.Span.AddEvent("exception", trace.WithAttributes(attribute.String("exception.type", fmt.Sprintf("%T", err))))
}

func (s scrubSpan) AddEvent(name string, opts ...trace.EventOption) {
	cfg := trace.NewEventConfig(opts...)
	s.Span.AddEvent(name, trace.WithAttributes(scrubHTTP(cfg.Attributes())...), trace.WithTimestamp(cfg.Timestamp()))
}

func (s scrubSpan) TracerProvider() trace.TracerProvider {
	return scrubProvider{tp: s.Span.TracerProvider()}
}
