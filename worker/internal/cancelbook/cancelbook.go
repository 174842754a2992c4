// Package cancelbook is a worker's book of the calls it runs and of every
// cancel request of the last bus.RecordTTL: starting a call reads nothing
// from the bus to learn whether it was cancelled. It also holds the causes
// a call ends early for (a cancel request, its timeout, the shutdown) and
// what keeps a call from finishing (for /readyz).
package cancelbook

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// ErrShutdown cancels calls still running when the shutdown grace ends; they
// are handed back for redelivery, never answered.
var ErrShutdown = errors.New("worker shutting down")

// CancelError is the cause of a call cancelled by request.
type CancelError struct{ reason string }

// Error returns "cancelled: <reason>".
func (e *CancelError) Error() string { return "cancelled: " + e.reason }

// TimeoutError is the cause of a call that ran past its timeout D.
type TimeoutError struct{ D time.Duration }

// Error returns "timed out after <D>".
func (e *TimeoutError) Error() string { return "timed out after " + e.D.String() }

// Reason returns the reason of a cancel body ("by request" when none).
func Reason(data []byte) string {
	var req protocol.CancelRequest
	if len(data) > 0 && json.Unmarshal(data, &req) == nil && req.Reason != "" {
		return req.Reason
	}
	return "by request"
}

// Call is a call this worker has taken. A cancel request that arrives
// before the call's context exists is kept and applied when it is created.
type Call struct {
	// Seq is the stream sequence of the message being run.
	Seq uint64
	// Personality is the call's personality: a cancel request applies only
	// to a call of the personality its subject names.
	Personality string
	// Tool is the call's tool, for /readyz.
	Tool    string
	mu      sync.Mutex
	cancelf context.CancelCauseFunc
	pending error
	// stuckAt records, per kind, since when and why the call cannot
	// finish (the zero value: it can), for /readyz.
	stuckAt [StuckKinds]stuckState
}

// StuckKind is a reason a running call cannot finish.
type StuckKind int

const (
	// StuckResult: its result cannot be published.
	StuckResult StuckKind = iota
	// StuckLease: its lease cannot be refreshed.
	StuckLease
	StuckKinds
)

// stuckState is since when and why a call cannot finish.
type stuckState struct {
	since time.Time
	err   string
}

// ResultStuckAfter is how long a result may stay unpublishable before
// /readyz reports its call.
const ResultStuckAfter = 5 * time.Second

// Stuck records that the call cannot finish for reason k (since the first
// time, with the last error).
func (r *Call) Stuck(k StuckKind, err error) { r.StuckSince(k, time.Now(), err) }

// StuckSince records that the call cannot finish for reason k since the
// time given the first time, with the last error.
func (r *Call) StuckSince(k StuckKind, since time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stuckAt[k].since.IsZero() {
		r.stuckAt[k].since = since
	}
	r.stuckAt[k].err = err.Error()
}

// Unstuck clears reason k.
func (r *Call) Unstuck(k StuckKind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stuckAt[k] = stuckState{}
}

// stuckReason says why the call cannot finish, or "" when it can: its
// result unpublishable for ResultStuckAfter, or its lease not refreshed
// for longer than ackWait, counted from its last refresh (the call runs
// on, and its result waits until the lease can be confirmed again).
func (r *Call) stuckReason(now time.Time, ackWait time.Duration) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.stuckAt[StuckResult]; !s.since.IsZero() && now.Sub(s.since) >= ResultStuckAfter {
		return "result unpublishable for " + now.Sub(s.since).Round(time.Second).String() + ": " + s.err
	}
	if s := r.stuckAt[StuckLease]; !s.since.IsZero() && now.Sub(s.since) > ackWait {
		return "lease not refreshed for " + now.Sub(s.since).Round(time.Second).String() + ": " + s.err
	}
	return ""
}

// SetCancel installs the call's cancel function, applying an earlier request.
func (r *Call) SetCancel(f context.CancelCauseFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancelf = f
	if r.pending != nil {
		f(r.pending)
	}
}

// Cancel cancels the call now, or as soon as it has a context.
func (r *Call) Cancel(cause error) {
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

// PendingCause returns a cancel request received before the call started.
func (r *Call) PendingCause() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending
}

