package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/worker/internal/cancelbook"
)

// errLeaseLost cancels a call whose lease another worker now holds (this
// worker stalled past the lease TTL and the call was redelivered): it is
// neither answered nor acked here, the lease holder answers it.
var errLeaseLost = errors.New("call lease lost to another worker")

// lease is this worker's hold on one running call: a key in the leases
// bucket with its own TTL (bus.Timing.LeaseTTL, shorter than AckWait),
// refreshed with every heartbeat and fenced by revision, so that a worker
// that stalled cannot go on as if it still held the call.
//
// A lease is owned by one call handler; its refresh runs on the heartbeat
// goroutine, so its state is guarded by mu. Only calls of exclusive tools
// have one (tool.SideEffects); for the others the lease is nil, and a nil
// lease holds nothing, is never lost and releases nothing.
type lease struct {
	w      *Worker
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

// takeLease creates the lease of callID. It returns bus.ErrKeyExists when
// another worker holds it. callCtx carries the call's span: the lease's
// operations and log lines keep it.
func (w *Worker) takeLease(callCtx context.Context, callID string) (*lease, error) {
	ttl := w.timing.LeaseTTL()
	ctx, cancel := w.boundCtx(callCtx)
	defer cancel()
	sent := time.Now()
	rev, err := w.kv.leases.Create(ctx, callID, []byte(w.cfg.WorkerID), ttl)
	if err != nil {
		return nil, err
	}
	return &lease{w: w, callID: callID, ttl: ttl, ctx: callCtx, rev: rev, written: sent, lostCh: make(chan struct{})}, nil
}

// refresh extends the lease. When its revision is no longer the latest (it
// expired, or another worker took it), refresh tries to take it again: that
// succeeds only if nobody else holds it. held is false once the lease is lost
// for good; a transient bus error is returned with held true (the lease is
// as it was; the next heartbeat tries again).
func (l *lease) refresh() (held bool, err error) {
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
	ctx, cancel := l.w.boundCtx(l.ctx)
	defer cancel()
	sent := time.Now()
	rev, err := l.w.kv.leases.UpdateTTL(ctx, l.callID, []byte(l.w.cfg.WorkerID), l.rev, l.ttl)
	if errors.Is(err, bus.ErrConflict) {
		rev, err = l.w.kv.leases.Create(ctx, l.callID, []byte(l.w.cfg.WorkerID), l.ttl)
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

// confirm reports whether this worker still holds the lease, before it
// publishes the call's result. A lease written less than half its TTL ago
// cannot have expired, and only its holder removes it, so no bus round trip
// is needed then; otherwise the lease is refreshed (fenced by revision). A
// transient bus error is returned for the caller to retry.
func (l *lease) confirm() (held bool, err error) {
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

// isLost reports whether the lease was lost.
func (l *lease) isLost() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// release removes the lease if this worker still holds it (fenced by
// revision, so a lease another worker took is never removed), leaving a
// marker that expires. Only the first call does anything.
func (l *lease) release() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost || l.released {
		return
	}
	l.released = true
	ctx, cancel := l.w.boundCtx(l.ctx)
	defer cancel()
	// A purge, not a delete: a delete leaves a marker that the bucket keeps
	// for ever (one per call ever run), a purge's marker expires after
	// bus.LeaseMarkerTTL. Both are fenced by revision.
	if err := l.w.kv.leases.Purge(ctx, l.callID, l.rev, bus.LeaseMarkerTTL); err != nil && !errors.Is(err, bus.ErrConflict) {
		// It expires by itself within its TTL.
		l.w.log.WarnContext(l.ctx, "cannot release call lease", "call_id", l.callID, "error", err)
	}
}

// heartbeat keeps a running call's delivery (InProgress) and lease alive
// until stopped. When the lease is lost, the call is cancelled with
// errLeaseLost. It uses a timer, not a goroutine: most calls end before
// their first heartbeat. stop waits for a heartbeat under way.
func (w *Worker) heartbeat(m *bus.Msg, l *lease, r *cancelbook.Call) (stop func()) {
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
			w.log.WarnContext(l.ctx, "call lease lost; another worker runs the call", "call_id", l.callID)
			r.Cancel(errLeaseLost)
			return
		}
		if err != nil {
			// Unrefreshed since the last refresh, not since this failure.
			r.StuckSince(cancelbook.StuckLease, refreshed, err)
			w.log.WarnContext(l.ctx, "cannot refresh call lease", "call_id", l.callID, "error", err)
		} else {
			refreshed = time.Now()
			r.Unstuck(cancelbook.StuckLease)
		}
		t.Reset(w.timing.Heartbeat())
	}
	mu.Lock()
	t = time.AfterFunc(w.timing.Heartbeat(), beat)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// sleepOrDone waits d, or less when ctx ends or the lease is lost.
func sleepOrDone(ctx context.Context, l *lease, d time.Duration) {
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
