package callexec

import (
	"context"
	"encoding/json"
	"time"

	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/worker/internal/observe"
)

// Approvals is the approvals bucket: a call's decision, and the hold of a
// call that waits for one (docs/approvals.md).
type Approvals interface {
	Decision(ctx context.Context, personality, call string) (*approval.Decision, error)
	Hold(ctx context.Context, h *approval.HoldRecord) (created bool, err error)
}

// readDecision reads the decision of a call re-published once decided
// (header Capstan-Approval; the header only says where to look). A decision
// other than approved answers the call at once, before any other gate;
// an approved one is kept for the approval gate (and spares the call a
// second count of its rate limit). stop is true with the answer (or the
// infrastructure fault).
func (e *Executor) readDecision(ctx context.Context, call *protocol.Call) (o outcome, stop bool) {
	d, err := e.s.approvals.Decision(ctx, call.PersonalityID, call.CallID)
	switch {
	case err != nil:
		return outcome{infra: err}, true
	case d == nil:
		return outcome{}, false
	}
	e.decision = d
	if d.Decision == protocol.ApprovalApproved {
		return outcome{}, false
	}
	return decidedOutcome(call, d), true
}

// decidedOutcome is the answer of a call whose hold ended without approval.
func decidedOutcome(call *protocol.Call, d *approval.Decision) outcome {
	var o outcome
	switch d.Decision {
	case protocol.ApprovalDenied:
		o = refuse(call, protocol.DecisionApproval, protocol.CodeNotAvailable, approval.Denied(d.Reason))
	case protocol.ApprovalExpired:
		o = refuse(call, protocol.DecisionApproval, protocol.CodeNotAvailable, approval.Expired(d.Hold.Timeout))
	case protocol.ApprovalCancelled:
		o = refuse(call, protocol.DecisionCancelled, protocol.CodeExecutionFailed, "cancelled: "+d.Reason)
	case protocol.ApprovalDeadline:
		o = refuse(call, protocol.DecisionDeadline, protocol.CodeExecutionFailed, "deadline exceeded before start")
	default:
		o = refuse(call, protocol.DecisionApproval, protocol.CodeNotAvailable, "APPROVAL_DENIED: unknown decision "+d.Decision)
	}
	o.approval = d.Stamp()
	return o
}

// approvalGate is the last gate (approvals.md): a call its personality's
// approval section names runs only once approved, with exactly the
// arguments approved. Undecided, it is held: stored in the approvals
// bucket, announced by an approval_required progress event, and
// acknowledged without an answer (it holds no slot and is not
// redelivered). A dry run never waits. stop is true when the call does not
// run now; o.approval is the approval the call runs under otherwise. The
// gate's bucket operations are bounded by OpTimeout under traceCtx; a call
// that needs no approval (most) derives no context and arms no timer.
func (e *Executor) approvalGate(traceCtx context.Context, call *protocol.Call, a *admission) (o outcome, stop bool) {
	if call.DryRun {
		return outcome{}, false
	}
	if needed, _ := a.p.Approval.Needs(call.Tool, call.Args); !needed {
		return outcome{}, false
	}
	ctx, cancel := context.WithTimeout(traceCtx, OpTimeout)
	defer cancel()
	sum, err := approval.ArgsSHA256(call.PersonalityID, call.Tool, call.Args)
	if err != nil {
		return refuse(call, protocol.DecisionApproval, protocol.CodeInputInvalid, "invalid call: "+err.Error()), true
	}
	d := e.decision
	if d == nil {
		if d, err = e.s.approvals.Decision(ctx, call.PersonalityID, call.CallID); err != nil {
			return outcome{infra: err}, true
		}
		if d != nil {
			// A copy of a call decided already (its acknowledgement was
			// lost): the decided call, re-published, answers it.
			return outcome{held: true}, true
		}
		return e.hold(ctx, call, a, sum)
	}
	if d.ArgsSHA256 != sum {
		o := refuse(call, protocol.DecisionApproval, protocol.CodeNotAvailable, approval.ErrMismatch)
		o.approval = d.Stamp()
		return o, true
	}
	return outcome{approval: d.Stamp()}, false
}

