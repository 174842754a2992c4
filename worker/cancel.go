package worker

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// errShutdown cancels calls still running when the shutdown grace ends; they
// are handed back for redelivery, never answered.
var errShutdown = errors.New("worker shutting down")

// cancelError is the cause of a call cancelled by request.
type cancelError struct{ reason string }

func (e *cancelError) Error() string { return "cancelled: " + e.reason }

// timeoutError is the cause of a call that ran past its timeout.
type timeoutError struct{ d time.Duration }

func (e *timeoutError) Error() string { return "timed out after " + e.d.String() }

// cancelReason returns the reason of a cancel body ("by request" when none).
func cancelReason(data []byte) string {
	var req protocol.CancelRequest
	if len(data) > 0 && json.Unmarshal(data, &req) == nil && req.Reason != "" {
		return req.Reason
	}
	return "by request"
}

// running is a call this worker has taken. A cancel request that arrives
// before the call's context exists is kept and applied when it is created.
type running struct {
	// seq is the stream sequence of the message being run.
	seq uint64
	// personality is the call's personality: a cancel request applies only
	// to a call of the personality its subject names.
	personality string
	// tool is the call's tool, for /readyz.
	tool    string
	mu      sync.Mutex
	cancelf context.CancelCauseFunc
	pending error
	// stuckAt records, per kind, since when and why the call cannot
	// finish (the zero value: it can), for /readyz.
	stuckAt [stuckKinds]stuckState
}

// stuckKind is a reason a running call cannot finish.
type stuckKind int

const (
	// stuckResult: its result cannot be published.
	stuckResult stuckKind = iota
	// stuckLease: its lease cannot be refreshed.
	stuckLease
	stuckKinds
)

// stuckState is since when and why a call cannot finish.
type stuckState struct {
	since time.Time
	err   string
}

// resultStuckAfter is how long a result may stay unpublishable before
// /readyz reports its call.
const resultStuckAfter = 5 * time.Second

// stuck records that the call cannot finish for reason k (since the first
// time, with the last error).
func (r *running) stuck(k stuckKind, err error) { r.stuckSince(k, time.Now(), err) }

// stuckSince records that the call cannot finish for reason k since the
// time given the first time, with the last error.
func (r *running) stuckSince(k stuckKind, since time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stuckAt[k].since.IsZero() {
		r.stuckAt[k].since = since
	}
	r.stuckAt[k].err = err.Error()
}

// unstuck clears reason k.
func (r *running) unstuck(k stuckKind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stuckAt[k] = stuckState{}
}

// stuckReason says why the call cannot finish, or "" when it can: its
// result unpublishable for resultStuckAfter, or its lease not refreshed
// for longer than ackWait, counted from its last refresh (the call runs
// on, and its result waits until the lease can be confirmed again).
func (r *running) stuckReason(now time.Time, ackWait time.Duration) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.stuckAt[stuckResult]; !s.since.IsZero() && now.Sub(s.since) >= resultStuckAfter {
		return "result unpublishable for " + now.Sub(s.since).Round(time.Second).String() + ": " + s.err
	}
	if s := r.stuckAt[stuckLease]; !s.since.IsZero() && now.Sub(s.since) > ackWait {
		return "lease not refreshed for " + now.Sub(s.since).Round(time.Second).String() + ": " + s.err
	}
	return ""
}

// setCancel installs the call's cancel function, applying an earlier request.
func (r *running) setCancel(f context.CancelCauseFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancelf = f
	if r.pending != nil {
		f(r.pending)
	}
}

// cancel cancels the call now, or as soon as it has a context.
func (r *running) cancel(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancelf != nil {
		r.cancelf(cause)
		return
	}
	if r.pending == nil {
		r.pending = cause
	}
}

// pendingCause returns a cancel request received before the call started.
func (r *running) pendingCause() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending
}

// inflight is the set of calls this worker runs, by call id, and the book
// of cancel requests: every worker keeps every cancel request of the last
// bus.RecordTTL in memory, from its cancel subscription and a watch of the
// cancels bucket (for those sent before it started), so that starting a
// call reads nothing from the bus to learn whether it was cancelled. One
// lock covers both, so a cancel request and the start of its call cannot
// pass each other: either the request finds the call running and cancels
// it, or the call finds the request and never starts.
type inflight struct {
	mu    sync.Mutex
	calls map[string]*running
	// cancels holds the reason and time of each cancel request, by
	// cancelKey; swept of requests older than cancelTTL.
	cancels   map[string]cancelRecord
	cancelTTL time.Duration
	sweptAt   time.Time
}

