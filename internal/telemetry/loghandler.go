package telemetry

import (
	"context"
	"encoding/hex"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// TraceHandler wraps h so that a record logged with a context that carries a
// valid span context gets trace_id and span_id attributes: a log line of a
// call leads to its trace.
func TraceHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(traceHandler); ok {
		return h
	}
	return traceHandler{h}
}

type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		ids := traceIDs(sc)
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", ids[:32]), slog.String("span_id", ids[32:]))
	}
	return h.Handler.Handle(ctx, r)
}

// traceIDs returns the trace id and the span id of sc in lower-case hex,
// as TraceID.String and SpanID.String write them, in one string (one
// allocation instead of four): the trace id is its first 32 bytes.
func traceIDs(sc trace.SpanContext) string {
	var buf [48]byte
	tid, sid := sc.TraceID(), sc.SpanID()
	hex.Encode(buf[:32], tid[:])
	hex.Encode(buf[32:], sid[:])
	return string(buf[:])
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
