package sched

import (
	"cmp"
	"context"
	"errors"
	"github.com/capstanhq/capstan/internal/bus"
	"math"
	"slices"
	"sync"
	"time"
)

// cappedRetry is how long a lane at its cap of calls in flight is left
// alone, unless one of this worker's calls of it ends first.
const cappedRetry = 50 * time.Millisecond

// errorBackoff spaces the warnings and retries of failing bus operations.
const errorBackoff = time.Second

// discoverIfDue reads the calls stream's counts per personality when
// discovery is due: lanes with calls are marked as having calls waiting,
// personalities without a lane get one, and every lane's policy is read
// again (a changed cap updates its consumer).
func (s *Scheduler) discoverIfDue(ctx context.Context) {
	now := time.Now()
	s.mu.Lock()
	if now.Before(s.discover) {
		s.mu.Unlock()
		return
	}
	busy := false
	for _, l := range s.lanes {
		busy = busy || l.pending
	}
	s.discover = now.Add(s.cfg.IdleDiscovery)
	if busy {
		s.discover = now.Add(s.cfg.BusyDiscovery)
	}
	s.mu.Unlock()

	counts, err := s.cfg.Bus.Waiting(ctx)
	if err != nil {
		s.warn(ctx, "cannot read which personalities have calls waiting", err)
		return
	}
	s.mu.Lock()
	var refresh []string
	for p, l := range s.lanes {
		if pol := s.policy(p); pol != l.pol {
			if pol.MaxConcurrency != l.pol.MaxConcurrency {
				refresh = append(refresh, p)
			}
			l.pol = pol
		}
	}
	s.count(counts)
	for p := range counts {
		if _, ok := s.lanes[p]; !ok {
			refresh = append(refresh, p)
		}
	}
	if s.cfg.Known != nil {
		// Personalities of the policy get a lane before their first
		// call, so that call finds a poll waiting for it; not when there
		// are more than maxKnownLanes of them: every consumer costs the
		// server work on every ack, and most of many personalities are
		// idle at any moment (their lanes come with their calls).
		known := s.cfg.Known()
		if len(known) > maxKnownLanes {
			known = nil
		}
		for _, p := range known {
			_, retired := s.retired[p]
			if _, ok := s.lanes[p]; !ok && !retired && !slices.Contains(refresh, p) {
				refresh = append(refresh, p)
			}
		}
	}
	s.mu.Unlock()
	for _, p := range refresh {
		s.ensureLane(ctx, p)
	}
	s.mu.Lock()
	for _, l := range s.lanes {
		if l.pending {
			// Calls wait: the next look is soon, so a personality whose
			// first call arrives now waits little for its lane.
			if soon := now.Add(s.cfg.BusyDiscovery); soon.Before(s.discover) {
				s.discover = soon
			}
			break
		}
	}
	s.mu.Unlock()
}

// count takes the calls stream's counts per personality as the lanes'
// calls waiting, and marks the lanes with calls waiting. The stream's
// count is of calls waiting or in flight, on any worker: what this worker
// does not run is taken as waiting until a delivery's metadata says
// exactly. s.mu is held.
func (s *Scheduler) count(counts map[string]uint64) {
	for p, l := range s.lanes {
		l.waiting = 0
		if n := counts[p]; n > uint64(l.running) {
			l.waiting = n - uint64(l.running)
			if !l.pending {
				s.activate(l)
			}
		}
	}
}

// policy returns p's policy with its values in range.
func (s *Scheduler) policy(p string) Policy {
	pol := s.cfg.Policy(p)
	pol.Priority = cmp.Or(pol.Priority, DefaultPolicy.Priority)
	pol.Weight = max(pol.Weight, 1)
	pol.MaxConcurrency = max(pol.MaxConcurrency, 0)
	return pol
}

