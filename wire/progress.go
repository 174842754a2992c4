package wire

import "time"

// ProgressType is the value of Progress.Type.
const ProgressType = "progress"

// Progress is a progress event, published by a running tool on
// <p>.progress.<audience>.<personality>.<batch>.<call>. Every field is set
// by the worker.
type Progress struct {
	// Type is always ProgressType.
	Type string `json:"type"`
	// CallID is the call's id.
	CallID string `json:"call_id"`
	// BatchID is the call's batch id (its CallID when it has none).
	BatchID string `json:"batch_id"`
	// ToolName is the tool that emitted the event.
	ToolName string `json:"tool_name"`
	// Message is the tool's text, redacted, at most 2,000 code points.
	Message string `json:"message"`
	// Percent is 0 to 100 when the tool gave one.
	Percent *float64 `json:"percent,omitempty"`
	// Audience is who the event is for.
	Audience Audience `json:"audience"`
	// Seq numbers the call's events from 1, increasing.
	Seq int64 `json:"seq"`
	// Time is when the tool emitted the event.
	Time time.Time `json:"time"`
	// Kind is empty for a tool's own event, ProgressKindApprovalRequired
	// for the event of a call held for approval.
	Kind string `json:"kind,omitempty"`
	// Approval is set on an event of kind approval_required.
	Approval *ApprovalRequest `json:"approval,omitempty"`
}
