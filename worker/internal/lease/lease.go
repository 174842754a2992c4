// Package lease is a worker's fenced hold on the running calls of exclusive
// tools (tool.SideEffects): a key per call in the leases bucket with its own
// TTL, refreshed with every heartbeat and fenced by revision, so that a
// worker that stalled cannot go on as if it still held the call.
package lease

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/worker/internal/cancelbook"
)

// ErrLost cancels a call whose lease another worker now holds (this
// worker stalled past the lease TTL and the call was redelivered): it is
// neither answered nor acked here, the lease holder answers it.
var ErrLost = errors.New("call lease lost to another worker")

// Lease is this worker's hold on one running call: a key in the leases
// bucket with its own TTL (bus.Timing.LeaseTTL, shorter than AckWait),
// refreshed with every heartbeat and fenced by revision, so that a worker
// that stalled cannot go on as if it still held the call.
//
// A lease is owned by one call handler; its refresh runs on the heartbeat
// goroutine, so its state is guarded by mu. Only calls of exclusive tools
// have one (tool.SideEffects); for the others the lease is nil, and a nil
// lease holds nothing, is never lost and releases nothing.
type Lease struct {
	s      *Leases
	callID string
	ttl    time.Duration
	// ctx carries the call's span, for the lease's bus operations and logs.
	ctx context.Context

	mu      sync.Mutex
	rev     uint64
	written time.Time // when the last successful write was sent
	lost    bool
	// released: the lease was let go (or its release tried); a heartbeat
	// after that must not take it again.
	released bool
	lostCh   chan struct{}
}

// KV is the leases bucket.
type KV interface {
	Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error)
	UpdateTTL(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error)
	Purge(ctx context.Context, key string, rev uint64, markerTTL time.Duration) error
}

// Leases takes the leases of one worker. Set every field before the first
// Take.
type Leases struct {
	KV       KV
	WorkerID string
	// Timing gives the leases' TTL and the heartbeat's interval.
	Timing bus.Timing
	// Bound bounds one bus operation caused by a call (the worker's
	// boundCtx: its timeout, the shutdown margin, the call's span).
	Bound func(ctx context.Context) (context.Context, context.CancelFunc)
	Log   *slog.Logger
}

// Take creates the lease of callID. It returns bus.ErrKeyExists when
// another worker holds it. callCtx carries the call's span: the lease's
// operations and log lines keep it.
func (s *Leases) Take(callCtx context.Context, callID string) (*Lease, error) {
	ttl := s.Timing.LeaseTTL()
	ctx, cancel := s.Bound(callCtx)
	defer cancel()
	sent := time.Now()
	rev, err := s.KV.Create(ctx, callID, []byte(s.WorkerID), ttl)
	if err != nil {
		return nil, err
	}
	return &Lease{s: s, callID: callID, ttl: ttl, ctx: callCtx, rev: rev, written: sent, lostCh: make(chan struct{})}, nil
}

// refresh extends the lease. When its revision is no longer the latest (it
// expired, or another worker took it), refresh tries to take it again: that
// succeeds only if nobody else holds it. held is false once the lease is lost
// for good; a transient bus error is returned with held true (the lease is
// as it was; the next heartbeat tries again).
func (l *Lease) refresh() (held bool, err error) {
	if l == nil {
		return true, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return false, nil
	}
	if l.released {
		return true, nil // the call is over; nothing to keep alive
	}
	ctx, cancel := l.s.Bound(l.ctx)
	defer cancel()
	sent := time.Now()
	rev, err := l.s.KV.UpdateTTL(ctx, l.callID, []byte(l.s.WorkerID), l.rev, l.ttl)
	if errors.Is(err, bus.ErrConflict) {
		rev, err = l.s.KV.Create(ctx, l.callID, []byte(l.s.WorkerID), l.ttl)
		if errors.Is(err, bus.ErrKeyExists) {
			l.lost = true
			close(l.lostCh)
			return false, nil
		}
	}
	if err != nil {
		return true, err
	}
	l.rev, l.written = rev, sent
	return true, nil
}

// Confirm reports whether this worker still holds the lease, before it
// publishes the call's result. A lease written less than half its TTL ago
// cannot have expired, and only its holder removes it, so no bus round trip
// is needed then; otherwise the lease is refreshed (fenced by revision). A
// transient bus error is returned for the caller to retry.
func (l *Lease) Confirm() (held bool, err error) {
	if l == nil {
		return true, nil
	}
	l.mu.Lock()
	lost, fresh := l.lost, time.Since(l.written) < l.ttl/2
	l.mu.Unlock()
	switch {
	case lost:
		return false, nil
	case fresh:
		return true, nil
	}
	return l.refresh()
}

// IsLost reports whether the lease was lost.
func (l *Lease) IsLost() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// Release removes the lease if this worker still holds it (fenced by
// revision, so a lease another worker took is never removed), leaving a
// marker that expires. Only the first call does anything.
func (l *Lease) Release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost || l.released {
		return
	}
	l.released = true
	ctx, cancel := l.s.Bound(l.ctx)
	defer cancel()
	// A purge, not a delete: a delete leaves a marker that the bucket keeps
	// for ever (one per call ever run), a purge's marker expires after
	// bus.LeaseMarkerTTL. Both are fenced by revision.
	if err := l.s.KV.Purge(ctx, l.callID, l.rev, bus.LeaseMarkerTTL); err != nil && !errors.Is(err, bus.ErrConflict) {
		// It expires by itself within its TTL.
		l.s.Log.WarnContext(l.ctx, "cannot release call lease", "call_id", l.callID, "error", err)
	}
}

// Heartbeat keeps a running call's delivery (InProgress) and lease alive
// until stopped, every Timing.Heartbeat(). When the lease is lost, the
// call is cancelled with ErrLost; while it cannot be refreshed, the call
// is marked stuck (cancelbook.StuckLease, for /readyz). It uses a timer, not a goroutine: most calls end before
// their first heartbeat. stop waits for a heartbeat under way.
func (s *Leases) Heartbeat(m *bus.Msg, l *Lease, r *cancelbook.Call) (stop func()) {
	var mu sync.Mutex // held by a heartbeat under way and by stop
	stopped := false
	var t *time.Timer
	refreshed := time.Now() // the lease was taken just before
	beat := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		_ = m.InProgress()
		held, err := l.refresh()
		if !held {
			s.Log.WarnContext(l.ctx, "call lease lost; another worker runs the call", "call_id", l.callID)
			r.Cancel(ErrLost)
			return
		}
		if err != nil {
			// Unrefreshed since the last refresh, not since this failure.
			r.StuckSince(cancelbook.StuckLease, refreshed, err)
			s.Log.WarnContext(l.ctx, "cannot refresh call lease", "call_id", l.callID, "error", err)
		} else {
			refreshed = time.Now()
			r.Unstuck(cancelbook.StuckLease)
		}
		t.Reset(s.Timing.Heartbeat())
	}
	mu.Lock()
	t = time.AfterFunc(s.Timing.Heartbeat(), beat)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// SleepOrDone waits d, or less when ctx ends or the lease is lost.
func SleepOrDone(ctx context.Context, l *Lease, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	var lost chan struct{} // nil for no lease: never ready
	if l != nil {
		lost = l.lostCh
	}
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-lost:
	}
}
