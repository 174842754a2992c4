package approvals

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// Publisher publishes on a stream (bus.Conn.Publish).
type Publisher interface {
	Publish(ctx context.Context, subject string, data []byte, hdr bus.Header, msgID string) (duplicate bool, err error)
}

// Consumer is the durable consumer of decisions (bus.Conn.ApprovalsConsumer).
type Consumer interface {
	Fetch(ctx context.Context, n int, wait time.Duration, fn func(*bus.Msg)) (int, error)
}

// Metrics records what the decisions consumer sees.
type Metrics interface {
	// Decided records a decision and how long the call was held.
	Decided(ctx context.Context, decision string, held time.Duration)
}

// Decisions acts on each stored decision, once, on any worker: it
// re-publishes the held call (Nats-Msg-Id <call>.decided, header
// Capstan-Approval) for the executor to answer as the decision says, writes
// the decision's audit record, removes the hold, and only then acks the
// decision: a worker that dies in between leaves it to another, and the
// calls and audit streams drop the copies.
type Decisions struct {
	Names    protocol.Names
	Store    Store
	Bus      Publisher
	Consumer Consumer
	WorkerID string
	OpCtx    func() (context.Context, context.CancelFunc)
	Log      *slog.Logger
	Metrics  Metrics
}

// otherPoolDelay is how long a decision this worker may not act on (a call
// of another pool) waits before it is offered again.
const otherPoolDelay = 2 * time.Second

// Run consumes decisions until ctx ends.
func (d *Decisions) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		_, err := d.Consumer.Fetch(ctx, 16, 5*time.Second, func(m *bus.Msg) { d.handle(ctx, m) })
		if err == nil || ctx.Err() != nil {
			backoff = 100 * time.Millisecond
			continue
		}
		d.Log.WarnContext(ctx, "cannot fetch approval decisions; retrying", "retry_in", backoff.String(), "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (d *Decisions) handle(ctx context.Context, m *bus.Msg) {
	var dec approval.Decision
	if len(m.Data) == 0 || json.Unmarshal(m.Data, &dec) != nil || dec.Hold.CallID == "" {
		// A delete marker or a value no worker wrote: nothing to act on.
		_ = m.AckNoWait()
		return
	}
	octx, cancel := d.OpCtx()
	defer cancel()
	if err := d.act(octx, &dec); err != nil {
		if errors.Is(err, bus.ErrPermissionDenied) {
			// A call of another pool, whose calls this worker's user may
			// not publish: a worker of that pool takes the decision.
			d.Log.DebugContext(octx, "approval decision left to a worker of the call's pool", "call_id", dec.Hold.CallID, "subject", dec.Hold.Subject)
			_ = m.Nak(otherPoolDelay)
			return
		}
		d.Log.WarnContext(octx, "cannot act on an approval decision; it is retried", "call_id", dec.Hold.CallID, "decision", dec.Decision, "error", err)
		_ = m.Nak(time.Second)
		return
	}
	if m.Deliveries <= 1 && d.Metrics != nil {
		d.Metrics.Decided(ctx, dec.Decision, dec.At.Sub(dec.Hold.HeldAt))
	}
	_ = m.AckNoWait()
}

// act re-publishes the decided call, audits the decision and removes the hold.
func (d *Decisions) act(ctx context.Context, dec *approval.Decision) error {
	h := &dec.Hold
	hdr := bus.Header{protocol.HeaderProtocol: {protocol.Version}, protocol.HeaderApproval: {dec.Decision}}
	if h.Traceparent != "" {
		hdr.Set(protocol.HeaderTraceparent, h.Traceparent)
	}
	if h.Tracestate != "" {
		hdr.Set(protocol.HeaderTracestate, h.Tracestate)
	}
	if _, err := d.Bus.Publish(ctx, h.Subject, h.Call, hdr, protocol.DecidedCallMsgID(h.CallID)); err != nil {
		return err
	}
	if err := d.audit(ctx, dec); err != nil {
		return err
	}
	return d.Store.Unhold(ctx, h.PersonalityID, h.CallID)
}

// audit writes the decision's record: who decided what, when, about which
// arguments' hash; never an argument value.
func (d *Decisions) audit(ctx context.Context, dec *approval.Decision) error {
	h := &dec.Hold
	call, _ := protocol.DecodeCall(h.Call)
	tok := h.Tool
	if !protocol.ValidToken(tok) {
		tok = "invalid"
	}
	subject, err := d.Names.AuditSubject(tok)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(call.Args)
	rec := protocol.AuditRecord{Time: time.Now().UTC(), CallID: h.CallID, BatchID: h.BatchID, SessionID: call.SessionID,
		PersonalityID: h.PersonalityID, Tool: h.Tool, Decision: protocol.DecisionApproval, OK: dec.Decision == protocol.ApprovalApproved,
		WorkerID: d.WorkerID, ArgsSHA256: hex.EncodeToString(sum[:]), ArgsBytes: len(call.Args), Approval: dec.Stamp()}
	line, err := protocol.EncodeAuditRecord(nil, &rec)
	if err != nil {
		return err
	}
	hdr := bus.Header{protocol.HeaderProtocol: {protocol.Version}, protocol.HeaderAuditRecords: {strconv.Itoa(1)}}
	_, err = d.Bus.Publish(ctx, subject, line, hdr, protocol.ApprovalAuditMsgID(h.CallID))
	return err
}
