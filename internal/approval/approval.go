// Package approval holds what workers and clients share about calls held
// for a person's approval (docs/approvals.md): the hash that binds a
// decision to the call's arguments, the records of the approvals bucket,
// the decision request and its reply, and the exact messages. It performs
// no I/O.
package approval

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/protocol"
)

// MaxReason is the longest reason of a decision, in characters.
const MaxReason = 500

// Messages of results and refusals (approvals.md).
const (
	// ErrMismatch refuses a decision naming another args_sha256 than the
	// held call's, and fails an approved call whose arguments differ.
	ErrMismatch = "approval does not match the call's arguments"
)

// Denied is the error of a denied call's result: APPROVAL_DENIED: <reason>.
func Denied(reason string) string { return "APPROVAL_DENIED: " + reason }

// Expired is the error of an expired hold's result:
// APPROVAL_EXPIRED: no decision within <timeout>.
func Expired(timeout string) string { return "APPROVAL_EXPIRED: no decision within " + timeout }

// Already refuses a second decision: already <decision> by <who> (or
// "already <decision>" for a decision nobody made: expired, deadline).
func Already(d *Decision) string {
	if d.By == "" {
		return "already " + d.Decision
	}
	return "already " + d.Decision + " by " + d.By
}

// NotHeld refuses a decision on a call that is not held.
func NotHeld(call string) string { return fmt.Sprintf("no held call %s", call) }

// HoldRecord is the value of a hold key (protocol.HoldKey): the hold as
// listed, and what a worker needs to re-publish the call once decided.
type HoldRecord struct {
	protocol.Hold
	// Subject is the call's subject; Call its body exactly as published.
	Subject string          `json:"subject"`
	Call    json.RawMessage `json:"call"`
	// Traceparent and Tracestate are the call's trace context.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
	// Deadline is when the call's deadline (or timeout_ms from when it was
	// held) passes; nil when it has none.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Timeout is the personality's approval.timeout as the expiry message
	// prints it.
	Timeout string `json:"timeout"`
	// WorkerID is the worker that held the call.
	WorkerID string `json:"worker_id,omitempty"`
}

// Due returns when the hold ends without a decision, and the decision it
// then gets: expired, or deadline when the call's deadline comes first.
func (h *HoldRecord) Due() (time.Time, string) {
	if h.Deadline != nil && h.Deadline.Before(h.ExpiresAt) {
		return *h.Deadline, protocol.ApprovalDeadline
	}
	return h.ExpiresAt, protocol.ApprovalExpired
}

// Decision is the value of a decision key (protocol.DecisionKey), created
// once: the first decision stored wins. It carries the held call so the
// decision alone lets a worker re-publish it.
type Decision struct {
	Decision   string    `json:"decision"`
	By         string    `json:"by,omitempty"`
	At         time.Time `json:"at"`
	Reason     string    `json:"reason,omitempty"`
	ArgsSHA256 string    `json:"args_sha256"`
	// Hold is the held call the decision is about.
	Hold HoldRecord `json:"hold"`
}

// Stamp is the decision as an audit record carries it (no argument values).
func (d *Decision) Stamp() *protocol.ApprovalStamp {
	return &protocol.ApprovalStamp{Decision: d.Decision, By: d.By, At: d.At, ArgsSHA256: d.ArgsSHA256, Reason: d.Reason}
}

// Request is the body of a decision request (protocol.ApprovalSubject).
type Request struct {
	// Decision is approved or denied.
	Decision string `json:"decision"`
	// ArgsSHA256 is the hash of the arguments approved (required to
	// approve; checked when given to deny).
	ArgsSHA256 string `json:"args_sha256,omitempty"`
	Reason     string `json:"reason,omitempty"`
	// By is the decider's name (docs/approvals.md says where it comes from).
	By string `json:"by"`
}

// Check returns what is wrong with r, or nil.
func (r *Request) Check() error {
	switch r.Decision {
	case protocol.ApprovalApproved:
		if r.ArgsSHA256 == "" {
			return fmt.Errorf("args_sha256: is required to approve")
		}
	case protocol.ApprovalDenied:
		if strings.TrimSpace(r.Reason) == "" {
			return fmt.Errorf("reason: is required to deny")
		}
	default:
		return fmt.Errorf("decision: must be %q or %q, not %q", protocol.ApprovalApproved, protocol.ApprovalDenied, r.Decision)
	}
	if n := utf8.RuneCountInString(r.Reason); n > MaxReason {
		return fmt.Errorf("reason: must be at most %d characters (it has %d)", MaxReason, n)
	}
	if r.By == "" {
		return fmt.Errorf("by: is required")
	}
	return nil
}

// Reply answers a decision request: OK with the decision stored, or
// Error saying why it was refused.
type Reply struct {
	OK       bool      `json:"ok"`
	Error    string    `json:"error,omitempty"`
	Decision string    `json:"decision,omitempty"`
	By       string    `json:"by,omitempty"`
	At       time.Time `json:"at,omitzero"`
}
