package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier carries the W3C trace context in NATS message headers. NATS
// header names are case-sensitive, so the carrier reads and writes exactly
// the names the propagator gives it: "traceparent" and "tracestate" in lower
// case, as clients in other languages write them. A "Traceparent" header is
// not the trace context. It converts from and to any map[string][]string,
// such as bus.Header.
type HeaderCarrier map[string][]string

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key exactly as spelled, or "".
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key.
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys returns the header names.
func (c HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// Propagator is the only propagator Capstan uses: W3C trace context
// (traceparent, tracestate). Baggage is never propagated.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// Inject writes the span context of ctx into h (nothing when ctx has no
// valid span context).
func Inject(ctx context.Context, h map[string][]string) {
	Propagator().Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx with the remote span context read from h, when h
// carries a valid one.
func Extract(ctx context.Context, h map[string][]string) context.Context {
	return Propagator().Extract(ctx, HeaderCarrier(h))
}
