// Package sched is the worker's scheduler (scheduling.md): it decides which
// waiting call takes each free slot. Every personality of the pool has a
// durable consumer of its own on the calls stream (a lane); the scheduler
// pulls from the lanes that have calls waiting, the lowest priority number
// first, and among one priority in proportion to the lanes' weights (stride
// scheduling: each start advances a lane's pass by 1/weight, and the lane
// with the smallest pass goes next). A lane's cap of calls in flight
// (max_concurrency) is its consumer's MaxAckPending, which the server
// enforces across every worker of the pool.
//
// It pulls only for free slots, so a waiting call holds no slot. Which lanes
// have calls waiting it learns from its own pulls (the metadata of every
// delivery says how many more the lane holds, and an empty pull says none)
// and from discovery: the calls stream's subject counts per personality,
// read every BusyDiscovery while any lane has calls waiting and every
// IdleDiscovery otherwise; a personality seen there for the first time gets
// its lane. When no lane is known to have calls waiting, the free slots are
// shared out as long-poll pulls ("polls") among the lanes, so a call that
// arrives at an idle pool starts at once.
package sched

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
)

// Defaults of Config's timings.
const (
	DefaultBusyDiscovery = 100 * time.Millisecond
	DefaultIdleDiscovery = time.Second
	// DefaultIdleWait is how long the poll of a lane waits for calls when
	// the worker serves one lane; DefaultSharedIdleWait when it serves
	// several, whose polls hold slots the others may soon need.
	DefaultIdleWait       = time.Second
	DefaultSharedIdleWait = 250 * time.Millisecond
)

// Policy is a personality's scheduling section (capability.Scheduling).
type Policy struct {
	Priority, Weight, MaxConcurrency int
}

// DefaultPolicy is the scheduling of a personality without a section, or
// not known to the worker.
var DefaultPolicy = Policy{Priority: 3, Weight: 1}

// Consumer is one lane's consumer of calls (bus.PoolConsumer).
type Consumer interface {
	Fetch(ctx context.Context, n int, wait time.Duration, fn func(*bus.Msg)) (int, error)
	FetchNoWait(ctx context.Context, n int, fn func(*bus.Msg)) (got int, capped bool, err error)
}

// Bus is what the scheduler asks of the bus for its pool.
type Bus interface {
	// Lane creates, binds or updates the consumer of a personality's
	// calls, with maxInFlight as its cap (0 = none).
	Lane(ctx context.Context, personality string, maxInFlight int) (Consumer, error)
	// Waiting returns how many calls the calls stream holds per
	// personality of the pool (waiting or in flight).
	Waiting(ctx context.Context) (map[string]uint64, error)
}

// Config is what a Scheduler needs.
type Config struct {
	// Slots is the worker's slot semaphore: a send takes a slot; the
	// call's executor gives it back.
	Slots chan struct{}
	// Deliver hands a fetched call, which holds one slot, to a handler;
	// done must be called once the handler is through with it.
	Deliver func(m *bus.Msg, done func())
	Bus     Bus
	// Policy returns a personality's scheduling (DefaultPolicy when the
	// worker does not know it).
	Policy func(personality string) Policy
	// Known, when set, lists the personalities the worker knows of (its
	// view of the personalities bucket): each gets a lane at discovery,
	// before its first call.
	Known func() []string
	Log   *slog.Logger

	BusyDiscovery, IdleDiscovery, IdleWait, SharedIdleWait time.Duration
}

// Scheduler pulls calls for a worker's free slots (see the package
// documentation). Run drives it; the other methods are safe for concurrent
// use.
type Scheduler struct {
	cfg Config

	mu    sync.Mutex
	lanes map[string]*lane
	// retired are the personalities whose idle consumer the server
	// deleted (bus.LaneInactiveThreshold): their lanes come back when calls
	// wait, not merely because the policy knows them.
	retired   map[string]struct{}
	discover  time.Time // when discovery is next due
	lastError time.Time
	wake      chan struct{}
	polls     sync.WaitGroup
}

// lane is one personality's queue. Its fields are guarded by
// Scheduler.mu, but for running.
type lane struct {
	personality string
	cons        Consumer
	pol         Policy
	pass        float64
	pending     bool      // believed to have calls waiting
	waiting     uint64    // the last count of calls waiting
	capped      time.Time // at its cap of calls in flight until then
	polling     bool
	running     int
	starts      []time.Time // starts in the last minute, oldest first
}

