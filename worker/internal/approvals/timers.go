package approvals

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// Timers ends the holds nobody decides: each worker follows every hold
// (a watch of hold keys) and every cancel request (a watch of the cancels
// bucket), and when a hold's timeout or the call's deadline passes, or
// the call is cancelled, stores that decision. Every worker tries; the
// first decision stored wins, so a hold ends once whichever workers live.
type Timers struct {
	Store Store
	OpCtx func() (context.Context, context.CancelFunc)
	Log   *slog.Logger
	// Now is time.Now, replaced in tests.
	Now func() time.Time

	mu      sync.Mutex
	holds   map[string]timer     // by "<personality>.<call>"
	cancels map[string]cancelRec // by "<personality>.<call>"
	wake    chan struct{}
}

// Held is the number of calls held (pending), as this worker sees them.
func (t *Timers) Held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.holds)
}

// HoldEntry follows a hold key of the approvals bucket (a KV watch's
// handler): a new hold is timed, a removed one forgotten.
func (t *Timers) HoldEntry(e bus.Entry) {
	kind, personality, call, err := protocol.ParseApprovalKey(e.Key)
	if err != nil || kind != "hold" {
		return
	}
	key := personality + "." + call
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	if e.Deleted {
		delete(t.holds, key)
		return
	}
	var h approval.HoldRecord
	if json.Unmarshal(e.Value, &h) != nil {
		return
	}
	// Only when and how it ends: the call's body stays in the bucket
	// until the hold ends.
	at, decision := h.Due()
	t.holds[key] = timer{personality: personality, call: call, at: at, decision: decision}
	t.poke()
}

// CancelEntry follows the cancels bucket (a KV watch's handler, keys
// <personality>.<call>): a held call that is cancelled ends.
func (t *Timers) CancelEntry(e bus.Entry) {
	if e.Deleted {
		return
	}
	var rec struct {
		Reason string `json:"reason"`
	}
	if json.Unmarshal(e.Value, &rec) != nil || rec.Reason == "" {
		rec.Reason = "by request"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	t.cancels[e.Key] = cancelRec{reason: rec.Reason, at: e.Created}
	t.poke()
}

func (t *Timers) init() {
	if t.holds == nil {
		t.holds = make(map[string]timer)
		t.cancels = make(map[string]cancelRec)
		t.wake = make(chan struct{}, 1)
	}
}

// poke wakes Run to look again. t.mu is held.
func (t *Timers) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Run ends due holds until ctx ends, looking at least once a second and
// whenever a hold or a cancel request arrives.
func (t *Timers) Run(ctx context.Context) {
	t.mu.Lock()
	t.init()
	wake := t.wake
	t.mu.Unlock()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for _, d := range t.due() {
			t.end(ctx, d)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-wake:
		}
	}
}

// due returns the holds that end now, with their decision (and reason).
func (t *Timers) due() []timer {
	now := t.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, c := range t.cancels {
		if now.Sub(c.at) > cancelMemory {
			delete(t.cancels, key)
		}
	}
	var out []timer
	for key, h := range t.holds {
		if c, ok := t.cancels[key]; ok {
			h.decision, h.reason = protocol.ApprovalCancelled, c.reason
		} else if now.Before(h.at) {
			continue
		}
		out = append(out, h)
	}
	return out
}

// end stores the decision of a hold that ended, read from the bucket;
// whether this worker's decision or another's wins, the hold is then left
// to the consumer of decisions (and dropped from the timers when its key
// is removed).
func (t *Timers) end(ctx context.Context, h timer) {
	octx, cancel := t.OpCtx()
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	hold, err := t.Store.HoldOf(octx, h.personality, h.call)
	if err == nil && hold != nil {
		d := &approval.Decision{Decision: h.decision, Reason: h.reason, At: t.Now().UTC(), ArgsSHA256: hold.ArgsSHA256, Hold: *hold}
		var first *approval.Decision
		if first, _, err = t.Store.Decide(octx, d); err == nil {
			_ = t.Store.Unhold(octx, first.Hold.PersonalityID, first.Hold.CallID)
		}
	}
	if err != nil {
		t.Log.WarnContext(octx, "cannot end a held call; trying again", "call_id", h.call, "decision", h.decision, "error", err)
		return
	}
	t.mu.Lock()
	delete(t.holds, h.personality+"."+h.call)
	t.mu.Unlock()
}

// timer is when and how a hold ends.
type timer struct {
	personality, call string
	at                time.Time
	// decision is expired or deadline (by the clock), or cancelled with
	// reason.
	decision, reason string
}

// cancelRec is a cancel request the timers remember.
type cancelRec struct {
	reason string
	at     time.Time
}

// cancelMemory is how long the timers remember a cancel request of a call
// that is not held: as long as the cancels bucket keeps it.
const cancelMemory = bus.RecordTTL
