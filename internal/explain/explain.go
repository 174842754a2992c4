// Package explain answers "what can this agent touch": for a personality
// and each tool, whether it may call the tool, the gate that refuses it,
// and the grant a call gets, computed with the worker's own gate and
// resolution functions. "dispatcher explain" and the console both use it.
package explain

import (
	"cmp"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
)

// Session stands for the call's session id in the storage scope ids
// that explain shows ("session:<session_id>"): it differs from call to call.
const Session = "<session_id>"

// Explanation answers, for one tool and one personality, whether the
// personality may call the tool, which gate refuses it, and the grant a
// call gets (docs/capabilities.md, "Explain"). It is the JSON shape of
// "dispatcher explain --json", one object per tool.
type Explanation struct {
	Tool    string `json:"tool"`
	Allowed bool   `json:"allowed"`
	// Gate is the audit decision of the gate that refuses the call
	// (protocol.Decision*: unknown_tool, toolset, permission, capability);
	// "" when allowed.
	Gate string `json:"gate"`
	// Message is the refusal the worker answers (not_available), "" when allowed.
	Message string `json:"message,omitempty"`
	// Problems are the validation errors of a capability refusal.
	Problems []capability.ValidationError `json:"problems,omitempty"`
	// Grant is what a call of the tool reaches; nil when refused.
	Grant *GrantView `json:"grant"`
}

// GrantView is the effective grant of an allowed tool. A capability the
// tool does not declare is nil (JSON null); a declared one that resolves to
// nothing has empty lists.
type GrantView struct {
	Network   *NetworkView   `json:"network"`
	FSReach   *FSView        `json:"fs_reach"`
	Secrets   *SecretsView   `json:"secrets"`
	Process   *ProcessView   `json:"process"`
	Storage   *StorageView   `json:"storage"`
	RateLimit *RateLimitView `json:"rate_limit"`
	// Approval is what the personality's approval section asks of a call
	// of the tool (docs/approvals.md); nil when no call of it ever waits
	// for a decision.
	Approval *ApprovalView `json:"approval"`
	// Scheduling is the personality's scheduling section, the same for
	// every tool: which of its waiting calls takes the next free slot.
	Scheduling SchedulingView `json:"scheduling"`
	Budget     BudgetView     `json:"budget"`
}

// NetworkView: a request must match one of Hosts and none of Deny.
type NetworkView struct {
	Hosts            []string `json:"hosts"`
	Deny             []string `json:"deny"`
	AllowPrivateURLs bool     `json:"allow_private_urls"`
}

// FSView lists the path roots a call may read and write.
type FSView struct {
	Read       []string `json:"read"`
	Write      []string `json:"write"`
	WorkingDir string   `json:"working_dir"`
}

// SecretsView: Refs the tool may use, Raw those whose value it may read,
// SendTo the hosts each ref pattern may be sent to over HTTP.
type SecretsView struct {
	Refs   []string            `json:"refs"`
	Raw    []string            `json:"raw"`
	SendTo map[string][]string `json:"send_to"`
}

// ProcessView lists the binaries a call may run and its limits.
type ProcessView struct {
	Binaries []string          `json:"binaries"`
	Limits   ProcessLimitsView `json:"limits"`
}

// ProcessLimitsView are the per-call ceilings of a call's children: the
// cgroup's memory, pids and cpu (CPU 0 is unlimited) and the size of each
// child's private TMPDIR.
type ProcessLimitsView struct {
	Memory      string  `json:"memory"`
	MemoryBytes int64   `json:"memory_bytes"`
	Pids        int     `json:"pids"`
	CPU         float64 `json:"cpu"`
	Tmp         string  `json:"tmp"`
	TmpBytes    int64   `json:"tmp_bytes"`
}

// StorageView is the KV scope of a call.
type StorageView struct {
	Kind              string `json:"kind"`
	Scope             string `json:"scope"`
	ScopeID           string `json:"scope_id"`
	TTLSecondsDefault int64  `json:"ttl_seconds_default"`
}

// RateLimitView is the fleet-wide rate limit of a tool for a personality.
type RateLimitView struct {
	Requests      int    `json:"requests"`
	Window        string `json:"window"`
	WindowSeconds int64  `json:"window_seconds"`
}

// SchedulingView is a personality's scheduling (docs/capabilities.md,
// "Scheduling"), defaults filled in: Priority 1 (first) to 5 (last), Weight
// its share of the slots among personalities of one priority with calls
// waiting, MaxConcurrency its calls running at once in the whole pool (0 =
// no cap).
type SchedulingView struct {
	Priority       int `json:"priority"`
	Weight         int `json:"weight"`
	MaxConcurrency int `json:"max_concurrency"`
}

// Scheduling returns the scheduling view of p, with the defaults
// (capability.DefaultScheduling) for what it does not set.
func Scheduling(p *capability.Personality) SchedulingView {
	s := p.Scheduling.WithDefaults()
	return SchedulingView{Priority: s.Priority, Weight: s.Weight, MaxConcurrency: s.MaxConcurrency}
}

// String is the scheduling as explain prints it: "priority 3, weight 1, no
// concurrency cap", or "..., max_concurrency 4" when capped.
func (s SchedulingView) String() string {
	limit := "no concurrency cap"
	if s.MaxConcurrency > 0 {
		limit = "max_concurrency " + strconv.Itoa(s.MaxConcurrency)
	}
	return "priority " + strconv.Itoa(s.Priority) + ", weight " + strconv.Itoa(s.Weight) + ", " + limit
}

