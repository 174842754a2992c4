package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/wire"
)

// Hold is a call held for a person's approval (wire.Hold).
type Hold = wire.Hold

// ApprovalRequest is the approval of a progress event of kind
// approval_required (wire.ApprovalRequest).
type ApprovalRequest = wire.ApprovalRequest

// Decision is a stored decision on a held call.
type Decision struct {
	CallID   string
	Decision string
	By       string
	At       time.Time
}

// DecidedCall is a held call and its decision, as the approvals history
// lists it.
type DecidedCall struct {
	Hold     Hold
	Decision string
	By       string
	At       time.Time
	// Reason is a denial's or a cancellation's reason.
	Reason string
}

// DecisionRefusedError is a decision the workers refused: the call is not held,
// was decided already ("already approved by alice"), the hash names other
// arguments ("approval does not match the call's arguments"), or the
// decider may not decide. Its Reason is the workers' message.
type DecisionRefusedError struct {
	CallID string
	Reason string
}

func (e *DecisionRefusedError) Error() string { return "call " + e.CallID + ": " + e.Reason }

// ErrNoWorker is returned by Approve and Deny when no worker answers
// decision requests.
var ErrNoWorker = errors.New("no worker answers decision requests")

// approvalsKV opens the approvals bucket.
func (c *Client) approvalsKV(ctx context.Context) (*bus.KV, error) {
	kv, err := c.conn.KV(ctx, bus.Approvals)
	if err != nil {
		return nil, fmt.Errorf("client: approvals: %w", err)
	}
	return kv, nil
}

// Holds lists the calls held for approval (pending: a decided call leaves
// the list), of one personality, or of every personality for "", oldest
// first. It needs read access to the approvals bucket (an approver).
func (c *Client) Holds(ctx context.Context, personality string) ([]Hold, error) {
	pattern := "hold.*.*"
	if personality != "" {
		if err := protocol.CheckToken("personality", personality); err != nil {
			return nil, fmt.Errorf("client: approvals: %w", err)
		}
		pattern = "hold." + personality + ".*"
	}
	recs, err := c.holdRecords(ctx, pattern)
	if err != nil {
		return nil, err
	}
	out := make([]Hold, len(recs))
	for i, r := range recs {
		out[i] = r.Hold
	}
	return out, nil
}

func (c *Client) holdRecords(ctx context.Context, pattern string) ([]approval.HoldRecord, error) {
	kv, err := c.approvalsKV(ctx)
	if err != nil {
		return nil, err
	}
	entries, err := kv.Scan(ctx, []string{pattern})
	if err != nil {
		return nil, fmt.Errorf("client: approvals: %w", err)
	}
	out := make([]approval.HoldRecord, 0, len(entries))
	for _, e := range entries {
		var h approval.HoldRecord
		if json.Unmarshal(e.Value, &h) == nil && h.CallID != "" {
			out = append(out, h)
		}
	}
	slices.SortStableFunc(out, func(a, b approval.HoldRecord) int { return a.HeldAt.Compare(b.HeldAt) })
	return out, nil
}

// Decisions returns the stored decisions (approved, denied, expired,
// cancelled, deadline) of one personality or of all ("" ), newest first:
// the approvals history (kept 8 days).
func (c *Client) Decisions(ctx context.Context, personality string) ([]DecidedCall, error) {
	pattern := "decision.*.*"
	if personality != "" {
		if err := protocol.CheckToken("personality", personality); err != nil {
			return nil, fmt.Errorf("client: approvals: %w", err)
		}
		pattern = "decision." + personality + ".*"
	}
	kv, err := c.approvalsKV(ctx)
	if err != nil {
		return nil, err
	}
	entries, err := kv.Scan(ctx, []string{pattern})
	if err != nil {
		return nil, fmt.Errorf("client: approvals: %w", err)
	}
	out := make([]DecidedCall, 0, len(entries))
	for _, e := range entries {
		var d approval.Decision
		if json.Unmarshal(e.Value, &d) == nil && d.Hold.CallID != "" {
			out = append(out, DecidedCall{Hold: d.Hold.Hold, Decision: d.Decision, By: d.By, At: d.At, Reason: d.Reason})
		}
	}
	slices.SortStableFunc(out, func(a, b DecidedCall) int { return b.At.Compare(a.At) })
	return out, nil
}

// FindHold returns the held call callID, of whichever personality.
func (c *Client) FindHold(ctx context.Context, callID string) (Hold, bool, error) {
	if err := protocol.CheckToken("call_id", callID); err != nil {
		return Hold{}, false, fmt.Errorf("client: approvals: %w", err)
	}
	recs, err := c.holdRecords(ctx, "hold.*."+callID)
	if err != nil || len(recs) == 0 {
		return Hold{}, false, err
	}
	return recs[0].Hold, true, nil
}

