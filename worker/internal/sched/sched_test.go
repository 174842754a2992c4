package sched

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/stretchr/testify/require"
)

// fakeQueue is one personality's calls: a FIFO of call ids with a cap of
// calls in flight, as a JetStream consumer with MaxAckPending holds them.
type fakeQueue struct {
	f        *fakeBus
	name     string
	waiting  []string
	inFlight int
	cap      int
	// gone: the server forgot the consumer (a restart; its state is in
	// memory) until Lane opens it again.
	gone bool
}

func (q *fakeQueue) take(n int, fn func(*bus.Msg)) (got int, capped bool) {
	q.f.mu.Lock()
	var out []*bus.Msg
	for len(q.waiting) > 0 && len(out) < n {
		if q.cap > 0 && q.inFlight >= q.cap {
			capped = true
			break
		}
		id := q.waiting[0]
		q.waiting = q.waiting[1:]
		q.inFlight++
		out = append(out, &bus.Msg{Subject: q.name + "." + id, Data: []byte(id), Pending: uint64(len(q.waiting))})
	}
	q.f.mu.Unlock()
	for _, m := range out {
		fn(m)
	}
	return len(out), capped
}

func (q *fakeQueue) isGone() bool {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	return q.gone
}

func (q *fakeQueue) FetchNoWait(_ context.Context, n int, fn func(*bus.Msg)) (int, bool, error) {
	if q.isGone() {
		return 0, false, bus.ErrConsumerGone
	}
	got, capped := q.take(n, fn)
	return got, capped, nil
}

func (q *fakeQueue) Fetch(ctx context.Context, n int, wait time.Duration, fn func(*bus.Msg)) (int, error) {
	if q.isGone() {
		return 0, bus.ErrConsumerGone
	}
	deadline := time.Now().Add(wait)
	total := 0
	for total < n && time.Now().Before(deadline) && ctx.Err() == nil {
		got, _ := q.take(n-total, fn)
		total += got
		if got == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return total, nil
}

// fakeBus is a pool of fake queues.
type fakeBus struct {
	mu     sync.Mutex
	queues map[string]*fakeQueue
	lanes  []string // Lane calls, in order
}

func newFakeBus() *fakeBus { return &fakeBus{queues: map[string]*fakeQueue{}} }

// forget makes the server forget p's consumer: its pulls fail with
// bus.ErrConsumerGone until the lane is opened again.
func (f *fakeBus) forget(p string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queues[p].gone = true
}

func (f *fakeBus) queue(p string) *fakeQueue {
	q, ok := f.queues[p]
	if !ok {
		q = &fakeQueue{f: f, name: p}
		f.queues[p] = q
	}
	return q
}

func (f *fakeBus) publish(p string, ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queue(p)
	q.waiting = append(q.waiting, ids...)
}

func (f *fakeBus) Lane(_ context.Context, p string, maxInFlight int) (Consumer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queue(p)
	q.cap = maxInFlight
	q.gone = false
	f.lanes = append(f.lanes, p)
	return q, nil
}

func (f *fakeBus) Waiting(context.Context) (map[string]uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]uint64{}
	for p, q := range f.queues {
		if n := len(q.waiting) + q.inFlight; n > 0 {
			out[p] = uint64(n)
		}
	}
	return out, nil
}

// finish ends a call of personality p.
func (f *fakeBus) finish(p string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queues[p].inFlight--
}

// started is a call a test's handler received.
type started struct {
	personality string
	id          string
	done        func()
}

// run starts a scheduler over f with slots slots whose started calls come
// on the returned channel, until the test ends.
func run(t *testing.T, f *fakeBus, slots int, policies map[string]Policy) <-chan started {
	t.Helper()
	ch, _ := runScheduler(t, f, slots, policies)
	return ch
}

// runScheduler is run, returning the scheduler too.
func runScheduler(t *testing.T, f *fakeBus, slots int, policies map[string]Policy) (<-chan started, *Scheduler) {
	t.Helper()
	return runSchedulerWith(t, f, slots, policies, nil)
}

// runSchedulerKnown is runScheduler with the personalities the policy knows.
func runSchedulerKnown(t *testing.T, f *fakeBus, slots int, known []string) (<-chan started, *Scheduler) {
	t.Helper()
	return runSchedulerWith(t, f, slots, nil, func() []string { return known })
}

