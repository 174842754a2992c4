package protocol

import (
	"fmt"
	"strings"

	"github.com/capstanhq/capstan/wire"
)

// Approvals (docs/approvals.md): the held calls and the decisions live in
// the approvals bucket, under the keys HoldKey and DecisionKey; a decision
// is asked for by a core NATS request on ApprovalSubject (an approver) or
// ApprovalSelfSubject (the caller's own session, when the personality has
// approval.self), answered by a worker.

// Hold, ApprovalRequest, ApprovalSummary, ApprovalGrant and ApprovalStamp
// are package wire's.
type (
	Hold            = wire.Hold
	ApprovalRequest = wire.ApprovalRequest
	ApprovalSummary = wire.ApprovalSummary
	ApprovalGrant   = wire.ApprovalGrant
	ApprovalStamp   = wire.ApprovalStamp
)

// HeaderApproval marks a held call that a worker re-published once it was
// decided; its value is the decision. The header is a hint only: a worker
// believes the decision stored in the approvals bucket, never the header.
const HeaderApproval = "Capstan-Approval"

// DecisionApproval is the audit decision of a record written for an
// approval decision (its Approval says which), and of a held call answered
// by the decision (denied, expired).
const DecisionApproval = "approval"

// Approval decisions (wire.Approval*).
const (
	ApprovalApproved  = wire.ApprovalApproved
	ApprovalDenied    = wire.ApprovalDenied
	ApprovalExpired   = wire.ApprovalExpired
	ApprovalCancelled = wire.ApprovalCancelled
	ApprovalDeadline  = wire.ApprovalDeadline
)

// ApprovalsBucket is <prefix>_approvals.
func (n Names) ApprovalsBucket() string { return n.bucket("approvals") }

// HoldKey is the approvals bucket's key of a held call: hold.<personality>.<call>.
func HoldKey(personality, call string) string { return "hold." + personality + "." + call }

// DecisionKey is the approvals bucket's key of a call's decision:
// decision.<personality>.<call>.
func DecisionKey(personality, call string) string { return "decision." + personality + "." + call }

// ParseApprovalKey returns the kind ("hold" or "decision"), personality and
// call of an approvals bucket key.
func ParseApprovalKey(key string) (kind, personality, call string, err error) {
	parts := strings.Split(key, ".")
	if len(parts) != 3 || (parts[0] != "hold" && parts[0] != "decision") || !ValidToken(parts[1]) || !ValidToken(parts[2]) {
		return "", "", "", fmt.Errorf("key %q is not hold.<personality>.<call> or decision.<personality>.<call>", key)
	}
	return parts[0], parts[1], parts[2], nil
}

// ApprovalSubject returns <p>.approval.decide.<personality>.<call>, the
// subject of an approver's decision request.
func (n Names) ApprovalSubject(personality, call string) (string, error) {
	return n.approvalSubject("decide", personality, call)
}

// ApprovalSelfSubject returns <p>.approval.self.<personality>.<call>, the
// subject of a decision request of the caller's own session (accepted only
// for a personality with approval.self).
func (n Names) ApprovalSelfSubject(personality, call string) (string, error) {
	return n.approvalSubject("self", personality, call)
}

func (n Names) approvalSubject(kind, personality, call string) (string, error) {
	if err := CheckToken("personality", personality); err != nil {
		return "", err
	}
	if err := CheckToken("call_id", call); err != nil {
		return "", err
	}
	return n.prefix + ".approval." + kind + "." + personality + "." + call, nil
}

// ApprovalRequestsFilter is <p>.approval.*.*.* (workers answer in one queue group).
func (n Names) ApprovalRequestsFilter() string { return n.prefix + ".approval.*.*.*" }

// ParseApprovalSubject returns whether the subject is a self request, and
// its personality and call.
func (n Names) ParseApprovalSubject(subject string) (self bool, personality, call string, err error) {
	rest, ok := strings.CutPrefix(subject, n.prefix+".approval.")
	parts := strings.Split(rest, ".")
	if !ok || len(parts) != 3 || (parts[0] != "decide" && parts[0] != "self") || !ValidToken(parts[1]) || !ValidToken(parts[2]) {
		return false, "", "", fmt.Errorf("subject %q is not <prefix>.approval.decide|self.<personality>.<call>", subject)
	}
	return parts[0] == "self", parts[1], parts[2], nil
}

// DecidedCallMsgID is the Nats-Msg-Id of a held call re-published once
// decided: <call>.decided, so that the calls stream does not take it for a
// duplicate of the call itself, and takes a second re-publication for one.
func DecidedCallMsgID(call string) string { return call + ".decided" }

// ApprovalAuditMsgID is the Nats-Msg-Id of a decision's audit record.
func ApprovalAuditMsgID(call string) string { return call + ".approval" }

// ProgressKindApprovalRequired is the kind of a held call's progress event
// (wire.ProgressKindApprovalRequired).
const ProgressKindApprovalRequired = wire.ProgressKindApprovalRequired