// add registers a running call of the given personality. When this worker
// already runs the call it returns false and the stream sequence of the
// message being run. A cancel request for the call in the book becomes the
// call's pending cause (it will not start).
func (f *inflight) add(id string, r *running) (bool, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, dup := f.calls[id]; dup {
		return false, cur.seq
	}
	if rec, ok := f.cancels[cancelKey(r.personality, id)]; ok {
		r.cancel(&cancelError{reason: rec.Reason})
	}
	f.calls[id] = r
	return true, 0
}

// cancelled books a cancel request and cancels the call if it runs here
// under the personality the request names. It reports whether it did.
func (f *inflight) cancelled(personality, id string, rec cancelRecord) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.book(personality, id, rec)
	r, ok := f.calls[id]
	ok = ok && r.personality == personality
	if ok {
		r.cancel(&cancelError{reason: rec.Reason})
	}
	return ok
}

// book records a cancel request (the earliest one of a call wins) and,
// at most once a minute, forgets those older than cancelTTL. f.mu is held.
func (f *inflight) book(personality, id string, rec cancelRecord) {
	if f.cancels == nil {
		f.cancels = make(map[string]cancelRecord)
	}
	key := cancelKey(personality, id)
	if _, ok := f.cancels[key]; !ok {
		f.cancels[key] = rec
	}
	now := time.Now()
	if f.cancelTTL <= 0 || now.Sub(f.sweptAt) < time.Minute {
		return
	}
	f.sweptAt = now
	for k, c := range f.cancels {
		if now.Sub(c.At) > f.cancelTTL {
			delete(f.cancels, k)
		}
	}
}

// bookEntry records a cancel request read from the cancels bucket.
func (f *inflight) bookEntry(e bus.Entry) {
	if e.Deleted {
		return
	}
	personality, id, ok := strings.Cut(e.Key, ".")
	if !ok {
		return
	}
	var rec cancelRecord
	if json.Unmarshal(e.Value, &rec) != nil || rec.Reason == "" {
		rec.Reason = "by request"
	}
	if rec.At.IsZero() {
		rec.At = e.Created
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.book(personality, id, rec)
}

func (f *inflight) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.calls, id)
}

// stuck lists the calls that cannot finish, as "call <id> (<tool>):
// <reason>", sorted.
func (f *inflight) stuck(now time.Time, ackWait time.Duration) []string {
	f.mu.Lock()
	calls := maps.Clone(f.calls)
	f.mu.Unlock()
	var out []string
	for id, r := range calls {
		if reason := r.stuckReason(now, ackWait); reason != "" {
			out = append(out, "call "+id+" ("+r.tool+"): "+reason)
		}
	}
	slices.Sort(out)
	return out
}

func (f *inflight) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// cancelRecord is the value stored in the cancels bucket.
type cancelRecord struct {
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// onCancel books a cancel request (so a call not started yet never
// starts), cancels the call if this worker runs it, and records the request
// in the cancels bucket for workers that start later. Every worker receives
// every cancel request.
func (w *Worker) onCancel(subject string, _ bus.Header, data []byte) {
	personality, id, err := w.names.ParseCancelSubject(subject)
	if err != nil {
		return
	}
	rec := cancelRecord{Reason: cancelReason(data), At: time.Now().UTC()}
	w.inflight.cancelled(personality, id, rec)
	ctx, cancel := w.opCtx()
	defer cancel()
	b, _ := json.Marshal(rec)
	if _, err := w.kv.cancels.Put(ctx, cancelKey(personality, id), b); err != nil {
		w.log.WarnContext(ctx, "cannot record cancel request", "call_id", id, "personality", personality, "error", err)
	}
}

// cancelKey is the cancels bucket's key of a call: <personality>.<call>, so
// a cancel request names the personality it applies to.
func cancelKey(personality, id string) string { return personality + "." + id }
