package wire

import (
	"encoding/json"
	"time"
)

// ProgressKindApprovalRequired is the Kind of the progress event a worker
// publishes, to audiences user and dashboard, when it holds a call for a
// person's approval (Progress.Approval says which).
const ProgressKindApprovalRequired = "approval_required"

// Approval decisions: what a person (or the clock) decided about a held call.
const (
	ApprovalApproved  = "approved"
	ApprovalDenied    = "denied"
	ApprovalExpired   = "expired"
	ApprovalCancelled = "cancelled"
	ApprovalDeadline  = "deadline"
)

// ApprovalRequest is the approval of a progress event of kind
// approval_required: the held call, the hash of its arguments a decision
// must name, when the hold expires, and what the call would do.
type ApprovalRequest struct {
	CallID     string          `json:"call_id"`
	Tool       string          `json:"tool"`
	ArgsSHA256 string          `json:"args_sha256"`
	ExpiresAt  time.Time       `json:"expires_at"`
	Summary    ApprovalSummary `json:"summary"`
}

// ApprovalSummary is what a person looks at before deciding: the validated
// arguments (secret values the worker knows redacted) and the grant the
// call would get.
type ApprovalSummary struct {
	Args  json.RawMessage `json:"args"`
	Grant ApprovalGrant   `json:"grant"`
}

// ApprovalGrant is the reach of a held call once approved: the hosts it may
// connect to, the path roots it may read and write, the binaries it may
// start, the secret refs it may use and its key-value scope. A list the
// tool does not declare is empty.
type ApprovalGrant struct {
	Hosts      []string `json:"hosts"`
	ReadPaths  []string `json:"read_paths"`
	WritePaths []string `json:"write_paths"`
	Binaries   []string `json:"binaries"`
	Secrets    []string `json:"secrets"`
	KV         []string `json:"kv"`
}

// Hold is a call held for approval, as "dispatcher approvals list --json"
// prints it and the clients list it.
type Hold struct {
	CallID        string          `json:"call_id"`
	BatchID       string          `json:"batch_id"`
	PersonalityID string          `json:"personality_id"`
	Tool          string          `json:"tool"`
	ArgsSHA256    string          `json:"args_sha256"`
	HeldAt        time.Time       `json:"held_at"`
	ExpiresAt     time.Time       `json:"expires_at"`
	Summary       ApprovalSummary `json:"summary"`
}

// ApprovalStamp is the approval of an audit record: who decided what about
// the call's arguments, and when. It never holds argument values.
type ApprovalStamp struct {
	Decision   string    `json:"decision"`
	By         string    `json:"by,omitempty"`
	At         time.Time `json:"at"`
	ArgsSHA256 string    `json:"args_sha256"`
	// Reason is a denial's or a cancellation's reason.
	Reason string `json:"reason,omitempty"`
}
