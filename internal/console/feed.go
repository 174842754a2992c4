package console

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// Sizes of what the feed keeps in memory.
const (
	tailSize      = 500  // results kept for the tail
	auditIndex    = 5000 // audit records kept by call id
	durationsKept = 256  // latencies kept per tool for p50/p99
	rateWindow    = 60   // seconds of calls/s history per tool
	latBucketSec  = 5    // seconds per latency bucket
	latBuckets    = 12   // latency buckets kept (a minute)
	latPerBucket  = 256  // latencies kept per bucket
)

// resultRow is one result as the tail shows it.
type resultRow struct {
	Time        time.Time
	CallID      string
	BatchID     string
	Personality string
	Tool        string
	Pool        string
	OK          bool
	Code        string
	DurationMS  int64
	WorkerID    string
	Deliveries  int
	Error       string
}

// workerRow is a live worker as the workers bucket and the leases bucket
// describe it.
type workerRow struct {
	ID       string    `json:"id"`
	Pool     string    `json:"pool"`
	Tools    []string  `json:"tools"`
	Started  time.Time `json:"started"`
	Protocol string    `json:"protocol"`
	// Concurrency and Reported are the worker's slots and the calls it ran
	// as of its record's last refresh (every 20 s); 0 from a worker that
	// does not publish them.
	Concurrency int `json:"concurrency"`
	Reported    int `json:"in_flight"`
	// InFlight is the calls the worker runs: Reported, or for a worker
	// that does not publish it, the calls whose lease it holds.
	InFlight int `json:"-"`
}

// toolStats are the per-tool numbers behind the sparklines.
type toolStats struct {
	perSecond [rateWindow]int // calls finished in each of the last seconds, ring indexed by unix second
	lastSec   int64
	durations []int64 // ring of the last durationsKept latencies
	next      int
	total     int
	// lat holds the latencies of each latBucketSec-second bucket of the
	// last minute, ring indexed by unix second / latBucketSec.
	lat     [latBuckets][]int64
	lastLat int64
}

// feed follows the NATS subjects the console shows: results (tail and
// statistics), audit records (for call pages), the workers and leases
// buckets (pool view). One goroutine per subscription writes into it under
// mu; the SSE handlers read snapshots and wait on changes.
type feed struct {
	catalog func() map[string]string // tool -> pool

	mu       sync.Mutex
	results  []resultRow // newest last, at most tailSize
	audits   map[string]protocol.AuditRecord
	auditIDs []string // insertion order of audits, for eviction
	workers  map[string]*workerRow
	leases   map[string]string // call id -> worker id
	tools    map[string]*toolStats
	failures map[string]int
	calls    int
	started  time.Time
	version  uint64 // bumped on every change
	changed  chan struct{}
	now      func() time.Time
}

func newFeed(catalog func() map[string]string) *feed {
	return &feed{
		catalog:  catalog,
		audits:   make(map[string]protocol.AuditRecord),
		workers:  make(map[string]*workerRow),
		leases:   make(map[string]string),
		tools:    make(map[string]*toolStats),
		failures: make(map[string]int),
		changed:  make(chan struct{}),
		started:  time.Now(),
		now:      time.Now,
	}
}

// start subscribes to the results and audit streams (new messages only) and
// watches the workers and leases buckets, until ctx ends.
func (f *feed) start(ctx context.Context, conn *bus.Conn) (stop func(), err error) {
	names := conn.Names()
	var stops []func()
	stopAll := func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	s, err := conn.Tail(ctx, names.ResultsStream(), []string{names.ResultsFilter()}, bus.FromNew, f.onResult)
	if err != nil {
		return nil, err
	}
	stops = append(stops, s)
	if s, err = conn.Tail(ctx, names.AuditStream(), []string{names.AuditFilter()}, bus.FromNew, f.onAudit); err != nil {
		stopAll()
		return nil, err
	}
	stops = append(stops, s)
	for _, w := range []struct {
		b  bus.Bucket
		fn func(bus.Entry)
	}{{bus.Workers, f.onWorker}, {bus.Leases, f.onLease}} {
		kv, err := conn.KV(ctx, w.b)
		if err != nil {
			stopAll()
			return nil, err
		}
		s, err := kv.Watch(ctx, w.fn)
		if err != nil {
			stopAll()
			return nil, err
		}
		stops = append(stops, s)
	}
	return stopAll, nil
}

