package console

import (
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/stretchr/testify/require"
)

func TestToolStats(t *testing.T) {
	t.Parallel()
	var ts toolStats
	for i := range 100 {
		ts.add(1000, int64(i+1))
	}
	ts.add(1002, 500)
	s := ts.series(1002)
	require.Len(t, s, rateWindow)
	require.Equal(t, 100.0, s[rateWindow-3])
	require.Equal(t, 0.0, s[rateWindow-2])
	require.Equal(t, 1.0, s[rateWindow-1])
	p50, p99 := ts.percentiles()
	require.Equal(t, int64(51), p50)
	require.Equal(t, int64(100), p99)
	s = ts.series(1002 + rateWindow)
	require.Equal(t, make([]float64, rateWindow), s, "a minute later every second is empty")
}

func TestSparklineAndBars(t *testing.T) {
	t.Parallel()
	svg := string(sparkline([]float64{0, 1, 2}, "echo <calls>"))
	require.Contains(t, svg, `aria-label="echo &lt;calls&gt;"`)
	require.Contains(t, svg, `points="0.0,23.0 60.0,12.0 120.0,1.0"`)
	require.Contains(t, string(sparkline([]float64{0, 0}, "idle")), `points="0.0,23.0 120.0,23.0"`)
	bars := string(failureBars([]codeCount{{"execution_failed", 4}, {"<x>", 2}}))
	require.Equal(t, 2, strings.Count(bars, `class="bar"`))
	require.Contains(t, bars, "&lt;x&gt;")
	require.Contains(t, string(failureBars(nil)), "No failures")
}

func TestTraceID(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01": "0af7651916cd43dd8448eb211c80319c",
		"": "", "00-short-b7ad6b7169203331-01": "", "garbage": "",
	} {
		require.Equal(t, want, traceID(in), in)
	}
}

func TestLatencySeries(t *testing.T) {
	t.Parallel()
	var ts toolStats
	for i := range 100 {
		ts.add(1000, int64(i+1)) // bucket 200
	}
	ts.add(1011, 700) // bucket 202
	p50, p99 := ts.latencySeries(1014)
	require.Len(t, p50, latBuckets)
	require.Equal(t, []float64{51, 0, 700}, p50[latBuckets-3:])
	require.Equal(t, []float64{100, 0, 700}, p99[latBuckets-3:])
	p50, _ = ts.latencySeries(1014 + latBucketSec*latBuckets)
	require.Equal(t, make([]float64, latBuckets), p50, "a minute later every bucket is empty")
	svg := string(latencyLines([]float64{1, 2}, []float64{3, 4}, "echo latency"))
	require.Equal(t, 2, strings.Count(svg, "<polyline"))
	require.Contains(t, svg, `aria-label="echo latency"`)
}

// TestWorkerSlots: a worker's record gives its slots and calls in flight;
// a record without them (an earlier worker) counts the leases it holds.
func TestWorkerSlots(t *testing.T) {
	t.Parallel()
	f := newFeed(func() map[string]string { return nil })
	f.onWorker(bus.Entry{Key: "new", Value: []byte(`{"id":"new","pool":"default","concurrency":8,"in_flight":3}`)})
	f.onWorker(bus.Entry{Key: "old", Value: []byte(`{"id":"old","pool":"default"}`)})
	f.onLease(bus.Entry{Key: "c1", Value: []byte("old")})
	f.onLease(bus.Entry{Key: "c2", Value: []byte("new")})
	got := map[string][2]int{}
	for _, w := range f.snapshot().Workers {
		got[w.ID] = [2]int{w.Concurrency, w.InFlight}
	}
	require.Equal(t, map[string][2]int{"new": {8, 3}, "old": {0, 1}}, got)
}

// TestAuditBatches: an audit message holds a batch of records, one per
// line; the feed keeps each.
func TestAuditBatches(t *testing.T) {
	t.Parallel()
	f := newFeed(func() map[string]string { return nil })
	f.onAudit(&bus.Msg{Data: []byte(`{"call_id":"a","tool":"echo","decision":"allowed"}` + "\n" +
		`{"call_id":"b","tool":"echo","decision":"toolset"}` + "\n")})
	a, ok := f.audit("a")
	require.True(t, ok)
	require.Equal(t, "allowed", a.Decision)
	b, ok := f.audit("b")
	require.True(t, ok)
	require.Equal(t, "toolset", b.Decision)
}
