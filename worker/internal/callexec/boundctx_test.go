package callexec

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// A bus operation's context keeps the call's span, has OpTimeout, and ends
// with the worker's operations context; a caller's context that can end
// ends it too.
func TestBoundCtx(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled})
	callCtx := trace.ContextWithSpanContext(context.Background(), sc)

	t.Run("a call's context", func(t *testing.T) {
		ops, stopOps := context.WithCancel(context.Background())
		s := &Services{ops: ops}
		ctx, cancel := s.BoundCtx(callCtx)
		defer cancel()
		assert.Equal(t, sc, trace.SpanContextFromContext(ctx), "the call's span")
		deadline, ok := ctx.Deadline()
		require.True(t, ok)
		assert.WithinDuration(t, time.Now().Add(OpTimeout), deadline, time.Second)
		require.NoError(t, ctx.Err())
		stopOps()
		requireDone(t, ctx, "ends with the operations context")
	})

	t.Run("a context that can end", func(t *testing.T) {
		s := &Services{ops: context.Background()}
		parent, cancelParent := context.WithCancel(callCtx)
		ctx, cancel := s.BoundCtx(parent)
		defer cancel()
		assert.Equal(t, sc, trace.SpanContextFromContext(ctx))
		require.NoError(t, ctx.Err())
		cancelParent()
		requireDone(t, ctx, "ends with its caller's context")
	})
}

func requireDone(t *testing.T, ctx context.Context, msg string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal(msg + ": still not done after 5s")
	}
}
