package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/internal/telemetry/telemetrytest"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// recorder is a tool that records, across every worker of the test, the
// order in which calls start and how many of each personality run at
// once; each call runs until the test lets calls go (gate) and then for
// about 5 ms.
type recorder struct {
	mu      sync.Mutex
	starts  []string // personality of each start, in order
	running map[string]int
	peak    map[string]int
	gate    chan struct{}
}

func newRecorder() *recorder {
	return &recorder{running: map[string]int{}, peak: map[string]int{}, gate: make(chan struct{})}
}

func (r *recorder) tool() tool.Tool {
	return tool.Tool{Name: "work", Description: "Records when it runs.", Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
		p := tc.PersonalityID
		r.mu.Lock()
		r.starts = append(r.starts, p)
		r.running[p]++
		r.peak[p] = max(r.peak[p], r.running[p])
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.running[p]--
			r.mu.Unlock()
		}()
		select {
		case <-r.gate:
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
		t := time.NewTimer(5 * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
		return tool.OK("done"), nil
	}}
}

func (r *recorder) snapshot() (starts []string, peak map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	peak = map[string]int{}
	for k, v := range r.peak {
		peak[k] = v
	}
	return append([]string(nil), r.starts...), peak
}

// TestSchedulingAcrossAFleet (scheduling.md) with three workers of four
// slots each on one pool: a personality capped at 3 never has more than 3
// calls running across the fleet, however many wait and however many
// slots are free; personalities of weights 3 and 1, both backlogged, start
// three calls to one while both wait (the bound: each worker's stride
// keeps every personality within one chunk of its share, and a chunk is
// one call while the lanes waiting are no more than the free slots, else
// at most the free slots: here three lanes and four slots, so at most two
// calls; the fleet within two calls per worker); and a call of priority 1 published
// behind those backlogs starts before any more of them.
func TestSchedulingAcrossAFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPersonality("capped", "id: capped\nscheduling: {max_concurrency: 3}\n")
	e.putPersonality("heavy", "id: heavy\nscheduling: {weight: 3}\n")
	e.putPersonality("light", "id: light\nscheduling: {weight: 1}\n")
	e.putPersonality("urgent", "id: urgent\nscheduling: {priority: 1}\n")
	rec := newRecorder()
	// The backlogs are published before any worker runs, so every worker
	// sees both from its first look.
	const each = 60
	for i := range each {
		for _, p := range []string{"capped", "heavy", "light"} {
			e.call(protocol.Call{CallID: fmt.Sprintf("%s-%03d", p, i), BatchID: p, Tool: "work", PersonalityID: p})
		}
	}
	for i := range 3 {
		e.start(worker.Config{WorkerID: fmt.Sprintf("w%d", i), Concurrency: 4}, rec.tool())
	}
	// Twelve slots fill: at most three with the capped personality.
	require.Eventually(t, func() bool {
		starts, _ := rec.snapshot()
		return len(starts) >= 12
	}, 30*time.Second, 5*time.Millisecond)
	starts, peak := rec.snapshot()
	require.Len(t, starts, 12, "no more calls start than the fleet has slots")
	require.Equal(t, 3, peak["capped"], "the capped personality runs exactly its cap, fleet-wide")

	e.call(protocol.Call{CallID: "urgent-1", BatchID: "urgent", Tool: "work", PersonalityID: "urgent"})
	close(rec.gate)
	for i := range each {
		for _, p := range []string{"capped", "heavy", "light"} {
			r := e.result(p, fmt.Sprintf("%s-%03d", p, i))
			require.True(t, r.OK, "%s: %s", r.CallID, r.Error)
		}
	}
	require.True(t, e.result("urgent", "urgent-1").OK)
	for i := range each {
		for _, p := range []string{"capped", "heavy", "light"} {
			require.Equal(t, 1, e.resultsOn(p, fmt.Sprintf("%s-%03d", p, i)), "answered exactly once")
		}
	}
	starts, peak = rec.snapshot()
	require.LessOrEqual(t, peak["capped"], 3, "never more than the cap running")

	// Weights 3 and 1 while both wait: the starts of heavy and light up
	// to heavy's last hold 3:1 within the fleet's bound (two calls per
	// worker either way) and 10 %.
	var hl []string
	for _, p := range starts {
		if p == "heavy" || p == "light" {
			hl = append(hl, p)
		}
	}
	heavyLeft, lightLeft := each, each
	window := map[string]int{}
	for _, p := range hl {
		if heavyLeft == 0 || lightLeft == 0 {
			break
		}
		window[p]++
		if p == "heavy" {
			heavyLeft--
		} else {
			lightLeft--
		}
	}
	require.InDelta(t, 3*window["light"], window["heavy"], 3*2+0.1*float64(window["heavy"]), "starts while both waited: %v", window)

	// The urgent call started before the calls still waiting when it
	// was published: among the starts after the gate opened, it is within
	// the first round of the fleet's slots.
	pos := -1
	for i, p := range starts {
		if p == "urgent" {
			pos = i
		}
	}
	require.GreaterOrEqual(t, pos, 12)
	require.Less(t, pos, 12+12+3, "urgent started at %d of %d: priority 1 goes before the backlogs", pos, len(starts))
}

