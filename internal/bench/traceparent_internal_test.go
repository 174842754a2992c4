package bench

import (
	"context"
	"testing"

	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// TestTraceparentIsSampledAndValid checks that the load generator's
// traceparent is one the worker reads: valid, sampled, remote, and written
// back identically by the propagator.
func TestTraceparentIsSampledAndValid(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		tp := traceparent()
		require.Len(t, tp, 55)
		sc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), map[string][]string{"traceparent": {tp}}))
		require.True(t, sc.IsValid(), tp)
		require.True(t, sc.IsSampled(), tp)
		require.True(t, sc.IsRemote(), tp)
		out := map[string][]string{}
		telemetry.Inject(trace.ContextWithSpanContext(context.Background(), sc), out)
		require.Equal(t, tp, out["traceparent"][0])
		require.False(t, seen[tp], "ids are random")
		seen[tp] = true
	}
}