// BudgetView: ResultChars is what a call that names no budget of its own
// gets: min(personality budget, tool maximum).
type BudgetView struct {
	ResultChars            int  `json:"result_chars"`
	PersonalityResultChars int  `json:"personality_result_chars"`
	ToolMaxResultChars     int  `json:"tool_max_result_chars"`
	BlobsAllowed           bool `json:"blobs_allowed"`
}

// Tools explains every tool of tools for p, in the order given.
func Tools(tools []*tool.Tool, p *capability.Personality) []Explanation {
	out := make([]Explanation, len(tools))
	for i, t := range tools {
		out[i] = Tool(t, t.Name, p)
	}
	return out
}

// Tool runs, for a call of t by personality p, the gates of the
// worker's pipeline that depend on the policy alone, in the worker's order,
// with the same functions (worker/pipeline.go: admit): unknown tool (t nil;
// name names it), toolset/MCP-server/plugin filters, permissions, then
// capability validation and resolution. The first refusal decides. Gates
// that depend on the call or the worker are not run: exclude_tools and
// narrow_tools, availability, the rate limit's count, the arguments'
// schema, the worker's secrets backend and process sandbox.
func Tool(t *tool.Tool, name string, p *capability.Personality) Explanation {
	if t == nil {
		return refusedBy(Explanation{Tool: name}, &capability.Refusal{Decision: protocol.DecisionUnknownTool, Message: "Unknown tool: " + name})
	}
	e := Explanation{Tool: t.Name}
	if r := capability.ToolsetGate(t, p, nil); r != nil {
		return refusedBy(e, r)
	}
	if r := capability.PermissionGate(t, p); r != nil {
		return refusedBy(e, r)
	}
	if errs := capability.ValidateTool(t, p); len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, ve := range errs {
			msgs[i] = ve.Message
		}
		e.Problems = errs
		return refusedBy(e, &capability.Refusal{Decision: protocol.DecisionCapability, Message: strings.Join(msgs, "; ")})
	}
	g, err := capability.Resolve(t, p, callView(t, p))
	if err != nil {
		return refusedBy(e, &capability.Refusal{Decision: protocol.DecisionCapability, Message: err.Error()})
	}
	e.Allowed = true
	e.Grant = describeGrant(t, p, g)
	return e
}

// callView is the call explain resolves for: one by personality p with no
// working_dir of its own (so the personality's workdir) and the session
// placeholder Session.
func callView(t *tool.Tool, p *capability.Personality) capability.CallView {
	return capability.CallView{Tool: t.Name, SessionID: Session, PersonalityID: p.ID}
}

func refusedBy(e Explanation, r *capability.Refusal) Explanation {
	e.Allowed, e.Gate, e.Message, e.Grant = false, r.Decision, r.Message, nil
	return e
}

// describeGrant turns the grant the worker resolves for a call of t by p
// into its view, with the personality's rate limit and budget for t.
func describeGrant(t *tool.Tool, p *capability.Personality, g *capability.Grant) *GrantView {
	v := &GrantView{}
	if n := g.Network; n != nil {
		v.Network = &NetworkView{Hosts: list(n.Hosts()), Deny: list(n.Denied()), AllowPrivateURLs: n.AllowPrivateURLs}
	}
	if f := g.FS; f != nil {
		v.FSReach = &FSView{Read: list(f.Read), Write: list(f.Write), WorkingDir: f.WorkingDir}
	}
	if s := g.Secrets; s != nil {
		sendTo := s.SendTo()
		if sendTo == nil {
			sendTo = map[string][]string{}
		}
		v.Secrets = &SecretsView{Refs: list(s.Refs()), Raw: list(s.RawRefs()), SendTo: sendTo}
	}
	if b := g.Process; b != nil {
		l := b.Limits.WithDefaults()
		v.Process = &ProcessView{Binaries: list(b.Binaries()),
			Limits: ProcessLimitsView{Memory: l.MemoryText, MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPU: l.CPU, Tmp: l.TmpText, TmpBytes: l.TmpBytes}}
	}
	if s := g.Storage; s != nil {
		v.Storage = &StorageView{Kind: cmp.Or(t.Capabilities.Storage.Kind, "kv"), Scope: string(s.Scope), ScopeID: s.ScopeID,
			TTLSecondsDefault: int64(s.TTLDefault.Seconds())}
	}
	if lim, ok := p.RateLimits[t.Name]; ok {
		v.RateLimit = &RateLimitView{Requests: lim.Requests, Window: lim.WindowText, WindowSeconds: int64(lim.Window.Seconds())}
	}
	v.Approval = Approval(p, t.Name)
	v.Scheduling = Scheduling(p)
	// As the worker gives a call without result_budget_chars its budget
	// (toolContext) and trims its result (shapeResult).
	personal := cmp.Or(p.BudgetChars, protocol.DefaultTurnBudgetChars)
	v.Budget = BudgetView{
		ResultChars:            shape.Budget(int64(personal), t.MaxResultChars),
		PersonalityResultChars: personal,
		ToolMaxResultChars:     t.MaxResultChars,
		BlobsAllowed:           !p.ForbidBlobs,
	}
	return v
}

// list returns s, or an empty list for nil (JSON [] rather than null).
func list(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