// ensureLane creates p's lane, or updates its consumer's cap.
func (s *Scheduler) ensureLane(ctx context.Context, p string) {
	pol := s.policy(p)
	cons, err := s.cfg.Bus.Lane(ctx, p, pol.MaxConcurrency)
	if err != nil {
		s.warn(ctx, "cannot open the calls consumer of personality "+p, err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.retired, p)
	if l, ok := s.lanes[p]; ok {
		l.cons, l.pol = cons, pol
		return
	}
	l := &lane{personality: p, cons: cons, pol: pol}
	s.lanes[p] = l
	s.activate(l)
	if len(s.lanes) > maxLanes {
		s.cfg.Log.WarnContext(ctx, "more personalities with calls than the scheduler serves well", "lanes", len(s.lanes), "max", maxLanes)
	}
}

// maxKnownLanes is the most personalities of the policy that get lanes
// before their first call.
const maxKnownLanes = 64

// maxLanes is the number of lanes past which the scheduler warns: each lane
// is a consumer on the server and a poll or a pull on every round.
const maxLanes = 10000

// activate marks l as having calls waiting. A lane that was idle starts
// from the smallest pass of the lanes of its priority with calls waiting,
// so an idle lane banks no credit. s.mu is held.
func (s *Scheduler) activate(l *lane) {
	low := math.Inf(1)
	for _, o := range s.lanes {
		if o != l && o.pending && o.pol.Priority == l.pol.Priority {
			low = min(low, o.pass)
		}
	}
	if !math.IsInf(low, 1) {
		l.pass = max(l.pass, low)
	}
	l.pending = true
}

// grant is a number of calls to pull from a lane.
type grant struct {
	l *lane
	n int
}

// plan shares n slots among the lanes with calls waiting: the lowest
// priority number only, and there a chunk at a time to the lane whose pass
// (advanced by 1/weight for each slot it is given) is smallest. A chunk is
// one slot while the lanes with calls waiting are no more than the slots
// free, else as many slots as the lane is known to have calls waiting, at
// most maxChunk: with more lanes waiting than slots free, not every lane
// gets a slot of this plan anyway, and one pull brings several calls of
// one lane rather than one call of each of several lanes (a pull each).
// The shares still follow the weights over successive plans, within a
// chunk per worker: a lane's pass advances by what it was delivered.
func (s *Scheduler) plan(n int) []grant {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var ready []*lane
	top := math.MaxInt
	for _, l := range s.lanes {
		if !l.pending || now.Before(l.capped) {
			continue
		}
		switch {
		case l.pol.Priority < top:
			top, ready = l.pol.Priority, append(ready[:0], l)
		case l.pol.Priority == top:
			ready = append(ready, l)
		}
	}
	if len(ready) == 0 {
		return nil
	}
	slices.SortFunc(ready, func(a, b *lane) int { return cmp.Compare(a.personality, b.personality) })
	pass := make([]float64, len(ready))
	given := make([]int, len(ready))
	for i, l := range ready {
		pass[i] = l.pass
	}
	for left := n; left > 0; {
		best := 0
		for i := range ready {
			if pass[i] < pass[best] {
				best = i
			}
		}
		k := 1
		if len(ready) > n {
			k = min(left, chunk(ready[best]))
		}
		given[best] += k
		pass[best] += float64(k) / float64(max(ready[best].pol.Weight, 1))
		left -= k
	}
	out := make([]grant, 0, len(ready))
	for i, l := range ready {
		if given[i] > 0 {
			out = append(out, grant{l: l, n: given[i]})
		}
	}
	return out
}

// fetchNow pulls the plan's calls that are waiting now, from every lane at
// once, and returns how many it delivered. A lane that gave fewer than
// asked has none waiting (or is at its cap).
func (s *Scheduler) fetchNow(ctx context.Context, plan []grant) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for _, g := range plan {
		wg.Go(func() {
			got, capped, err := g.l.cons.FetchNoWait(ctx, g.n, s.deliverer(g.l))
			s.mu.Lock()
			switch {
			case capped:
				g.l.capped = time.Now().Add(cappedRetry)
			case got < g.n && err == nil:
				g.l.pending, g.l.waiting = false, 0
			}
			s.mu.Unlock()
			s.fetchFailed(ctx, g.l, err)
			mu.Lock()
			total += got
			mu.Unlock()
		})
	}
	wg.Wait()
	return total
}

