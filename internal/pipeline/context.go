package pipeline

import (
	"cmp"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/wire"
)

// DefaultPlatform is the platform of a call that names none.
const DefaultPlatform = "api"

// DefaultBudgetChars is the result budget of a call whose personality sets
// none.
const DefaultBudgetChars = 80000

// ToolContext builds the tool's view of call under personality p: identity,
// working dir and result budget. It sets no accessor (Attach does) and no
// EmitFunc.
func ToolContext(call *wire.Call, p *capability.Personality) *tool.Context {
	budget := call.ResultBudgetChars
	if budget <= 0 {
		budget = int64(cmp.Or(p.BudgetChars, DefaultBudgetChars))
	}
	return &tool.Context{
		CallID: call.CallID, BatchID: call.EffectiveBatchID(), SessionID: call.SessionID, SessionKey: call.SessionKey,
		Platform: cmp.Or(call.Platform, DefaultPlatform), WorkingDir: cmp.Or(call.WorkingDir, p.FSReach.Workdir),
		AgentID: call.AgentID, PersonalityID: p.ID, TeamID: call.TeamID, MemoryScopeID: call.MemoryScopeID,
		CurrentTurn: call.CurrentTurn, MessageCount: call.MessageCount, ResultBudgetChars: budget, DryRun: call.DryRun,
	}
}