// Approve approves the held call callID, bound to the hash of its
// arguments (ApprovalRequest.ArgsSHA256, Hold.ArgsSHA256): the call runs
// once, with exactly those arguments. by is the decider's name. A refusal
// is a *DecisionRefusedError.
func (c *Client) Approve(ctx context.Context, callID, argsSHA256, reason, by string) (Decision, error) {
	return c.decide(ctx, callID, false, approval.Request{Decision: protocol.ApprovalApproved, ArgsSHA256: argsSHA256, Reason: reason, By: by})
}

// Deny denies the held call callID with a reason (at most 500
// characters): its result is not_available, "APPROVAL_DENIED: <reason>".
func (c *Client) Deny(ctx context.Context, callID, reason, by string) (Decision, error) {
	return c.decide(ctx, callID, false, approval.Request{Decision: protocol.ApprovalDenied, Reason: reason, By: by})
}

// ApproveOwn and DenyOwn decide a held call of this client's own
// personality as its caller (the self subject): the workers accept them
// only when the personality sets approval.self, and the server's
// permissions let a tenant's user send only these.
func (c *Client) ApproveOwn(ctx context.Context, callID, argsSHA256, reason, by string) (Decision, error) {
	return c.decide(ctx, callID, true, approval.Request{Decision: protocol.ApprovalApproved, ArgsSHA256: argsSHA256, Reason: reason, By: by})
}

// DenyOwn: see ApproveOwn.
func (c *Client) DenyOwn(ctx context.Context, callID, reason, by string) (Decision, error) {
	return c.decide(ctx, callID, true, approval.Request{Decision: protocol.ApprovalDenied, Reason: reason, By: by})
}

func (c *Client) decide(ctx context.Context, callID string, self bool, req approval.Request) (Decision, error) {
	if err := protocol.CheckToken("call_id", callID); err != nil {
		return Decision{}, fmt.Errorf("client: decide: %w", err)
	}
	if err := req.Check(); err != nil {
		return Decision{}, fmt.Errorf("client: decide %s: %w", callID, err)
	}
	personality := c.personality
	var subject string
	var err error
	if self {
		subject, err = c.names.ApprovalSelfSubject(personality, callID)
	} else {
		if personality, err = c.holdPersonality(ctx, callID); err != nil {
			return Decision{}, err
		}
		subject, err = c.names.ApprovalSubject(personality, callID)
	}
	if err != nil {
		return Decision{}, fmt.Errorf("client: decide: %w", err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Decision{}, err
	}
	data, err := c.conn.Request(ctx, subject, body)
	if errors.Is(err, bus.ErrNoResponders) {
		return Decision{}, fmt.Errorf("client: decide %s: %w", callID, ErrNoWorker)
	}
	if err != nil {
		return Decision{}, fmt.Errorf("client: decide %s: %w", callID, err)
	}
	var reply approval.Reply
	if err := json.Unmarshal(data, &reply); err != nil {
		return Decision{}, fmt.Errorf("client: decide %s: invalid reply: %w", callID, err)
	}
	if !reply.OK {
		return Decision{}, &DecisionRefusedError{CallID: callID, Reason: reply.Error}
	}
	return Decision{CallID: callID, Decision: reply.Decision, By: reply.By, At: reply.At}, nil
}

// holdPersonality finds the personality of a held call (an approver's
// decision names it in its subject). A call that is not held is refused
// here, naming its decision when it has one.
func (c *Client) holdPersonality(ctx context.Context, callID string) (string, error) {
	h, found, err := c.FindHold(ctx, callID)
	if err != nil {
		return "", err
	}
	if found {
		return h.PersonalityID, nil
	}
	kv, err := c.approvalsKV(ctx)
	if err != nil {
		return "", err
	}
	entries, err := kv.Scan(ctx, []string{"decision.*." + callID})
	if err != nil {
		return "", fmt.Errorf("client: approvals: %w", err)
	}
	for _, e := range entries {
		var d approval.Decision
		if json.Unmarshal(e.Value, &d) == nil {
			return "", &DecisionRefusedError{CallID: callID, Reason: approval.Already(&d)}
		}
	}
	return "", &DecisionRefusedError{CallID: callID, Reason: approval.NotHeld(callID)}
}

// ApprovalRequests calls fn with the approval of every approval_required
// event of this client's personality (audience user), on one goroutine,
// until stop is called or ctx ends; fromStart also delivers the stored
// events (kept 1 h) first. An event says a call was held; whether it is
// still held, Holds or FindHold say.
func (c *Client) ApprovalRequests(ctx context.Context, fromStart bool, fn func(ApprovalRequest)) (stop func(), err error) {
	return c.Progress(ctx, protocol.AudienceUser, "", fromStart, func(p Progress) {
		if p.Kind == protocol.ProgressKindApprovalRequired && p.Approval != nil {
			fn(*p.Approval)
		}
	})
}
