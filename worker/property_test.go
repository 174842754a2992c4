package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// propertySeed drives TestGatesProperty; a failure message names it.
const propertySeed = 20240917

// Pools the random values are drawn from. Tool names never equal a label.
var (
	propLabels  = []string{"", "files", "web", "ops"}
	propServers = []string{"github", "gitlab", "jira"}
	propPlugins = []string{"acme", "zeta"}
	// Declared permissions are all "<ns>:<verb>"; weatherx shares a prefix
	// with weather to catch a namespace grant that matches a bare prefix.
	propPerms  = []string{"weather:read", "weather:write", "admin:write", "ops:run", "weatherx:read"}
	propGrants = []string{"weather:read", "weather:*", "admin:write", "admin:*", "ops:run", "weatherx:read", "ops:*"}
)

// propTool is a random tool declaration.
type propTool struct {
	Name          string
	Label         string
	Permissions   []string
	AlwaysInclude bool
	Plugin        string
	Server        string // MCP server when the name is mcp__<server>__<x>
}

// propPersonality is a random personality. A nil list is an absent key.
type propPersonality struct {
	ID          string
	Toolset     []string
	MCPServers  []string
	Plugins     []string
	Permissions []string
}

// doc renders the personality as a JSON document, leaving nil lists out.
func (p propPersonality) doc() string {
	m := map[string]any{"id": p.ID}
	for key, list := range map[string][]string{"toolset": p.Toolset, "mcp_servers": p.MCPServers, "plugins": p.Plugins, "permissions": p.Permissions} {
		if list != nil {
			m[key] = list
		}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// propCall is a random call.
type propCall struct {
	ID          string
	Tool        *propTool
	Personality *propPersonality
	Exclude     []string // nil = absent
	Narrow      []string // nil = absent
}

func (c propCall) String() string {
	return fmt.Sprintf("call %s: tool %+v, personality %s, exclude_tools %q (nil=%t), narrow_tools %q (nil=%t)",
		c.ID, *c.Tool, c.Personality.doc(), c.Exclude, c.Exclude == nil, c.Narrow, c.Narrow == nil)
}

// oracleGrants reports whether grant grants perm, from capabilities.md: an
// exact match, or "ns:*" granting every "ns:<something>".
func oracleGrants(grant, perm string) bool {
	if grant == perm {
		return true
	}
	ns, isNS := strings.CutSuffix(grant, ":*")
	if !isNS {
		return false
	}
	rest, found := strings.CutPrefix(perm, ns+":")
	return found && rest != ""
}

// oracle returns the refusal message the pipeline must give c, or "" when the
// tool must run. It follows tools.md steps 3–5 and capabilities.md:
//   - step 3: a tool in exclude_tools is refused;
//   - step 4, MCP-server and plugin filters: an mcp__<server>__* tool needs
//     its server in mcp_servers, a plugin tool its plugin in plugins (absent
//     or [] = none); the toolset does not apply to them (built-in tools only),
//     narrow_tools does; always_include does not lift these filters;
//   - step 4, toolset gate for built-in tools: toolset absent = every tool,
//     else the name or label must be listed; narrow_tools (when present,
//     even empty) must list the name; always_include bypasses this gate,
//     narrow_tools included;
//   - step 5: every declared permission must be granted; the first missing
//     one, in declaration order, is named.
func oracle(c propCall) string {
	t, p := c.Tool, c.Personality
	if slices.Contains(c.Exclude, t.Name) {
		return "Tool " + t.Name + " is not available on this surface"
	}
	notPermitted := "Tool " + t.Name + " is not permitted for this personality"
	inNarrow := c.Narrow == nil || slices.Contains(c.Narrow, t.Name)
	switch {
	case t.Server != "" || t.Plugin != "":
		if t.Server != "" && !slices.Contains(p.MCPServers, t.Server) {
			return notPermitted
		}
		if t.Plugin != "" && !slices.Contains(p.Plugins, t.Plugin) {
			return notPermitted
		}
		if !inNarrow {
			return notPermitted
		}
	case !t.AlwaysInclude:
		listed := p.Toolset == nil || slices.Contains(p.Toolset, t.Name) ||
			(t.Label != "" && slices.Contains(p.Toolset, t.Label))
		if !listed || !inNarrow {
			return notPermitted
		}
	}
	for _, perm := range t.Permissions {
		granted := false
		for _, g := range p.Permissions {
			granted = granted || oracleGrants(g, perm)
		}
		if !granted {
			return "Tool " + t.Name + " requires permission " + perm
		}
	}
	return ""
}

// subset returns a random subset of pool (each element with probability q),
// in random order; never nil.
func subset(r *rand.Rand, pool []string, q float64) []string {
	out := []string{}
	for _, s := range pool {
		if r.Float64() < q {
			out = append(out, s)
		}
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// maybeList is nil (absent) with probability pAbsent, else a subset.
func maybeList(r *rand.Rand, pAbsent float64, pool []string, q float64) []string {
	if r.Float64() < pAbsent {
		return nil
	}
	return subset(r, pool, q)
}

func randomTools(r *rand.Rand, n int) []*propTool {
	tools := make([]*propTool, n)
	for i := range tools {
		t := &propTool{Label: propLabels[r.IntN(len(propLabels))]}
		switch k := r.Float64(); {
		case k < 0.2:
			t.Server = propServers[r.IntN(len(propServers))]
			t.Name = fmt.Sprintf("mcp__%s__t%02d", t.Server, i)
		case k < 0.35:
			t.Name = fmt.Sprintf("t%02d", i)
			t.Plugin = propPlugins[r.IntN(len(propPlugins))]
		default:
			t.Name = fmt.Sprintf("t%02d", i)
		}
		if r.Float64() < 0.1 && t.Server != "" {
			t.Plugin = propPlugins[r.IntN(len(propPlugins))] // both filters apply
		}
		if r.Float64() < 0.5 {
			t.Permissions = subset(r, propPerms, 0.4)
		}
		t.AlwaysInclude = r.Float64() < 0.2
		tools[i] = t
	}
	return tools
}

func randomPersonalities(r *rand.Rand, n int, names []string) []*propPersonality {
	listable := append(slices.Clone(names), propLabels[1:]...)
	ps := make([]*propPersonality, n)
	for i := range ps {
		p := &propPersonality{ID: fmt.Sprintf("p%02d", i)}
		switch k := r.Float64(); {
		case k < 0.2: // absent: every built-in tool
		case k < 0.35:
			p.Toolset = []string{}
		default:
			p.Toolset = subset(r, listable, 0.25)
		}
		p.MCPServers = maybeList(r, 0.3, propServers, 0.5)
		p.Plugins = maybeList(r, 0.3, propPlugins, 0.5)
		p.Permissions = maybeList(r, 0.3, propGrants, 0.35)
		ps[i] = p
	}
	return ps
}

// TestGatesProperty: for random personalities, tools and calls, a tool runs
// (its execution is recorded and the result is ok) if and only if the oracle,
// written here from the spec, allows it; a refused call gets the message of
// the first refusing gate.
func TestGatesProperty(t *testing.T) {
	t.Parallel()
	const nTools, nPersonalities, nCalls = 30, 40, 200
	r := rand.New(rand.NewPCG(propertySeed, propertySeed>>1))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("TestGatesProperty seed: %d", propertySeed)
		}
	})

	tools := randomTools(r, nTools)
	names := make([]string, len(tools))
	for i, pt := range tools {
		names[i] = pt.Name
	}
	personalities := randomPersonalities(r, nPersonalities, names)

	e := newEnv(t)
	for _, p := range personalities {
		e.putPersonality(p.ID, p.doc())
	}
	l := newLedger()
	hosted := make([]tool.Tool, len(tools))
	for i, pt := range tools {
		hosted[i] = l.wrap(tool.Tool{Name: pt.Name, Toolset: pt.Label, Permissions: pt.Permissions,
			AlwaysInclude: pt.AlwaysInclude, Plugin: pt.Plugin})
	}
	e.start(worker.Config{WorkerID: "prop-w"}, hosted...)

	calls := make([]propCall, nCalls)
	for i := range calls {
		c := propCall{ID: fmt.Sprintf("prop%03d", i), Tool: tools[r.IntN(len(tools))], Personality: personalities[r.IntN(len(personalities))]}
		if r.Float64() < 0.35 {
			c.Exclude = subset(r, names, 0.05)
			if r.Float64() < 0.3 {
				c.Exclude = append(c.Exclude, c.Tool.Name)
			}
		}
		switch k := r.Float64(); {
		case k < 0.5: // absent
		case k < 0.6:
			c.Narrow = []string{}
		default:
			c.Narrow = subset(r, names, 0.1)
			if r.Float64() < 0.5 {
				c.Narrow = append(c.Narrow, c.Tool.Name)
			}
		}
		calls[i] = c
	}

	// One tail collects every result of the batch; then all calls go out at once.
	var mu sync.Mutex
	results := map[string]protocol.Result{}
	all := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	filter := e.names.Prefix() + ".result.*.prop.>" // every personality's
	stop, err := e.conn.Tail(ctx, e.names.ResultsStream(), []string{filter}, bus.FromStart, func(m *bus.Msg) {
		var res protocol.Result
		if json.Unmarshal(m.Data, &res) != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		results[res.CallID] = res
		if len(results) == nCalls {
			close(all)
		}
	})
	require.NoError(t, err)
	defer stop()
	for _, c := range calls {
		body, err := json.Marshal(protocol.Call{CallID: c.ID, BatchID: "prop", Tool: c.Tool.Name, Args: json.RawMessage(`{}`),
			SessionID: "s-prop", PersonalityID: c.Personality.ID, ExcludeTools: c.Exclude, NarrowTools: c.Narrow})
		require.NoError(t, err)
		e.publishAs("default", c.Personality.ID, c.Tool.Name, body, c.ID)
	}
	select {
	case <-all:
	case <-ctx.Done():
		mu.Lock()
		n := len(results)
		mu.Unlock()
		t.Fatalf("seed %d: %d of %d results arrived", propertySeed, n, nCalls)
	}

	mu.Lock()
	defer mu.Unlock()
	allowed := 0
	kinds := map[string]int{} // outcome kinds, to show the generator covers each
	for _, c := range calls {
		res := results[c.ID]
		want := oracle(c)
		kinds[outcomeKind(c, want)]++
		msg := fmt.Sprintf("seed %d, %s", propertySeed, c)
		if want == "" {
			allowed++
			require.True(t, res.OK, "%s: want it to run, got %s %q", msg, res.Code, res.Error)
			require.Equal(t, c.Tool.Name+" ran", res.Value, msg)
			require.Equal(t, 1, l.ran(c.ID), "%s: the tool runs once", msg)
			continue
		}
		require.False(t, res.OK, "%s: want %q, but it ran", msg, want)
		require.Equal(t, protocol.CodeNotAvailable, res.Code, msg)
		require.Equal(t, want, res.Error, msg)
		require.Zero(t, l.ran(c.ID), "%s: a refused tool never runs", msg)
	}
	require.Equal(t, allowed, l.total(), "seed %d: executions", propertySeed)
	// The generator must exercise both outcomes substantially.
	require.Greater(t, allowed, nCalls/10, "seed %d: too few allowed calls to mean anything", propertySeed)
	require.Less(t, allowed, nCalls*9/10, "seed %d: too few refused calls to mean anything", propertySeed)
	for _, k := range []string{"excluded", "toolset", "permission", "ran builtin", "ran always_include", "ran mcp", "ran plugin",
		"refused mcp", "refused plugin", "ran with narrow_tools"} {
		require.Positive(t, kinds[k], "seed %d: no call of kind %q: %v", propertySeed, k, kinds)
	}
	t.Logf("seed %d: %d of %d calls allowed; %v", propertySeed, allowed, nCalls, kinds)
}

// outcomeKind classifies a call for the coverage check.
func outcomeKind(c propCall, want string) string {
	switch {
	case strings.HasSuffix(want, "not available on this surface"):
		return "excluded"
	case strings.Contains(want, "requires permission"):
		return "permission"
	case want != "" && c.Tool.Server != "":
		return "refused mcp"
	case want != "" && c.Tool.Plugin != "":
		return "refused plugin"
	case want != "":
		return "toolset"
	case c.Tool.Server != "":
		return "ran mcp"
	case c.Tool.Plugin != "":
		return "ran plugin"
	case c.Tool.AlwaysInclude:
		return "ran always_include"
	case c.Narrow != nil:
		return "ran with narrow_tools"
	}
	return "ran builtin"
}