// hold stores the call's hold and, the first time, announces it.
func (e *Executor) hold(ctx context.Context, call *protocol.Call, a *admission, sum string) (outcome, bool) {
	s := e.s
	now := time.Now().UTC()
	timeout := a.p.Approval.Timeout
	if timeout <= 0 {
		timeout = capability.DefaultApprovalTimeout
	}
	h := &approval.HoldRecord{
		Hold: protocol.Hold{CallID: call.CallID, BatchID: call.EffectiveBatchID(), PersonalityID: call.PersonalityID, Tool: call.Tool,
			ArgsSHA256: sum, HeldAt: now, ExpiresAt: now.Add(timeout),
			Summary: protocol.ApprovalSummary{Args: summaryArgs(s.creds, call.Args), Grant: approval.GrantSummary(a.grant)}},
		Subject: e.m.Subject, Call: e.m.Data, Traceparent: e.m.Header.Get(protocol.HeaderTraceparent),
		Tracestate: e.m.Header.Get(protocol.HeaderTracestate), Deadline: holdDeadline(call, now),
		Timeout: capability.FormatTimeout(timeout), WorkerID: s.cfg.WorkerID,
	}
	created, err := s.approvals.Hold(ctx, h)
	if err != nil {
		return outcome{infra: err}, true
	}
	if created {
		e.announceHold(ctx, call, h)
		s.log.InfoContext(ctx, "call held for approval", "call_id", call.CallID, "tool", call.Tool,
			"personality", call.PersonalityID, "args_sha256", sum, "expires_at", h.ExpiresAt)
	}
	return outcome{held: true}, true
}

// holdDeadline is when a held call's deadline passes: its deadline, or
// timeout_ms from now, whichever comes first; nil for neither.
func holdDeadline(call *protocol.Call, now time.Time) *time.Time {
	var d *time.Time
	if call.Deadline != nil {
		t := call.Deadline.UTC()
		d = &t
	}
	if call.TimeoutMS > 0 {
		t := now.Add(time.Duration(call.TimeoutMS) * time.Millisecond)
		if d == nil || t.Before(*d) {
			d = &t
		}
	}
	return d
}

// summaryArgs are the arguments as an approval summary shows them: the
// worker's own secret values redacted; JSON still, or else a JSON string
// of the redacted text.
func summaryArgs(creds *shape.Redactor, args json.RawMessage) json.RawMessage {
	if len(args) == 0 {
		return json.RawMessage("null")
	}
	red := creds.Redact(string(args))
	if red == string(args) || json.Valid([]byte(red)) {
		return json.RawMessage(red)
	}
	b, _ := json.Marshal(red)
	return b
}

// announceHold publishes the approval_required event of a held call to the
// audiences user and dashboard. A failure is logged: the hold is listed
// whether or not anyone was told.
func (e *Executor) announceHold(ctx context.Context, call *protocol.Call, h *approval.HoldRecord) {
	s := e.s
	batch := call.EffectiveBatchID()
	for _, aud := range []protocol.Audience{protocol.AudienceUser, protocol.AudienceDashboard} {
		subject, err := s.names.ProgressSubject(aud, call.PersonalityID, batch, call.CallID)
		if err != nil {
			return
		}
		ev := protocol.Progress{Type: protocol.ProgressType, CallID: call.CallID, BatchID: batch, ToolName: call.Tool,
			Message: "approval required before " + call.Tool + " runs", Audience: aud, Seq: 1, Time: h.HeldAt,
			Kind: protocol.ProgressKindApprovalRequired,
			Approval: &protocol.ApprovalRequest{CallID: call.CallID, Tool: call.Tool, ArgsSHA256: h.ArgsSHA256,
				ExpiresAt: h.ExpiresAt, Summary: h.Summary}}
		data, err := json.Marshal(ev)
		if err != nil {
			return
		}
		octx, cancel := s.opCtx()
		_, err = s.bus.Publish(octx, subject, data, s.header(ctx, bus.Header{}), "")
		cancel()
		if err != nil {
			reason, _ := s.publishFault(err, s.names.ProgressStream())
			s.obs.PublishFailed(ctx, "progress", reason)
			s.log.WarnContext(ctx, "cannot publish approval_required event", "call_id", call.CallID, "audience", string(aud), "error", err)
		}
	}
	observe.SetOutcome(ctx, "held")
}