func runSchedulerWith(t *testing.T, f *fakeBus, slots int, policies map[string]Policy, known func() []string) (<-chan started, *Scheduler) {
	t.Helper()
	out := make(chan started, 10000)
	sl := make(chan struct{}, slots)
	s := New(Config{
		Slots: sl,
		Deliver: func(m *bus.Msg, done func()) {
			p, id, _ := cutLast(m.Subject)
			out <- started{personality: p, id: id, done: func() { f.finish(p); <-sl; done() }}
		},
		Bus: f,
		Policy: func(p string) Policy {
			if pol, ok := policies[p]; ok {
				return pol
			}
			return DefaultPolicy
		},
		Known:         known,
		BusyDiscovery: time.Millisecond, IdleDiscovery: 5 * time.Millisecond,
		IdleWait: 20 * time.Millisecond, SharedIdleWait: 5 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return out, s
}

func cutLast(s string) (string, string, bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '.' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func next(t *testing.T, ch <-chan started) started {
	t.Helper()
	select {
	case c := <-ch:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no call started within 10s")
		return started{}
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	return out
}

// TestFIFOWithinAPersonality: one personality's calls start in the order
// they were published.
func TestFIFOWithinAPersonality(t *testing.T) {
	t.Parallel()
	f := newFakeBus()
	want := ids("c", 30)
	f.publish("a", want...)
	ch := run(t, f, 1, nil)
	for _, id := range want {
		c := next(t, ch)
		require.Equal(t, id, c.id)
		c.done()
	}
}

// TestBacklogDoesNotStarveAnotherPersonality: B's call starts after at
// most one more of A's, however long A's backlog (the flood of
// scheduling.md), one slot.
func TestBacklogDoesNotStarveAnotherPersonality(t *testing.T) {
	t.Parallel()
	f := newFakeBus()
	f.publish("a", ids("a", 500)...)
	ch, s := runScheduler(t, f, 1, nil)
	c := next(t, ch)
	require.Equal(t, "a", c.personality)
	f.publish("b", "b1")
	// B's call is seen at the next discovery, due BusyDiscovery after the
	// last while calls wait: let it be due before the slot frees.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		due := !time.Now().Before(s.discover)
		s.mu.Unlock()
		if due || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	c.done()
	// B is found by discovery and has the smallest pass: it goes within
	// the next two starts.
	var order []string
	for range 3 {
		c := next(t, ch)
		order = append(order, c.personality)
		c.done()
	}
	require.Contains(t, order[:2], "b", "starts after b's call was published: %v", order)
}

// TestWeightedShare: weights 3 and 1, both backlogged: three of A's calls
// start for each of B's.
func TestWeightedShare(t *testing.T) {
	t.Parallel()
	f := newFakeBus()
	f.publish("a", ids("a", 300)...)
	f.publish("b", ids("b", 300)...)
	ch := run(t, f, 4, map[string]Policy{"a": {Priority: 3, Weight: 3}, "b": {Priority: 3, Weight: 1}})
	counts := map[string]int{}
	// Hold four calls at a time, finish them in order.
	var held []started
	for range 400 {
		c := next(t, ch)
		counts[c.personality]++
		held = append(held, c)
		if len(held) == 4 {
			for _, h := range held {
				h.done()
			}
			held = held[:0]
		}
	}
	ratio := float64(counts["a"]) / float64(counts["b"])
	require.InDelta(t, 3.0, ratio, 0.3, "starts %v", counts)
}

// TestStrictPriority: while calls of priority 1 wait, none of priority 5
// starts; then priority 5's do (work-conserving).
func TestStrictPriority(t *testing.T) {
	t.Parallel()
	f := newFakeBus()
	f.publish("low", ids("l", 20)...)
	f.publish("high", ids("h", 20)...)
	ch := run(t, f, 2, map[string]Policy{"high": {Priority: 1, Weight: 1}, "low": {Priority: 5, Weight: 1000}})
	var order []string
	for range 40 {
		c := next(t, ch)
		order = append(order, c.personality)
		c.done()
	}
	for i, p := range order {
		if i < 20 {
			require.Equal(t, "high", p, "start %d of %v", i, order)
		} else {
			require.Equal(t, "low", p, "start %d of %v", i, order)
		}
	}
}

// TestCapHoldsAndOthersRun: a personality capped at 2 never has more than
// 2 calls running, and the free slots go to another personality meanwhile
// (its waiting calls hold no slot).
func TestCapHoldsAndOthersRun(t *testing.T) {
	t.Parallel()
	f := newFakeBus()
	f.publish("capped", ids("c", 10)...)
	ch := run(t, f, 6, map[string]Policy{"capped": {Priority: 1, Weight: 1, MaxConcurrency: 2}})
	var held []started
	for range 2 {
		held = append(held, next(t, ch))
	}
	f.publish("free", ids("f", 4)...)
	// The next four starts are the free personality's, though the capped
	// one has a higher priority and eight calls waiting.
	for range 4 {
		c := next(t, ch)
		require.Equal(t, "free", c.personality)
		held = append(held, c)
	}
	select {
	case c := <-ch:
		t.Fatalf("a third call of the capped personality started: %v", c.id)
	case <-time.After(50 * time.Millisecond):
	}
	// One capped call ends: one more starts.
	held[0].done()
	c := next(t, ch)
	require.Equal(t, "capped", c.personality)
}

// TestIdlePoolStartsACallAtOnce: with nothing waiting, the slots are
// held by polls, and a call published then starts without discovery.
func TestIdlePoolStartsACallAtOnce(t *testing.T) {
	t.Parallel()
	f := newFakeBus()
	f.publish("a", "first")
	ch := run(t, f, 4, nil)
	c := next(t, ch)
	c.done()
	f.publish("a", "second")
	require.Equal(t, "second", next(t, ch).id)
}

func TestPlanSharesByStride(t *testing.T) {
	t.Parallel()
	s := New(Config{Slots: make(chan struct{}, 1)})
	a := &lane{personality: "a", pol: Policy{Priority: 2, Weight: 2}, pending: true, waiting: 1000}
	b := &lane{personality: "b", pol: Policy{Priority: 2, Weight: 1}, pending: true, waiting: 1000}
	c := &lane{personality: "c", pol: Policy{Priority: 4, Weight: 9}, pending: true}
	d := &lane{personality: "d", pol: Policy{Priority: 1, Weight: 1}, capped: time.Now().Add(time.Hour), pending: true}
	s.lanes = map[string]*lane{"a": a, "b": b, "c": c, "d": d}
	shares := func(plan []grant) map[string]int {
		got := map[string]int{}
		for _, g := range plan {
			got[g.l.personality] = g.n
		}
		return got
	}
	// No more lanes waiting than slots free: one slot at a time.
	require.Equal(t, map[string]int{"a": 4, "b": 2}, shares(s.plan(6)), "priority 2 only (1 is capped), 2:1")
	a.pending, b.pending = false, false
	require.Equal(t, map[string]int{"c": 3}, shares(s.plan(3)))
}

// TestPlanGivesChunksWhenLanesOutnumberSlots: with more lanes waiting than
// slots free, a plan gives the lane whose pass is smallest a chunk (what
// it has waiting, at most maxChunk), so one pull brings several of its
// calls; over successive plans the shares still follow the weights.
func TestPlanGivesChunksWhenLanesOutnumberSlots(t *testing.T) {
	t.Parallel()
	s := New(Config{Slots: make(chan struct{}, 1)})
	s.lanes = map[string]*lane{}
	for i := range 20 {
		p := fmt.Sprintf("p%02d", i)
		s.lanes[p] = &lane{personality: p, pol: Policy{Priority: 3, Weight: 1 + 2*(i%2)}, pending: true, waiting: 1000}
	}
	plan := s.plan(4)
	require.Len(t, plan, 1, "one lane, one pull")
	require.Equal(t, 4, plan[0].n)
	plan = s.plan(maxChunk + 3)
	require.Len(t, plan, 2, "at most maxChunk slots to a lane while another waits")
	require.Equal(t, maxChunk, plan[0].n)
	s.lanes["p00"].waiting = 2
	plan = s.plan(4)
	require.Len(t, plan, 2, "a chunk is at most what the lane has waiting")
	require.Equal(t, grant{l: s.lanes["p00"], n: 2}, plan[0])

	s.lanes["p00"].waiting = 1000
	got := map[int]int{}
	for range 2000 {
		for _, g := range s.plan(3) {
			got[g.l.pol.Weight] += g.n
			// What the deliverer does with each call delivered.
			g.l.pass += float64(g.n) / float64(g.l.pol.Weight)
		}
	}
	require.Equal(t, 6000, got[1]+got[3])
	require.InDelta(t, 3.0, float64(got[3])/float64(got[1]), 0.05, "weights 3 and 1 over successive plans: %v", got)
}

// TestGoneConsumerIsOpenedAgain: a lane whose consumer the server forgot
// (consumer state in memory, and a server restart) is opened again, and
// its calls are delivered.
func TestGoneConsumerIsOpenedAgain(t *testing.T) {
	t.Parallel()
	f := newFakeBus()
	f.publish("a", "1")
	ch := run(t, f, 2, nil)
	first := next(t, ch)
	require.Equal(t, "1", first.id)
	first.done()
	f.forget("a")
	f.publish("a", "2", "3")
	for _, want := range []string{"2", "3"} {
		s := next(t, ch)
		require.Equal(t, want, s.id)
		s.done()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	opened := 0
	for _, p := range f.lanes {
		if p == "a" {
			opened++
		}
	}
	require.GreaterOrEqual(t, opened, 2, "the lane was opened again")
}

// TestIdleLaneIsRetiredAndComesBackWithItsNextCall: the server deletes the
// consumer of a personality that went quiet (bus.LaneInactiveThreshold);
// the scheduler then forgets its lane, even though the policy knows the
// personality, until a call of it waits.
func TestIdleLaneIsRetiredAndComesBackWithItsNextCall(t *testing.T) {
	t.Parallel()
	f := newFakeBus()
	f.publish("quiet", "1")
	ch, s := runSchedulerKnown(t, f, 2, []string{"quiet"})
	hasLane := func() bool {
		for _, l := range s.Lanes() {
			if l.Personality == "quiet" {
				return true
			}
		}
		return false
	}
	first := next(t, ch)
	require.Equal(t, "1", first.id)
	first.done()
	f.forget("quiet")
	require.Eventually(t, func() bool { return !hasLane() }, 10*time.Second, time.Millisecond, "the idle lane is retired")
	f.publish("quiet", "2")
	second := next(t, ch)
	require.Equal(t, "2", second.id, "a waiting call brings the lane back")
	second.done()
	require.True(t, hasLane())
}

// TestKnownPersonalitiesGetLanesOnlyWhenFew: the personalities of the
// policy get lanes before their first call when there are at most
// maxKnownLanes of them; with more, only those with calls waiting do.
func TestKnownPersonalitiesGetLanesOnlyWhenFew(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, maxKnownLanes + 1} {
		known := make([]string, n)
		for i := range known {
			known[i] = fmt.Sprintf("k%03d", i)
		}
		f := newFakeBus()
		f.publish("k000", "1")
		ch, s := runSchedulerKnown(t, f, 2, known)
		c := next(t, ch)
		c.done()
		want := 1
		if n <= maxKnownLanes {
			want = n
			require.Eventually(t, func() bool { return len(s.Lanes()) == n }, 10*time.Second, time.Millisecond)
		}
		require.Len(t, s.Lanes(), want, "%d known personalities", n)
	}
}

// TestRunEndsWithItsContextWhileSlotsAreFree: Run returns once its context
// ends, also when free slots would let it go on at once.
func TestRunEndsWithItsContextWhileSlotsAreFree(t *testing.T) {
	t.Parallel()
	// No lane at all: every round gives the slots back and idles, which
	// a context that ended does not wait for.
	f := newFakeBus()
	s := New(Config{
		Slots: make(chan struct{}, 8),
		Deliver: func(_ *bus.Msg, done func()) {
			done()
		},
		Bus:           f,
		BusyDiscovery: time.Millisecond, IdleDiscovery: time.Millisecond,
		IdleWait: time.Millisecond, SharedIdleWait: time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run went on for 10 s after its context ended")
	}
}