// pollPlan shares n slots among the lanes not polling yet, at least one
// slot each, the lanes that started calls most recently first: their
// polls wait for calls. It returns nothing when every lane polls.
func (s *Scheduler) pollPlan(n int) []grant {
	s.mu.Lock()
	defer s.mu.Unlock()
	var free []*lane
	for _, l := range s.lanes {
		// A lane with calls waiting is at its cap (plan took the others):
		// a poll would only be refused.
		if !l.polling && !l.pending {
			free = append(free, l)
		}
	}
	if len(free) == 0 {
		return nil
	}
	last := func(l *lane) time.Time {
		if len(l.starts) == 0 {
			return time.Time{}
		}
		return l.starts[len(l.starts)-1]
	}
	slices.SortFunc(free, func(a, b *lane) int {
		if c := last(b).Compare(last(a)); c != 0 {
			return c
		}
		return cmp.Compare(a.personality, b.personality)
	})
	free = free[:min(len(free), n)]
	out := make([]grant, len(free))
	for i, l := range free {
		l.polling = true
		out[i] = grant{l: l, n: n / len(free)}
		if i < n%len(free) {
			out[i].n++
		}
	}
	return out
}

// startPolls starts a long-poll pull for every grant; each gives back the
// slots it did not fill when it ends. n is the slots the grants share.
func (s *Scheduler) startPolls(ctx context.Context, polls []grant, n int) {
	wait := s.cfg.IdleWait
	s.mu.Lock()
	if len(s.lanes) > 1 {
		wait = s.cfg.SharedIdleWait
	}
	s.mu.Unlock()
	given := 0
	for _, g := range polls {
		given += g.n
		s.polls.Go(func() {
			got, err := g.l.cons.Fetch(ctx, g.n, wait, s.deliverer(g.l))
			s.release(g.n - got)
			s.mu.Lock()
			g.l.polling = false
			s.mu.Unlock()
			s.fetchFailed(ctx, g.l, err)
			s.signal()
		})
	}
	s.release(n - given)
}

// fetchFailed handles a lane's failed fetch: a consumer the server no
// longer has (its state is in the server's memory, so a restart forgets
// it) is opened again; any other failure is warned about.
func (s *Scheduler) fetchFailed(ctx context.Context, l *lane, err error) {
	switch {
	case err == nil || ctx.Err() != nil:
	case errors.Is(err, bus.ErrConsumerGone):
		if s.retire(l) {
			s.cfg.Log.DebugContext(ctx, "the idle calls consumer of personality "+l.personality+" is gone; its lane comes back with its next call")
			return
		}
		s.cfg.Log.InfoContext(ctx, "the calls consumer of personality "+l.personality+" is gone (a server restart?); opening it again")
		s.ensureLane(ctx, l.personality)
	default:
		s.warn(ctx, "fetch failed for personality "+l.personality, err)
	}
}

// retire forgets l when its consumer is gone and it has no call waiting or
// running here: the server deletes a consumer nobody pulled from for
// bus.LaneInactiveThreshold, so that idle personalities cost the server
// nothing. It reports whether it did.
func (s *Scheduler) retire(l *lane) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.pending || l.running > 0 || s.lanes[l.personality] != l {
		return false
	}
	delete(s.lanes, l.personality)
	s.retired[l.personality] = struct{}{}
	return true
}

// warn logs a failing bus operation at most once per errorBackoff and
// pauses the caller as long, so a bus that is down is not asked in a loop.
func (s *Scheduler) warn(ctx context.Context, msg string, err error) {
	s.mu.Lock()
	quiet := time.Since(s.lastError) < errorBackoff
	if !quiet {
		s.lastError = time.Now()
	}
	s.mu.Unlock()
	if !quiet {
		s.cfg.Log.WarnContext(ctx, msg, "error", err)
	}
	t := time.NewTimer(errorBackoff / 10)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// maxChunk is the most slots plan gives a lane at a time.
const maxChunk = 16

// chunk is how many slots plan gives l at a time: the calls it was last
// known to have waiting (all of maxChunk when that is not known yet).
func chunk(l *lane) int {
	if l.waiting == 0 || l.waiting > maxChunk {
		return maxChunk
	}
	return int(l.waiting)
}