// bump marks a change and wakes every waiter. Callers hold mu.
func (f *feed) bump() {
	f.version++
	close(f.changed)
	f.changed = make(chan struct{})
}

// wait returns the current version and a channel closed at the next change.
func (f *feed) wait() (uint64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.version, f.changed
}

func (f *feed) onResult(m *bus.Msg) {
	var r protocol.Result
	if json.Unmarshal(m.Data, &r) != nil {
		return
	}
	// <p>.result.<personality>.<batch>.<call>
	personality := ""
	if parts := strings.Split(m.Subject, "."); len(parts) == 5 {
		personality = parts[2]
	}
	row := resultRow{Time: m.Time, CallID: r.CallID, BatchID: r.BatchID, Personality: personality, Tool: r.Tool,
		OK: r.OK, Code: string(r.Code), DurationMS: r.DurationMS, WorkerID: r.WorkerID, Deliveries: r.Deliveries, Error: r.Error}
	if row.Time.IsZero() {
		row.Time = f.now()
	}
	row.Pool = f.catalog()[r.Tool]
	f.mu.Lock()
	defer f.mu.Unlock()
	f.results = append(f.results, row)
	if len(f.results) > tailSize {
		f.results = slices.Delete(f.results, 0, len(f.results)-tailSize)
	}
	f.calls++
	if !r.OK {
		f.failures[row.Code]++
	}
	ts := f.tools[r.Tool]
	if ts == nil {
		ts = &toolStats{}
		f.tools[r.Tool] = ts
	}
	ts.add(f.now().Unix(), r.DurationMS)
	f.bump()
}

func (ts *toolStats) add(sec, durationMS int64) {
	ts.advance(sec)
	ts.perSecond[sec%rateWindow]++
	ts.advanceLat(sec / latBucketSec)
	if b := &ts.lat[(sec/latBucketSec)%latBuckets]; len(*b) < latPerBucket {
		*b = append(*b, durationMS)
	}
	if len(ts.durations) < durationsKept {
		ts.durations = append(ts.durations, durationMS)
	} else {
		ts.durations[ts.next] = durationMS
		ts.next = (ts.next + 1) % durationsKept
	}
	ts.total++
}

// advance clears the seconds between the last one counted and sec.
func (ts *toolStats) advance(sec int64) {
	if ts.lastSec == 0 || sec-ts.lastSec >= rateWindow {
		ts.perSecond = [rateWindow]int{}
	} else {
		for s := ts.lastSec + 1; s <= sec; s++ {
			ts.perSecond[s%rateWindow] = 0
		}
	}
	if sec > ts.lastSec {
		ts.lastSec = sec
	}
}

// advanceLat empties the latency buckets between the last one filled and
// bucket.
func (ts *toolStats) advanceLat(bucket int64) {
	if ts.lastLat == 0 || bucket-ts.lastLat >= latBuckets {
		ts.lat = [latBuckets][]int64{}
	} else {
		for b := ts.lastLat + 1; b <= bucket; b++ {
			ts.lat[b%latBuckets] = nil
		}
	}
	if bucket > ts.lastLat {
		ts.lastLat = bucket
	}
}

// latencySeries returns p50 and p99 in ms of each latency bucket of the
// last minute up to now, oldest first (0 for a bucket without calls).
func (ts *toolStats) latencySeries(now int64) (p50, p99 []float64) {
	ts.advanceLat(now / latBucketSec)
	p50, p99 = make([]float64, latBuckets), make([]float64, latBuckets)
	for i := range latBuckets {
		b := now/latBucketSec - int64(latBuckets-1-i)
		d := slices.Clone(ts.lat[((b%latBuckets)+latBuckets)%latBuckets])
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		p50[i] = float64(d[min(len(d)-1, len(d)/2)])
		p99[i] = float64(d[min(len(d)-1, int(0.99*float64(len(d))))])
	}
	return p50, p99
}

// series returns calls per second for the last rateWindow seconds up to
// now, oldest first.
func (ts *toolStats) series(now int64) []float64 {
	ts.advance(now)
	out := make([]float64, rateWindow)
	for i := range rateWindow {
		sec := now - int64(rateWindow-1-i)
		out[i] = float64(ts.perSecond[((sec%rateWindow)+rateWindow)%rateWindow])
	}
	return out
}

