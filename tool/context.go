package tool

import (
	"errors"

	"github.com/capstanhq/capstan/wire"
)

// Audience says who a progress event is for: wire.Audience, the audience
// argument of client.Progress too.
type Audience = wire.Audience

// The three audiences; an empty Audience means AudienceInternal.
const (
	AudienceInternal  = wire.AudienceInternal
	AudienceUser      = wire.AudienceUser
	AudienceDashboard = wire.AudienceDashboard
)

// Progress is an event a tool emits while it runs.
type Progress struct {
	Message string
	// Percent is 0–100 when set.
	Percent *float64
	// Audience defaults to AudienceInternal.
	Audience Audience
}

// ErrInvalidProgress is returned by Emit for an unknown audience or a percent
// outside 0–100.
var ErrInvalidProgress = errors.New("invalid progress event")

// Context is the call as a tool sees it: identity, budget, progress and the
// scoped accessors for exactly what was declared and resolved (nil otherwise).
type Context struct {
	CallID        string
	BatchID       string
	SessionID     string
	SessionKey    string
	Platform      string
	WorkingDir    string
	AgentID       string
	PersonalityID string
	TeamID        string
	MemoryScopeID string
	CurrentTurn   int64
	MessageCount  int64
	// ResultBudgetChars is this call's share of the turn budget.
	ResultBudgetChars int64
	DryRun            bool

	// Scoped accessors; nil when the capability was not declared or resolved to nothing.
	Fetch   Fetcher
	FS      FS
	Secrets Secrets
	Process Runner
	KV      KV
	// Reads holds the session's STALE_WRITE read records; set with FS.
	Reads ReadRecords

	// EmitFunc publishes a progress event; set by the worker.
	EmitFunc func(Progress) error
}

// Emit publishes a progress event for this call. It is safe to call from
// several goroutines; without a worker (EmitFunc nil) it does nothing.
func (c *Context) Emit(p Progress) error {
	if c == nil || c.EmitFunc == nil {
		return nil
	}
	return c.EmitFunc(p)
}
