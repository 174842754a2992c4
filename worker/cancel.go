package worker

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
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
func (r *running) stuck(k stuckKind, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stuckAt[k].since.IsZero() {
		r.stuckAt[k].since = time.Now()
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
// for longer than ackWait (the call is then redelivered elsewhere).
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

// inflight is the set of calls this worker runs, by call id.
type inflight struct {
	mu    sync.Mutex
	calls map[string]*running
}

// add registers a running call. When this worker already runs the call it
// returns false and the stream sequence of the message being run.
func (f *inflight) add(id string, r *running) (bool, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, dup := f.calls[id]; dup {
		return false, cur.seq
	}
	f.calls[id] = r
	return true, 0
}

func (f *inflight) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.calls, id)
}

// cancel cancels the running call id if it is of the given personality.
func (f *inflight) cancel(personality, id string, cause error) bool {
	f.mu.Lock()
	r, ok := f.calls[id]
	f.mu.Unlock()
	ok = ok && r.personality == personality
	if ok {
		r.cancel(cause)
	}
	return ok
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

// onCancel records a cancel request durably (so a call not started yet never
// starts) and cancels the call if this worker runs it. Every worker receives
// every cancel request.
func (w *Worker) onCancel(subject string, _ bus.Header, data []byte) {
	personality, id, err := w.names.ParseCancelSubject(subject)
	if err != nil {
		return
	}
	reason := cancelReason(data)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, _ := json.Marshal(cancelRecord{Reason: reason, At: time.Now().UTC()})
	if _, err := w.kv.cancels.Put(ctx, cancelKey(personality, id), rec); err != nil {
		w.log.WarnContext(ctx, "cannot record cancel request", "call_id", id, "personality", personality, "error", err)
	}
	w.inflight.cancel(personality, id, &cancelError{reason: reason})
}

// cancelKey is the cancels bucket's key of a call: <personality>.<call>, so
// a cancel request names the personality it applies to.
func cancelKey(personality, id string) string { return personality + "." + id }

// cancelled returns the recorded cancel reason of a call, if any.
func (w *Worker) cancelled(ctx context.Context, call *protocol.Call) (string, bool, error) {
	e, found, err := w.kv.cancels.Get(ctx, cancelKey(call.PersonalityID, call.CallID))
	if err != nil || !found {
		return "", false, err
	}
	var rec cancelRecord
	if json.Unmarshal(e.Value, &rec) != nil || rec.Reason == "" {
		rec.Reason = "by request"
	}
	return rec.Reason, true, nil
}