// percentiles returns p50 and p99 of the kept latencies in ms.
func (ts *toolStats) percentiles() (p50, p99 int64) {
	if len(ts.durations) == 0 {
		return 0, 0
	}
	d := slices.Clone(ts.durations)
	slices.Sort(d)
	at := func(q float64) int64 { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return at(0.50), at(0.99)
}

func (f *feed) onAudit(m *bus.Msg) {
	// A message holds a batch of records, one per line.
	recs, _ := protocol.DecodeAuditRecords(m.Data)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range recs {
		if a.CallID == "" {
			continue
		}
		if _, ok := f.audits[a.CallID]; !ok {
			f.auditIDs = append(f.auditIDs, a.CallID)
		}
		f.audits[a.CallID] = a
		if len(f.auditIDs) > auditIndex {
			delete(f.audits, f.auditIDs[0])
			f.auditIDs = f.auditIDs[1:]
		}
	}
}

func (f *feed) onWorker(e bus.Entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.Deleted {
		delete(f.workers, e.Key)
		f.bump()
		return
	}
	var w workerRow
	if json.Unmarshal(e.Value, &w) != nil {
		return
	}
	if w.ID == "" {
		w.ID = e.Key
	}
	f.workers[e.Key] = &w
	f.bump()
}

func (f *feed) onLease(e bus.Entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.Deleted || len(e.Value) == 0 {
		delete(f.leases, e.Key)
	} else {
		f.leases[e.Key] = string(e.Value)
	}
	f.bump()
}

// audit returns the audit record of callID the feed has seen.
func (f *feed) audit(callID string) (protocol.AuditRecord, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.audits[callID]
	return a, ok
}

// leaseHolder returns the worker holding callID's lease, "" when none.
func (f *feed) leaseHolder(callID string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leases[callID]
}

// tail returns the kept results that pass keep, newest first, at most n.
func (f *feed) tail(keep func(resultRow) bool, n int) []resultRow {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []resultRow
	for _, r := range slices.Backward(f.results) {
		if keep(r) {
			out = append(out, r)
			if len(out) == n {
				break
			}
		}
	}
	return out
}

// since returns the results after the first n seen (results are only
// appended; index counts every result ever seen), and the new count.
func (f *feed) since(seen int) ([]resultRow, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if seen >= f.calls {
		return nil, f.calls
	}
	n := min(f.calls-seen, len(f.results))
	return slices.Clone(f.results[len(f.results)-n:]), f.calls
}

// count returns how many results the feed has seen.
func (f *feed) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// toolSnapshot is one tool's row of the pool view.
type toolSnapshot struct {
	Tool     string
	Pool     string
	Series   []float64
	P50s     []float64 // p50 per 5 s over the last minute
	P99s     []float64 // p99 per 5 s over the last minute
	Rate     float64   // calls/s over the last 10 s
	P50, P99 int64
	Total    int
}

// poolSnapshot is everything the pool view shows.
type poolSnapshot struct {
	Workers  []workerRow
	Tools    []toolSnapshot
	Failures []codeCount
	Calls    int
	Rate     float64
	Since    time.Time
}

type codeCount struct {
	Code  string
	Count int
}

func (f *feed) snapshot() poolSnapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now().Unix()
	out := poolSnapshot{Calls: f.calls, Since: f.started}
	inflight := map[string]int{}
	for _, w := range f.leases {
		inflight[w]++
	}
	for _, id := range slices.Sorted(maps.Keys(f.workers)) {
		w := *f.workers[id]
		w.InFlight = inflight[id]
		if w.Concurrency > 0 {
			w.InFlight = w.Reported
		}
		out.Workers = append(out.Workers, w)
	}
	pools := f.catalog()
	for _, name := range slices.Sorted(maps.Keys(f.tools)) {
		ts := f.tools[name]
		s := ts.series(now)
		p50, p99 := ts.percentiles()
		p50s, p99s := ts.latencySeries(now)
		recent := 0.0
		for _, v := range s[len(s)-10:] {
			recent += v
		}
		out.Tools = append(out.Tools, toolSnapshot{Tool: name, Pool: pools[name], Series: s, P50s: p50s, P99s: p99s, Rate: recent / 10, P50: p50, P99: p99, Total: ts.total})
		out.Rate += recent / 10
	}
	for code, n := range f.failures {
		out.Failures = append(out.Failures, codeCount{Code: code, Count: n})
	}
	sort.Slice(out.Failures, func(i, j int) bool {
		if out.Failures[i].Count != out.Failures[j].Count {
			return out.Failures[i].Count > out.Failures[j].Count
		}
		return out.Failures[i].Code < out.Failures[j].Code
	})
	return out
}
