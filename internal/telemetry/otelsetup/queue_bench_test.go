package otelsetup_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/capstanhq/capstan/internal/telemetry/otelsetup"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// countingExporter counts the spans it is given and keeps none.
type countingExporter struct{ n atomic.Uint64 }

func (e *countingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.n.Add(uint64(len(spans)))
	return nil
}

func (e *countingExporter) Shutdown(context.Context) error { return nil }

// BenchmarkSpanHandOff ends spans from parallel goroutines through what a
// worker exports them with: a DropQueue in front of a blocking batch
// processor (one op is one span), and the batch processor alone for
// comparison.
func BenchmarkSpanHandOff(b *testing.B) {
	for _, tc := range []struct {
		name string
		proc func(next sdktrace.SpanExporter) sdktrace.SpanProcessor
	}{
		{"drop-queue", func(exp sdktrace.SpanExporter) sdktrace.SpanProcessor {
			return otelsetup.NewDropQueue(sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBlocking()), 0, nil)
		}},
		{"batch-processor-alone", func(exp sdktrace.SpanExporter) sdktrace.SpanProcessor {
			return sdktrace.NewBatchSpanProcessor(exp)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			exp := &countingExporter{}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(tc.proc(exp)))
			tr := tp.Tracer("bench")
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, s := tr.Start(context.Background(), "span")
					s.End()
				}
			})
			b.StopTimer()
			if err := tp.Shutdown(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}
