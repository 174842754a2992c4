package wire

import (
	"encoding/json"
	"time"
)

// Call is a tool call as published on <p>.call.<pool>.<personality>.<tool>.
// CallID, Tool, Args and SessionID are required; every other field may be
// left zero. Unknown fields are ignored on decode, and a field whose value
// is null counts as absent. A call can never carry policy: capabilities and
// the personality document come only from the workers' configuration.
type Call struct {
	// CallID is the call's idempotency key. Required; a token
	// (^[A-Za-z0-9_-]{1,128}$).
	CallID string `json:"call_id"`
	// BatchID groups the calls of one turn or batch; a token. Default: CallID.
	BatchID string `json:"batch_id,omitempty"`
	// Tool is the tool's name. Required; a token, equal to the <tool> token
	// of the subject.
	Tool string `json:"tool"`
	// Args are the tool's arguments, a JSON object checked against the
	// tool's JSON Schema. Required ({} when the tool takes none).
	Args json.RawMessage `json:"args"`
	// SessionID identifies the agent session. Required, not empty.
	SessionID string `json:"session_id"`
	// SessionKey is passed to the tool; when set it, not SessionID, keys
	// per-session state such as the read records of STALE_WRITE checks.
	SessionKey string `json:"session_key,omitempty"`
	// Platform is passed to the tool; default "api".
	Platform string `json:"platform,omitempty"`
	// WorkingDir is the anchor of relative paths, an absolute path; default
	// the personality's fs_reach.workdir.
	WorkingDir string `json:"working_dir,omitempty"`
	// PersonalityID names the personality the call runs under; a token.
	// When set it must equal the personality token of the subject (the
	// subject decides). Default: the worker's default personality.
	PersonalityID string `json:"personality_id,omitempty"`
	// AgentID is passed to the tool.
	AgentID string `json:"agent_id,omitempty"`
	// TeamID is passed to the tool.
	TeamID string `json:"team_id,omitempty"`
	// MemoryScopeID is passed to the tool (the memory tools key on it).
	MemoryScopeID string `json:"memory_scope_id,omitempty"`
	// CurrentTurn is passed to the tool and the reducers; at least 0.
	CurrentTurn int64 `json:"current_turn,omitempty"`
	// MessageCount is passed to the tool and the reducers; at least 0.
	MessageCount int64 `json:"message_count,omitempty"`
	// ResultBudgetChars is this call's result budget in code points,
	// greater than 0; default the personality's budget.result_chars.
	ResultBudgetChars int64 `json:"result_budget_chars,omitempty"`
	// DryRun asks for a synthetic result: every gate runs, the tool does not.
	DryRun bool `json:"dry_run,omitempty"`
	// Deadline is when a call not started yet is no longer started.
	Deadline *time.Time `json:"deadline,omitempty"`
	// TimeoutMS limits the execution, greater than 0; capped by the
	// worker's call timeout.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// ExcludeTools lists tools refused for this call. Nil and empty are the
	// same here.
	ExcludeTools []string `json:"exclude_tools,omitzero"`
	// NarrowTools, when not nil, lists the only tools that may run for this
	// call: an empty, non-nil list allows none.
	NarrowTools []string `json:"narrow_tools,omitzero"`
}

// EffectiveBatchID returns BatchID, or CallID when the call has none.
func (c *Call) EffectiveBatchID() string {
	if c.BatchID == "" {
		return c.CallID
	}
	return c.BatchID
}

// CancelRequest is the optional body of a cancel message.
type CancelRequest struct {
	// Reason says why the call was cancelled; it ends up in the result's
	// error.
	Reason string `json:"reason,omitempty"`
}
