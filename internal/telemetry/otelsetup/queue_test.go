package otelsetup_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/telemetry/otelsetup"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
)

// TestDropQueueHandsOnEverySpan ends spans from many goroutines while
// others flush: every span is handed on exactly once or dropped and
// counted, a flush returns only once the spans ended before it reached the
// next processor, and shutting down drains the queue and stops its
// goroutine.
func TestDropQueueHandsOnEverySpan(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tc := range []struct {
		name string
		size int
	}{
		{"room for every span", 1 << 13},
		{"default size", 0},
		{"tiny, dropping", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			var onDrop atomic.Int64
			q := otelsetup.NewDropQueue(rec, tc.size, func() { onDrop.Add(1) })
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q), sdktrace.WithSampler(sdktrace.AlwaysSample()))
			tr := tp.Tracer("t")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			const goroutines, perGoroutine = 8, 500
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range perGoroutine {
						_, s := tr.Start(context.Background(), "span")
						s.End()
						if g == 0 && i%100 == 0 {
							// A span ended before a flush has reached the
							// recorder (or was dropped) once the flush returns.
							before := q.Dropped()
							_, marker := tr.Start(context.Background(), "marker")
							marker.End()
							require.NoError(t, q.ForceFlush(ctx))
							found := false
							for _, e := range rec.Ended() {
								if e.SpanContext().SpanID() == marker.SpanContext().SpanID() {
									found = true
								}
							}
							require.True(t, found || q.Dropped() > before, "the marker is handed on or dropped before the flush returns")
						}
					}
				})
			}
			wg.Wait()
			require.NoError(t, tp.Shutdown(ctx))
			markers := perGoroutine / 100 // goroutine 0 ends one before each flush
			handed := len(rec.Ended())
			require.Equal(t, goroutines*perGoroutine+markers, handed+int(q.Dropped()), "every span is handed on or dropped")
			seen := map[[8]byte]bool{}
			for _, s := range rec.Ended() {
				id := [8]byte(s.SpanContext().SpanID())
				require.False(t, seen[id], "a span is handed on once")
				seen[id] = true
			}
			require.Equal(t, int64(q.Dropped()), onDrop.Load(), "every drop is reported")
			if tc.size > goroutines*perGoroutine+markers {
				require.Zero(t, q.Dropped(), "a queue with room for every span drops none")
			}

			// After shutdown nothing is taken, and a flush returns at once.
			_, s := tr.Start(context.Background(), "late")
			s.End()
			require.NoError(t, q.ForceFlush(ctx))
			require.Equal(t, handed, len(rec.Ended()))
		})
	}
}
