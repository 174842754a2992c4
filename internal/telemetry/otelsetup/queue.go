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
// its own goroutine through a bounded queue, and when that queue is full it
// drops the span and counts it. A collector that is down or slow therefore
// costs memory up to the two queues, never call latency.
type DropQueue struct {
	next   sdktrace.SpanProcessor
	onDrop func()
	queue  chan item

	mu      sync.RWMutex // guards closing queue against OnEnd and ForceFlush
	closed  bool
	dropped atomic.Uint64
	done    chan struct{}
	once    sync.Once
}

// item is a span to hand on, or a flush marker (flushed set).
type item struct {
	span    sdktrace.ReadOnlySpan
	flushed chan struct{}
}

var _ sdktrace.SpanProcessor = (*DropQueue)(nil)

// NewDropQueue returns a DropQueue of size spans (0 = DefaultSpanQueueSize)
// in front of next. onDrop, when not nil, is called for every dropped span;
// it must not block.
func NewDropQueue(next sdktrace.SpanProcessor, size int, onDrop func()) *DropQueue {
	if size <= 0 {
		size = DefaultSpanQueueSize
	}
	q := &DropQueue{next: next, onDrop: onDrop, queue: make(chan item, size), done: make(chan struct{})}
	go q.run()
	return q
}

func (q *DropQueue) run() {
	defer close(q.done)
	for it := range q.queue {
		if it.flushed != nil {
			close(it.flushed)
			continue
		}
		q.next.OnEnd(it.span)
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
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return
	}
	select {
	case q.queue <- item{span: s}:
	default:
		q.dropped.Add(1)
		if q.onDrop != nil {
			q.onDrop()
		}
	}
}

// Dropped returns how many spans were dropped because the queue was full.
func (q *DropQueue) Dropped() uint64 { return q.dropped.Load() }

// ForceFlush waits until every span queued before it reached the next
// processor, then flushes that one, within ctx.
func (q *DropQueue) ForceFlush(ctx context.Context) error {
	q.mu.RLock()
	if q.closed {
		q.mu.RUnlock()
		return nil
	}
	flushed := make(chan struct{})
	select {
	case q.queue <- item{flushed: flushed}:
		q.mu.RUnlock()
	case <-ctx.Done():
		q.mu.RUnlock()
		return ctx.Err()
	}
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
	q.once.Do(func() {
		q.mu.Lock()
		q.closed = true
		close(q.queue)
		q.mu.Unlock()
	})
	select {
	case <-q.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return q.next.Shutdown(ctx)
}
