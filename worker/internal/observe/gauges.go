package observe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/telemetry"
	"go.opentelemetry.io/otel/metric"
)

// gaugeTimeout bounds the NATS requests of one metrics collection.
const gaugeTimeout = 2 * time.Second

// cacheStats is implemented by a secrets backend that caches (secrets.Cache).
type cacheStats interface {
	Stats() (hits, misses uint64)
}

// Pending is the pool's consumer, asked how many calls wait in it.
type Pending interface {
	Pending(ctx context.Context) (waiting uint64, unacked int, err error)
}

// LaneCount is one personality's calls as the scheduler knows them: waiting
// in its consumer (the last count seen), and running on this worker.
type LaneCount struct {
	Personality string
	Waiting     uint64
	Running     int
}

// Queue reports the scheduler's lanes for capstan.calls.waiting and
// capstan.calls.running; PerPersonality labels them by personality
// (CAPSTAN_METRICS_PERSONALITY_LABEL), else they are the pool's totals.
type Queue struct {
	Lanes          func() []LaneCount
	PerPersonality bool
}

// StreamSizer counts a stream's messages.
type StreamSizer interface {
	StreamMsgs(ctx context.Context, stream string) (uint64, error)
}

// Gauges registers the observable metrics of a running worker: calls
// in flight, free slots, calls pending for the pool, the DLQ's size and the
// secret cache's hits and misses. They are read when the metrics are
// collected (a Prometheus scrape, an OTLP export); a NATS request that fails
// then leaves its metric out of that collection. The returned function
// unregisters them.
//
// concurrency is the worker's slots; secrets is its secrets backend, whose
// cache statistics are read when it has them (secrets.Cache).
func (o *Observer) Gauges(cons Pending, queue Queue, conn StreamSizer, secrets any, concurrency int) (func(), error) {
	m := telemetry.Meter(o.mp)
	var errs []error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	inFlight := gauge(telemetry.MetricCallsInFlight, "{call}", "Call deliveries this worker is handling")
	free := gauge(telemetry.MetricSlotsFree, "{slot}", "Free call slots of this worker: CAPSTAN_CONCURRENCY minus calls in flight")
	pending := gauge(telemetry.MetricCallsPending, "{call}", "Calls waiting in the pool's consumer, not yet delivered (the autoscaling signal)")
	dlq := gauge(telemetry.MetricDLQSize, "{message}", "Dead letters in the DLQ stream")
	waitingG := gauge(telemetry.MetricCallsWaiting, "{call}", "Calls waiting to start, per personality with CAPSTAN_METRICS_PERSONALITY_LABEL=true, else the pool's total (the last count each personality's consumer gave)")
	runningG := gauge(telemetry.MetricCallsRunning, "{call}", "Calls this worker runs, per personality with CAPSTAN_METRICS_PERSONALITY_LABEL=true, else in total")
	hits, err := m.Int64ObservableCounter(telemetry.MetricSecretCacheHits, metric.WithUnit("{lookup}"),
		metric.WithDescription("Secret resolutions answered from the cache"))
	errs = append(errs, err)
	misses, err := m.Int64ObservableCounter(telemetry.MetricSecretCacheMiss, metric.WithUnit("{lookup}"),
		metric.WithDescription("Secret resolutions that asked the backend"))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("worker: metrics: %w", err)
	}
	pool := metric.WithAttributes(telemetry.AttrPool.String(o.cfg.Pool))
	reg, err := m.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		busy := o.busy.Load()
		obs.ObserveInt64(inFlight, busy, pool)
		obs.ObserveInt64(free, int64(concurrency)-busy, pool)
		if c, ok := secrets.(cacheStats); ok {
			h, m := c.Stats()
			obs.ObserveInt64(hits, int64(h))
			obs.ObserveInt64(misses, int64(m))
		}
		ctx, cancel := context.WithTimeout(ctx, gaugeTimeout)
		defer cancel()
		if waiting, _, err := cons.Pending(ctx); err == nil {
			obs.ObserveInt64(pending, int64(waiting), pool)
		}
		if n, err := conn.StreamMsgs(ctx, o.cfg.Names.DLQStream()); err == nil {
			obs.ObserveInt64(dlq, int64(n))
		}
		if queue.Lanes != nil {
			var waiting, running int64
			for _, l := range queue.Lanes() {
				if queue.PerPersonality {
					by := metric.WithAttributes(telemetry.AttrPool.String(o.cfg.Pool), telemetry.AttrQueuePersonality.String(l.Personality))
					obs.ObserveInt64(waitingG, int64(l.Waiting), by)
					obs.ObserveInt64(runningG, int64(l.Running), by)
				}
				waiting += int64(l.Waiting)
				running += int64(l.Running)
			}
			if !queue.PerPersonality {
				obs.ObserveInt64(waitingG, waiting, pool)
				obs.ObserveInt64(runningG, running, pool)
			}
		}
		return nil
	}, inFlight, free, pending, dlq, waitingG, runningG, hits, misses)
	if err != nil {
		return nil, fmt.Errorf("worker: metrics: %w", err)
	}
	return func() { _ = reg.Unregister() }, nil
}