// TestCallsOfTheOldPoolConsumerDrain: a pool whose calls were published,
// and partly delivered, under the single pool consumer of the versions
// before scheduling: the worker retires that consumer and every call is
// answered exactly once.
func TestCallsOfTheOldPoolConsumerDrain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	old, err := e.conn.PoolConsumer(ctxT(t), "default", 5, bus.MinAckWait)
	require.NoError(t, err)
	for i := range 10 {
		e.call(protocol.Call{CallID: fmt.Sprintf("old-%d", i), BatchID: "old", Tool: "echo", Args: json.RawMessage(`{"text":"x"}`)})
	}
	// Two are delivered to the old consumer and never acked: an old
	// worker that stopped mid-call.
	got, err := old.Fetch(ctxT(t), 2, 5*time.Second, func(*bus.Msg) {})
	require.NoError(t, err)
	require.Equal(t, 2, got)

	e.start(worker.Config{Concurrency: 4, AckWait: bus.MinAckWait}, echo.Tool())
	for i := range 10 {
		r := e.result("old", fmt.Sprintf("old-%d", i))
		require.True(t, r.OK, r.Error)
	}
	for i := range 10 {
		require.Equal(t, 1, e.resultsOn("old", fmt.Sprintf("old-%d", i)))
	}
	e.waitCallsDrained()
	_, err = e.conn.PoolConsumer(ctxT(t), "default", 5, bus.MinAckWait)
	require.Error(t, err, "the personalities' consumers took the pool's place (a work queue allows no overlap)")
}

// TestSchedulingMetrics: capstan.calls.running and capstan.calls.waiting
// carry a personality label only with MetricsPersonalityLabel
// (CAPSTAN_METRICS_PERSONALITY_LABEL=true), else they are the pool's
// totals.
func TestSchedulingMetrics(t *testing.T) {
	t.Parallel()
	for _, labelled := range []bool{true, false} {
		t.Run(fmt.Sprint(labelled), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.putPersonality("batch", "id: batch\n")
			rec := newRecorder()
			mp, reader := telemetrytest.Metrics(t)
			e.start(worker.Config{Concurrency: 2, MeterProvider: mp, MetricsPersonalityLabel: labelled}, rec.tool())
			for i := range 5 {
				e.call(protocol.Call{CallID: fmt.Sprintf("m%d", i), BatchID: "m", Tool: "work", PersonalityID: "batch"})
			}
			byBatch := telemetry.AttrQueuePersonality.String("batch")
			require.Eventually(t, func() bool {
				running := telemetrytest.Sum(t, reader, telemetry.MetricCallsRunning)
				return running == 2
			}, 30*time.Second, 10*time.Millisecond)
			if labelled {
				require.Equal(t, 2.0, telemetrytest.Sum(t, reader, telemetry.MetricCallsRunning, byBatch))
				require.Equal(t, 3.0, telemetrytest.Sum(t, reader, telemetry.MetricCallsWaiting, byBatch))
			} else {
				require.Zero(t, telemetrytest.Sum(t, reader, telemetry.MetricCallsRunning, byBatch), "no personality label")
				require.Equal(t, 3.0, telemetrytest.Sum(t, reader, telemetry.MetricCallsWaiting))
			}
			close(rec.gate)
			for i := range 5 {
				require.True(t, e.result("m", fmt.Sprintf("m%d", i)).OK)
			}
		})
	}
}
