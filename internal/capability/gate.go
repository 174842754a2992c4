package capability

import (
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
)

// Refusal is a gate's answer when it refuses a call: the audit decision (a
// protocol.Decision* constant), the result code and the message for the LLM.
type Refusal struct {
	Decision string
	Code     tool.Code
	Message  string
}

// Error returns the refusal's message.
func (r *Refusal) Error() string { return r.Message }

func refuse(decision, msg string) *Refusal {
	return &Refusal{Decision: decision, Code: tool.CodeNotAvailable, Message: msg}
}

// ExcludeGate is step 3 of the pipeline: a tool named in the call's
// exclude_tools is refused with not_available / "Tool <name> is not available
// on this surface" (decision protocol.DecisionExcluded). It returns nil
// otherwise.
func ExcludeGate(name string, exclude []string) *Refusal {
	if slices.Contains(exclude, name) {
		return refuse(protocol.DecisionExcluded, "Tool "+name+" is not available on this surface")
	}
	return nil
}

// ToolsetGate is step 4 of the pipeline. It returns nil when t passes the
// personality's filters and the call's narrow_tools (nil = no narrowing),
// else not_available / "Tool <name> is not permitted for this personality"
// (decision protocol.DecisionToolset):
//
//   - an MCP tool (mcp__<server>__<tool>) passes only when its server is in
//     p.MCPServers; a plugin tool only when t.Plugin is in p.Plugins (a tool
//     that is both must pass both); narrow applies to them too;
//   - any other tool passes when p.Toolset is nil or lists its name or its
//     toolset label, and narrow is nil or lists its name; t.AlwaysInclude
//     bypasses this built-in check (and only this one).
//
// A nil p is a personality with every key absent; a nil t is refused.
func ToolsetGate(t *tool.Tool, p *Personality, narrow []string) *Refusal {
	if t == nil {
		return refuse(protocol.DecisionToolset, "Tool is not defined")
	}
	if !inToolset(t, p, narrow) {
		return refuse(protocol.DecisionToolset, "Tool "+t.Name+" is not permitted for this personality")
	}
	return nil
}

func inToolset(t *tool.Tool, p *Personality, narrow []string) bool {
	if p == nil {
		p = &Personality{}
	}
	server, isMCP := tool.MCPServer(t.Name)
	isPlugin := t.Plugin != ""
	if isMCP || isPlugin {
		if isMCP && !slices.Contains(p.MCPServers, server) {
			return false
		}
		if isPlugin && !slices.Contains(p.Plugins, t.Plugin) {
			return false
		}
		return narrow == nil || slices.Contains(narrow, t.Name)
	}
	if t.AlwaysInclude {
		return true
	}
	listed := p.Toolset == nil || slices.Contains(p.Toolset, t.Name) ||
		(t.Toolset != "" && slices.Contains(p.Toolset, t.Toolset))
	return listed && (narrow == nil || slices.Contains(narrow, t.Name))
}

// PermissionGate is step 5 of the pipeline. It returns nil when every
// permission t declares is granted by p, else not_available / "Tool <name>
// requires permission <perm>" naming the first missing one (decision
// protocol.DecisionPermission). A grant "ns:*" grants every permission that
// starts with "ns:"; "*" grants all. A nil p grants nothing; a nil t is refused.
func PermissionGate(t *tool.Tool, p *Personality) *Refusal {
	if t == nil {
		return refuse(protocol.DecisionPermission, "Tool is not defined")
	}
	var grants []string
	if p != nil {
		grants = p.Permissions
	}
	for _, perm := range t.Permissions {
		if !slices.ContainsFunc(grants, func(g string) bool { return PermissionMatch(g, perm) }) {
			return refuse(protocol.DecisionPermission, "Tool "+t.Name+" requires permission "+perm)
		}
	}
	return nil
}

// PermissionMatch reports whether grant grants perm: equal strings, "*", or a
// grant ending in ":*" whose text before the "*" starts perm ("weather:*"
// grants "weather:read" but not "weather" or "weatherx:read").
func PermissionMatch(grant, perm string) bool {
	if perm == "" || grant == "" {
		return false
	}
	if grant == "*" || grant == perm {
		return true
	}
	if ns, ok := strings.CutSuffix(grant, "*"); ok && strings.HasSuffix(ns, ":") {
		return strings.HasPrefix(perm, ns) && len(perm) > len(ns)
	}
	return false
}