// Book is the set of calls this worker runs, by call id, and the book
// of cancel requests: every worker keeps every cancel request of the last
// bus.RecordTTL in memory, from its cancel subscription and a watch of the
// cancels bucket (for those sent before it started), so that starting a
// call reads nothing from the bus to learn whether it was cancelled. One
// lock covers both, so a cancel request and the start of its call cannot
// pass each other: either the request finds the call running and cancels
// it, or the call finds the request and never starts.
type Book struct {
	mu    sync.Mutex
	calls map[string]*Call
	// cancels holds the reason and time of each cancel request, by
	// Key; swept of requests older than cancelTTL.
	cancels   map[string]Record
	cancelTTL time.Duration
	sweptAt   time.Time
}

// New returns an empty book that forgets cancel requests older than ttl
// (bus.RecordTTL: the cancels bucket's own).
func New(ttl time.Duration) *Book {
	return &Book{calls: make(map[string]*Call), cancels: make(map[string]Record), cancelTTL: ttl}
}

// Add registers a running call of the given personality. When this worker
// already runs the call it returns false and the stream sequence of the
// message being run. A cancel request for the call in the book becomes the
// call's pending cause (it will not start).
func (f *Book) Add(id string, r *Call) (bool, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, dup := f.calls[id]; dup {
		return false, cur.Seq
	}
	if rec, ok := f.cancels[Key(r.Personality, id)]; ok {
		r.Cancel(&CancelError{reason: rec.Reason})
	}
	f.calls[id] = r
	return true, 0
}

// Cancelled books a cancel request and cancels the call if it runs here
// under the personality the request names. It reports whether it did.
func (f *Book) Cancelled(personality, id string, rec Record) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.book(personality, id, rec)
	r, ok := f.calls[id]
	ok = ok && r.Personality == personality
	if ok {
		r.Cancel(&CancelError{reason: rec.Reason})
	}
	return ok
}

// book records a cancel request (the earliest one of a call wins) and,
// at most once a minute, forgets those older than cancelTTL. f.mu is held.
func (f *Book) book(personality, id string, rec Record) {
	if f.cancels == nil {
		f.cancels = make(map[string]Record)
	}
	key := Key(personality, id)
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

// BookEntry records a cancel request read from the cancels bucket.
func (f *Book) BookEntry(e bus.Entry) {
	if e.Deleted {
		return
	}
	personality, id, ok := strings.Cut(e.Key, ".")
	if !ok {
		return
	}
	var rec Record
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

// Remove forgets the call id (it ended).
func (f *Book) Remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.calls, id)
}

// Stuck lists the calls that cannot finish, as "call <id> (<tool>):
// <reason>", sorted.
func (f *Book) Stuck(now time.Time, ackWait time.Duration) []string {
	f.mu.Lock()
	calls := maps.Clone(f.calls)
	f.mu.Unlock()
	var out []string
	for id, r := range calls {
		if reason := r.stuckReason(now, ackWait); reason != "" {
			out = append(out, "call "+id+" ("+r.Tool+"): "+reason)
		}
	}
	slices.Sort(out)
	return out
}

// Count is the number of calls running.
func (f *Book) Count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// Record is the value stored in the cancels bucket.
type Record struct {
	// Reason is the request's reason ("by request" when it gave none);
	// At is when the first worker received it.
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Key is the cancels bucket's key of a call: <personality>.<call>, so
// a cancel request names the personality it applies to.
func Key(personality, id string) string { return personality + "." + id }

// Store keeps cancel requests for the workers that start later: the
// cancels bucket.
type Store interface {
	Put(ctx context.Context, key string, value []byte) (uint64, error)
}

// Requests takes the cancel requests of the cancel subscription: every
// worker receives every request.
type Requests struct {
	Book  *Book
	Names protocol.Names
	Store Store
	// OpCtx bounds one bus operation (the worker's operation timeout and
	// shutdown margin).
	OpCtx func() (context.Context, context.CancelFunc)
	Log   *slog.Logger
}

// Handle books a cancel request (so a call not started yet never starts),
// cancels the call if this worker runs it, and records the request in the
// cancels bucket for workers that start later. Its signature is a bus
// subscription's handler.
func (q *Requests) Handle(subject string, _ bus.Header, data []byte) {
	personality, id, err := q.Names.ParseCancelSubject(subject)
	if err != nil {
		return
	}
	rec := Record{Reason: Reason(data), At: time.Now().UTC()}
	q.Book.Cancelled(personality, id, rec)
	ctx, cancel := q.OpCtx()
	defer cancel()
	b, _ := json.Marshal(rec)
	if _, err := q.Store.Put(ctx, Key(personality, id), b); err != nil {
		q.Log.WarnContext(ctx, "cannot record cancel request", "call_id", id, "personality", personality, "error", err)
	}
}