// New returns a scheduler of cfg, with the timings' defaults.
func New(cfg Config) *Scheduler {
	cfg.BusyDiscovery = cmp.Or(cfg.BusyDiscovery, DefaultBusyDiscovery)
	cfg.IdleDiscovery = cmp.Or(cfg.IdleDiscovery, DefaultIdleDiscovery)
	cfg.IdleWait = cmp.Or(cfg.IdleWait, DefaultIdleWait)
	cfg.SharedIdleWait = cmp.Or(cfg.SharedIdleWait, DefaultSharedIdleWait)
	if cfg.Policy == nil {
		cfg.Policy = func(string) Policy { return DefaultPolicy }
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{cfg: cfg, lanes: map[string]*lane{}, retired: map[string]struct{}{}, wake: make(chan struct{}, 1)}
}

// Run pulls calls for free slots until ctx ends, then waits for its pulls
// under way to end.
func (s *Scheduler) Run(ctx context.Context) {
	defer s.polls.Wait()
	// One ticker for every wait for a slot (awaitSlot): at saturation a
	// round waits for one at once.
	counts := time.NewTicker(s.cfg.IdleDiscovery)
	defer counts.Stop()
	for {
		n := s.acquire(ctx, counts.C)
		if n == 0 {
			return
		}
		s.discoverIfDue(ctx)
		if plan := s.plan(n); len(plan) > 0 {
			got := s.fetchNow(ctx, plan)
			s.release(n - got)
			continue
		}
		if polls := s.pollPlan(n); len(polls) > 0 {
			s.startPolls(ctx, polls, n)
			continue
		}
		// No lane at all yet, or every one already polling: wait for
		// discovery or for a poll to end.
		s.release(n)
		s.idle(ctx)
	}
}

// acquire waits for one free slot and takes every other free one; 0 when
// ctx ended. While every slot is taken it reads the counts of calls
// waiting at every tick of counts (awaitSlot).
func (s *Scheduler) acquire(ctx context.Context, counts <-chan time.Time) int {
	if ctx.Err() != nil {
		return 0
	}
	select {
	case s.cfg.Slots <- struct{}{}:
	default:
		if !s.awaitSlot(ctx, counts) {
			return 0
		}
	}
	n := 1
	for n < cap(s.cfg.Slots) {
		select {
		case s.cfg.Slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

// awaitSlot waits for a free slot and takes it, reading the counts of
// calls waiting at every tick of counts meanwhile (every IdleDiscovery:
// they are the lanes' waiting in metrics, and a lane found with calls
// waiting is ready for the next free slot); false when ctx ended.
func (s *Scheduler) awaitSlot(ctx context.Context, counts <-chan time.Time) bool {
	for {
		select {
		case s.cfg.Slots <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		case <-counts:
			if waiting, err := s.cfg.Bus.Waiting(ctx); err == nil {
				s.mu.Lock()
				s.count(waiting)
				s.mu.Unlock()
			}
		}
	}
}

func (s *Scheduler) release(n int) {
	for range n {
		<-s.cfg.Slots
	}
}

// idle waits until discovery is due, a lane at its cap may be pulled
// again, a poll or a capped lane's call ended, or ctx ended.
func (s *Scheduler) idle(ctx context.Context) {
	s.mu.Lock()
	d := time.Until(s.discover)
	for _, l := range s.lanes {
		if l.pending && !l.capped.IsZero() {
			d = min(d, time.Until(l.capped))
		}
	}
	s.mu.Unlock()
	t := time.NewTimer(max(d, time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.wake:
	case <-ctx.Done():
	}
}

// signal wakes an idle Run.
func (s *Scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// deliverer returns the function that hands l's fetched calls on.
func (s *Scheduler) deliverer(l *lane) func(*bus.Msg) {
	return func(m *bus.Msg) {
		now := time.Now()
		s.mu.Lock()
		l.running++
		l.pass += 1 / float64(max(l.pol.Weight, 1))
		l.waiting = m.Pending
		l.pending = m.Pending > 0
		l.starts = append(trimStarts(l.starts, now), now)
		s.mu.Unlock()
		s.cfg.Deliver(m, func() {
			s.mu.Lock()
			l.running--
			wasCapped := !l.capped.IsZero()
			l.capped = time.Time{}
			s.mu.Unlock()
			if wasCapped {
				s.signal()
			}
		})
	}
}

// trimStarts drops the starts older than a minute.
func trimStarts(starts []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(starts) && now.Sub(starts[i]) > time.Minute {
		i++
	}
	if i == 0 {
		return starts
	}
	return slices.Delete(starts, 0, i)
}

// LaneState is what the scheduler knows of one lane, for metrics and
// readiness details.
type LaneState struct {
	Personality string `json:"personality"`
	Priority    int    `json:"priority"`
	Weight      int    `json:"weight"`
	// MaxConcurrency is the cap of calls in flight across the pool; 0 = none.
	MaxConcurrency int `json:"max_concurrency"`
	// Waiting is the last count of the lane's calls not yet delivered.
	Waiting uint64 `json:"waiting"`
	// Running is this worker's calls of the lane in flight.
	Running int `json:"running"`
	// StartsLastMinute is this worker's starts of the lane's calls in the
	// last minute.
	StartsLastMinute int `json:"starts_last_minute"`
}

// Lanes returns the state of every lane, sorted by personality.
func (s *Scheduler) Lanes() []LaneState {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]LaneState, 0, len(s.lanes))
	for _, l := range s.lanes {
		l.starts = trimStarts(l.starts, now)
		out = append(out, LaneState{Personality: l.personality, Priority: l.pol.Priority, Weight: l.pol.Weight,
			MaxConcurrency: l.pol.MaxConcurrency, Waiting: l.waiting, Running: l.running, StartsLastMinute: len(l.starts)})
	}
	slices.SortFunc(out, func(a, b LaneState) int { return cmp.Compare(a.Personality, b.Personality) })
	return out
}

// Pending returns the calls the lanes were last known to hold, not yet
// delivered, summed (observe.Pending); unacked is this worker's calls in
// flight.
func (s *Scheduler) Pending(context.Context) (waiting uint64, unacked int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lanes {
		waiting += l.waiting
		unacked += l.running
	}
	return waiting, unacked, nil
}
