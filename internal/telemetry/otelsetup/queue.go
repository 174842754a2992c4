package otelsetup

import (
	"context"
	"sync"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// DefaultSpanQueueSize is the capacity of a DropQueue made with size 0.
const DefaultSpanQueueSize = 2048

// DropQueue is a span processor that never blocks the code ending a span: it
// hands ended spans to the next processor (a blocking batch processor) from
// its own goroutine, and when it already holds size spans it drops the span
// and counts it. A collector that is down or slow therefore costs memory up
// to the two queues, never call latency.
//
// Ending a span appends it to a slice under a mutex; the goroutine is woken
// only when that slice goes from empty to not empty, and then hands on
// everything gathered meanwhile, so a busy worker wakes it once per batch of
// spans rather than once per span.
type DropQueue struct {
	next   sdktrace.SpanProcessor
	onDrop func()
	size   int
	wake   chan struct{} // holds a token when the goroutine has work

	mu       sync.Mutex
	pending  []sdktrace.ReadOnlySpan // ended spans not yet taken by the goroutine
	handing  int                     // spans the goroutine took and is handing on
	flushes  []chan struct{}         // closed once what was queued before them is handed on
	closed   bool
	dropped  atomic.Uint64
	done     chan struct{}
	shutOnce sync.Once
}

var _ sdktrace.SpanProcessor = (*DropQueue)(nil)

// NewDropQueue returns a DropQueue of size spans (0 = DefaultSpanQueueSize)
// in front of next. onDrop, when not nil, is called for every dropped span;
// it must not block.
func NewDropQueue(next sdktrace.SpanProcessor, size int, onDrop func()) *DropQueue {
	if size <= 0 {
		size = DefaultSpanQueueSize
	}
	q := &DropQueue{next: next, onDrop: onDrop, size: size, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run()
	return q
}

// signal wakes the goroutine, or leaves the token it has not taken yet.
func (q *DropQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run hands on the spans gathered since it last looked, with the batch's
// flush markers, until the queue is shut down and drained.
func (q *DropQueue) run() {
	defer close(q.done)
	var batch []sdktrace.ReadOnlySpan
	for range q.wake {
		for {
			q.mu.Lock()
			batch, q.pending = q.pending, batch[:0]
			q.handing = len(batch)
			flushes := q.flushes
			q.flushes = nil
			closed := q.closed
			q.mu.Unlock()
			if len(batch) == 0 && len(flushes) == 0 {
				if closed {
					return
				}
				break
			}
			for _, s := range batch {
				q.next.OnEnd(s)
			}
			clear(batch) // keep no span alive
			for _, f := range flushes {
				close(f)
			}
		}
	}
}

// OnStart passes the span on (batch processors do nothing with it).
func (q *DropQueue) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	q.next.OnStart(parent, s)
}

// OnEnd queues a sampled span, or drops and counts it when the queue is full
// or the processor is shut down. It never blocks.
func (q *DropQueue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	if len(q.pending)+q.handing >= q.size {
		q.mu.Unlock()
		q.dropped.Add(1)
		if q.onDrop != nil {
			q.onDrop()
		}
		return
	}
	q.pending = append(q.pending, s)
	first := len(q.pending) == 1
	q.mu.Unlock()
	if first {
		q.signal()
	}
}

// Dropped returns how many spans were dropped because the queue was full.
func (q *DropQueue) Dropped() uint64 { return q.dropped.Load() }

// ForceFlush waits until every span queued before it reached the next
// processor, then flushes that one, within ctx.
func (q *DropQueue) ForceFlush(ctx context.Context) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	flushed := make(chan struct{})
	q.flushes = append(q.flushes, flushed)
	q.mu.Unlock()
	q.signal()
	select {
	case <-flushed:
	case <-ctx.Done():
		return ctx.Err()
	}
	return q.next.ForceFlush(ctx)
}

// Shutdown stops taking spans, hands the queued ones on and shuts the next
// processor down, within ctx.
func (q *DropQueue) Shutdown(ctx context.Context) error {
	q.shutOnce.Do(func() {
		q.mu.Lock()
		q.closed = true
		q.mu.Unlock()
		q.signal()
	})
	select {
	case <-q.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return q.next.Shutdown(ctx)
}
