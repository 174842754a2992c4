package explain

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/mcphost"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tools/builtin"
)

// researcherDoc is a personality that sets every key explain shows.
const researcherDoc = `id: researcher
toolset: [gh, files, runner, memo, notes, scratch, weather, fetcher, wide]
mcp_servers: [github]
permissions: ["weather:read"]
fs_reach:
  workdir: /srv/agents/researcher
  read: ["${WORKDIR}", /srv/shared]
  write: ["${WORKDIR}/out"]
safety:
  network:
    allow: ["*.github.com", "api.openai.com"]
    deny: [gist.github.com]
secrets:
  allow: ["providers/github/*", "http/*"]
  send_to:
    "providers/github/*": [api.github.com]
    "http/openai": [api.openai.com]
process:
  allow: [git, ls]
  limits: {memory: 512MiB, pids: 64, cpu: 1.5, tmp: 64MiB}
rate_limits:
  gh: {requests: 100, window: 1h}
scheduling: {priority: 2, weight: 5, max_concurrency: 4}
approval:
  require:
    - tool: gh
      when: {method: [POST, DELETE]}
    - tool: "mcp__github__*"
  timeout: 90m
  approvers: [oncall]
budget: {result_chars: 50000}
`

// The scheduling views of researcherDoc and of a personality without a
// scheduling section.
var (
	researcherScheduling = SchedulingView{Priority: 2, Weight: 5, MaxConcurrency: 4}
	defaultScheduling    = SchedulingView{Priority: 3, Weight: 1, MaxConcurrency: 0}
)

// The approval views of researcherDoc's tools gh and mcp__github__*.
var (
	ghApproval = &ApprovalView{Required: "when", When: []map[string][]any{{"method": {"POST", "DELETE"}}},
		Timeout: "1h30m", Approvers: []string{"oncall"}}
	githubApproval = &ApprovalView{Required: "always", Timeout: "1h30m", Approvers: []string{"oncall"}}
)

func parsePersonality(t *testing.T, doc string) *capability.Personality {
	t.Helper()
	p, err := capability.Parse([]byte(doc), capability.Env{Home: "/home/agent"})
	require.NoError(t, err)
	return p
}

func TestExplainTool(t *testing.T) {
	t.Parallel()
	researcher := parsePersonality(t, researcherDoc)
	bare := parsePersonality(t, "id: bare\nbudget: {result_chars: 1000, blobs: false}\n")
	gh := &tool.Tool{Name: "gh", Toolset: "web", MaxResultChars: 20000, Capabilities: tool.Capabilities{
		Network:    &tool.Network{AllowedHosts: []string{"*"}},
		Secrets:    []string{"providers/*", "http/openai", "vault/*"},
		SecretsRaw: []string{"providers/github/app/key"},
	}}
	tests := []struct {
		name string
		tool *tool.Tool
		p    *capability.Personality
		want Explanation
	}{
		{name: "network and secrets: hosts, send_to bindings and raw refs", tool: gh, p: researcher,
			want: Explanation{Tool: "gh", Allowed: true, Grant: &GrantView{
				Network: &NetworkView{Hosts: []string{"*.github.com", "api.openai.com"}, Deny: []string{"gist.github.com"}},
				Secrets: &SecretsView{
					Refs:   []string{"providers/github/*", "http/openai"},
					Raw:    []string{"providers/github/app/key"},
					SendTo: map[string][]string{"providers/github/*": {"api.github.com"}, "http/openai": {"api.openai.com"}},
				},
				RateLimit:  &RateLimitView{Requests: 100, Window: "1h", WindowSeconds: 3600},
				Approval:   ghApproval,
				Budget:     BudgetView{ResultChars: 20000, PersonalityResultChars: 50000, ToolMaxResultChars: 20000, BlobsAllowed: true},
				Scheduling: researcherScheduling,
			}}},
		{name: "files: read and write roots, working dir", p: researcher,
			tool: &tool.Tool{Name: "files", Capabilities: tool.Capabilities{FSReach: &tool.FSReach{
				Read: tool.FromPersonality(), Write: tool.Paths("/srv/agents/researcher/out/reports")}}},
			want: Explanation{Tool: "files", Allowed: true, Grant: &GrantView{
				FSReach: &FSView{Read: []string{"/srv/agents/researcher", "/srv/shared"}, Write: []string{"/srv/agents/researcher/out/reports"},
					WorkingDir: "/srv/agents/researcher"},
				Budget:     BudgetView{ResultChars: 50000, PersonalityResultChars: 50000, BlobsAllowed: true},
				Scheduling: researcherScheduling,
			}}},
		{name: "process: binaries under the ceiling and the limits", p: researcher,
			tool: &tool.Tool{Name: "runner", Capabilities: tool.Capabilities{Process: &tool.Process{AllowedBinaries: []string{"*"}}}},
			want: Explanation{Tool: "runner", Allowed: true, Grant: &GrantView{
				Process: &ProcessView{Binaries: []string{"git", "ls"},
					Limits: ProcessLimitsView{Memory: "512MiB", MemoryBytes: 512 << 20, Pids: 64, CPU: 1.5, Tmp: "64MiB", TmpBytes: 64 << 20}},
				Budget:     BudgetView{ResultChars: 50000, PersonalityResultChars: 50000, BlobsAllowed: true},
				Scheduling: researcherScheduling,
			}}},
		{name: "process: default limits, no ceiling", p: bare,
			tool: &tool.Tool{Name: "runner", Capabilities: tool.Capabilities{Process: &tool.Process{AllowedBinaries: []string{"bash"}}}},
			want: Explanation{Tool: "runner", Allowed: true, Grant: &GrantView{
				Process: &ProcessView{Binaries: []string{"bash"},
					Limits: ProcessLimitsView{Memory: "1GiB", MemoryBytes: 1 << 30, Pids: 256, Tmp: "256MiB", TmpBytes: 256 << 20}},
				Budget:     BudgetView{ResultChars: 1000, PersonalityResultChars: 1000},
				Scheduling: defaultScheduling,
			}}},
		{name: "storage: session scope", p: researcher,
			tool: &tool.Tool{Name: "memo", Capabilities: tool.Capabilities{Storage: &tool.Storage{Scope: tool.ScopeSession, Kind: "kv", TTLSecondsDefault: 3600}}},
			want: Explanation{Tool: "memo", Allowed: true, Grant: &GrantView{
				Storage:    &StorageView{Kind: "kv", Scope: "session", ScopeID: "session:<session_id>", TTLSecondsDefault: 3600},
				Budget:     BudgetView{ResultChars: 50000, PersonalityResultChars: 50000, BlobsAllowed: true},
				Scheduling: researcherScheduling,
			}}},
		{name: "storage: personality scope", p: researcher,
			tool: &tool.Tool{Name: "notes", Capabilities: tool.Capabilities{Storage: &tool.Storage{Scope: tool.ScopePersonality, Kind: "kv"}}},
			want: Explanation{Tool: "notes", Allowed: true, Grant: &GrantView{
				Storage:    &StorageView{Kind: "kv", Scope: "personality", ScopeID: "personality:researcher"},
				Budget:     BudgetView{ResultChars: 50000, PersonalityResultChars: 50000, BlobsAllowed: true},
				Scheduling: researcherScheduling,
			}}},
		{name: "storage: tool-private scope", p: researcher,
			tool: &tool.Tool{Name: "scratch", Capabilities: tool.Capabilities{Storage: &tool.Storage{Scope: tool.ScopeToolPrivate, Kind: "kv"}}},
			want: Explanation{Tool: "scratch", Allowed: true, Grant: &GrantView{
				Storage:    &StorageView{Kind: "kv", Scope: "tool-private", ScopeID: "tool:scratch"},
				Budget:     BudgetView{ResultChars: 50000, PersonalityResultChars: 50000, BlobsAllowed: true},
				Scheduling: researcherScheduling,
			}}},
		{name: "declared capabilities that resolve to nothing", p: bare,
			tool: &tool.Tool{Name: "fetcher", Capabilities: tool.Capabilities{
				Network: &tool.Network{AllowedHosts: []string{"*"}}, FSReach: &tool.FSReach{Read: tool.FromPersonality()}, Secrets: []string{"http/*"}}},
			want: Explanation{Tool: "fetcher", Allowed: true, Grant: &GrantView{
				Network:    &NetworkView{Hosts: []string{}, Deny: []string{}},
				FSReach:    &FSView{Read: []string{}, Write: []string{}},
				Secrets:    &SecretsView{Refs: []string{"http/*"}, Raw: []string{}, SendTo: map[string][]string{}},
				Budget:     BudgetView{ResultChars: 1000, PersonalityResultChars: 1000},
				Scheduling: defaultScheduling,
			}}},
		{name: "a tool that touches nothing", p: researcher, tool: &tool.Tool{Name: "weather", Permissions: []string{"weather:read"}},
			want: Explanation{Tool: "weather", Allowed: true, Grant: &GrantView{
				Budget:     BudgetView{ResultChars: 50000, PersonalityResultChars: 50000, BlobsAllowed: true},
				Scheduling: researcherScheduling,
			}}},
		{name: "hosted MCP tool of a listed server", p: researcher,
			tool: &tool.Tool{Name: "mcp__github__search", Capabilities: tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"api.github.com"}}}},
			want: Explanation{Tool: "mcp__github__search", Allowed: true, Grant: &GrantView{
				Network:    &NetworkView{Hosts: []string{"api.github.com"}, Deny: []string{"gist.github.com"}},
				Approval:   githubApproval,
				Budget:     BudgetView{ResultChars: 50000, PersonalityResultChars: 50000, BlobsAllowed: true},
				Scheduling: researcherScheduling,
			}}},

		{name: "unknown tool", p: researcher, tool: nil,
			want: Explanation{Tool: "mystery", Gate: protocol.DecisionUnknownTool, Message: "Unknown tool: mystery"}},
		{name: "toolset", p: researcher, tool: &tool.Tool{Name: "terminal", Toolset: "terminal"},
			want: Explanation{Tool: "terminal", Gate: protocol.DecisionToolset, Message: "Tool terminal is not permitted for this personality"}},
		{name: "mcp_servers", p: researcher, tool: &tool.Tool{Name: "mcp__jira__search"},
			want: Explanation{Tool: "mcp__jira__search", Gate: protocol.DecisionToolset, Message: "Tool mcp__jira__search is not permitted for this personality"}},
		{name: "plugins", p: researcher, tool: &tool.Tool{Name: "gh", Plugin: "extras"},
			want: Explanation{Tool: "gh", Gate: protocol.DecisionToolset, Message: "Tool gh is not permitted for this personality"}},
		{name: "permission", p: researcher, tool: &tool.Tool{Name: "weather", Permissions: []string{"weather:read", "weather:write"}},
			want: Explanation{Tool: "weather", Gate: protocol.DecisionPermission, Message: "Tool weather requires permission weather:write"}},
		{name: "validation problems, all of them", p: researcher,
			tool: &tool.Tool{Name: "wide", Capabilities: tool.Capabilities{
				Network: &tool.Network{AllowedHosts: []string{"api.stripe.com", "gist.github.com"}},
				FSReach: &tool.FSReach{Read: tool.Paths("/etc"), Write: tool.Paths("/srv/shared")}}},
			want: Explanation{Tool: "wide", Gate: protocol.DecisionCapability,
				Message: `host "api.stripe.com" is not in personality network allow list; host "gist.github.com" is on personality network deny list; ` +
					`path "/etc" is not covered by personality fs_reach.read; path "/srv/shared" is not covered by personality fs_reach.write`,
				Problems: []capability.ValidationError{
					{Tool: "wide", Capability: "network", Message: `host "api.stripe.com" is not in personality network allow list`},
					{Tool: "wide", Capability: "network", Message: `host "gist.github.com" is on personality network deny list`},
					{Tool: "wide", Capability: "fs_reach.read", Message: `path "/etc" is not covered by personality fs_reach.read`},
					{Tool: "wide", Capability: "fs_reach.write", Message: `path "/srv/shared" is not covered by personality fs_reach.write`},
				}}},
		{name: "hosted MCP tool beyond the secrets ceiling", p: researcher,
			tool: &tool.Tool{Name: "mcp__github__search", Capabilities: tool.Capabilities{Secrets: []string{"vault/*"}}},
			want: Explanation{Tool: "mcp__github__search", Gate: protocol.DecisionCapability,
				Message: `secret "vault/*" is not covered by personality secrets.allow`,
				Problems: []capability.ValidationError{
					{Tool: "mcp__github__search", Capability: "secrets", Message: `secret "vault/*" is not covered by personality secrets.allow`},
				}}},
		{name: "resolution fails", p: researcher,
			tool: &tool.Tool{Name: "memo", Capabilities: tool.Capabilities{Storage: &tool.Storage{Scope: "global", Kind: "kv"}}},
			want: Explanation{Tool: "memo", Gate: protocol.DecisionCapability,
				Message: `resolve capabilities of tool memo: storage scope "global" must be tool-private, session or personality`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Tool(tc.tool, tc.want.Tool, tc.p)
			require.Equal(t, tc.want, got)
			if got.Allowed {
				requireWorkerGrant(t, tc.tool, tc.p, got.Grant)
			}
		})
	}
}

// requireWorkerGrant checks a grant view against what the worker resolves
// for a call of t by p (capability.Resolve, as worker/pipeline.go calls it),
// field by field, and against the resolved grant's own checks.
func requireWorkerGrant(t *testing.T, tl *tool.Tool, p *capability.Personality, v *GrantView) {
	t.Helper()
	g, err := capability.Resolve(tl, p, capability.CallView{Tool: tl.Name, SessionID: Session, PersonalityID: p.ID})
	require.NoError(t, err)
	require.Equal(t, g.Network == nil, v.Network == nil)
	if g.Network != nil {
		require.ElementsMatch(t, g.Network.Hosts(), v.Network.Hosts)
		require.ElementsMatch(t, g.Network.Denied(), v.Network.Deny)
		require.Equal(t, g.Network.AllowPrivateURLs, v.Network.AllowPrivateURLs)
		for _, h := range v.Network.Hosts {
			if h != "*" && h[0] != '*' {
				require.NoError(t, g.Network.Check("https", h, 0), "listed host %s passes the worker's check", h)
			}
		}
		require.Error(t, g.Network.Check("https", "unlisted.example", 0))
	}
	require.Equal(t, g.FS == nil, v.FSReach == nil)
	if g.FS != nil {
		require.ElementsMatch(t, g.FS.Read, v.FSReach.Read)
		require.ElementsMatch(t, g.FS.Write, v.FSReach.Write)
		require.Equal(t, g.FS.WorkingDir, v.FSReach.WorkingDir)
	}
	require.Equal(t, g.Secrets == nil, v.Secrets == nil)
	if g.Secrets != nil {
		require.ElementsMatch(t, g.Secrets.Refs(), v.Secrets.Refs)
		require.ElementsMatch(t, g.Secrets.RawRefs(), v.Secrets.Raw)
		for _, raw := range v.Secrets.Raw {
			if capability.ValidRef(raw) {
				require.NoError(t, g.Secrets.CheckRaw(raw), "listed raw ref %s passes the worker's check", raw)
			}
		}
	}
	require.Equal(t, g.Process == nil, v.Process == nil)
	if g.Process != nil {
		require.ElementsMatch(t, g.Process.Binaries(), v.Process.Binaries)
		for _, b := range v.Process.Binaries {
			require.NoError(t, g.Process.Check(b))
		}
		l := g.Process.Limits.WithDefaults()
		require.Equal(t, ProcessLimitsView{Memory: l.MemoryText, MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPU: l.CPU, Tmp: l.TmpText, TmpBytes: l.TmpBytes}, v.Process.Limits)
	}
	requireWorkerApproval(t, tl.Name, p, v.Approval)
	s := p.Scheduling.WithDefaults()
	require.Equal(t, SchedulingView{Priority: s.Priority, Weight: s.Weight, MaxConcurrency: s.MaxConcurrency}, v.Scheduling)
	require.Equal(t, g.Storage == nil, v.Storage == nil)
	if g.Storage != nil {
		require.Equal(t, g.Storage.ScopeID, v.Storage.ScopeID)
		require.Equal(t, string(g.Storage.Scope), v.Storage.Scope)
		require.Equal(t, int64(g.Storage.TTLDefault.Seconds()), v.Storage.TTLSecondsDefault)
	}
}

func TestExplainToolsKeepsOrder(t *testing.T) {
	t.Parallel()
	p := parsePersonality(t, "id: p\ntoolset: [b]\n")
	out := Tools([]*tool.Tool{{Name: "a"}, {Name: "b"}}, p)
	require.Len(t, out, 2)
	require.Equal(t, "a", out[0].Tool)
	require.Equal(t, protocol.DecisionToolset, out[0].Gate)
	require.Equal(t, "b", out[1].Tool)
	require.True(t, out[1].Allowed)
	require.Empty(t, out[1].Gate)
}

// TestBuiltinGrants explains every built-in tool for a personality that
// reaches something of every kind and checks each allowed tool's grant
// against the worker's own resolution.
func TestBuiltinGrants(t *testing.T) {
	t.Parallel()
	p := parsePersonality(t, `id: default
toolset: [echo, read_file, fetch_url, http_request, run_process, kv_get]
fs_reach:
  workdir: /srv/work
  read: ["${WORKDIR}"]
  write: ["${WORKDIR}/out"]
safety:
  network:
    allow: ["*.github.com"]
secrets:
  allow: ["http/github/*"]
  send_to: {"http/github/*": [api.github.com]}
process:
  allow: [git]
  limits: {memory: 256MiB, pids: 32}
rate_limits:
  fetch_url: {requests: 10, window: 1m}
approval:
  require: [{tool: http_request, when: {method: [POST, PUT]}}, {tool: run_process}]
  self: true
`)
	allowed := 0
	for _, bt := range builtin.All() {
		e := Tool(&bt, bt.Name, p)
		if e.Allowed {
			allowed++
			requireWorkerGrant(t, &bt, p, e.Grant)
		}
	}
	require.Positive(t, allowed)
}

// A hosted url server's tool shows, as a grant, the refs of its
// secret_headers (the definition's capabilities.secrets), the server's
// host among its network hosts, and the personality's send_to bindings of
// those refs: what decides whether a call may send them (mcp.md, "Which
// personality may call them").
func TestExplainHostedURLServerSecrets(t *testing.T) {
	t.Parallel()
	def, probs := mcphost.Parse([]byte(`name: github
url: https://api.githubcopilot.com/mcp/
secret_headers: {Authorization: "Bearer {{providers/github/token}}"}
capabilities: {network: ['api.githubcopilot.com'], secrets: ['providers/github/token']}
`), time.Minute)
	require.Empty(t, probs)
	p := parsePersonality(t, `id: coder
mcp_servers: [github]
safety:
  network:
    allow: [api.githubcopilot.com]
secrets:
  allow: ["providers/github/*"]
  send_to:
    "providers/github/*": [api.githubcopilot.com]
    "http/*": [example.com]
`)
	got := Tool(&tool.Tool{Name: "mcp__github__search_code", Toolset: "mcp", Capabilities: def.Capabilities()}, "mcp__github__search_code", p)
	require.True(t, got.Allowed, "%+v", got)
	require.Equal(t, []string{"api.githubcopilot.com"}, got.Grant.Network.Hosts)
	require.Equal(t, &SecretsView{Refs: []string{"providers/github/token"}, Raw: []string{},
		SendTo: map[string][]string{"providers/github/token": {"api.githubcopilot.com"}}}, got.Grant.Secrets)
}

// requireWorkerApproval checks an approval view against what the worker's
// gate asks (capability.Approval.Needs): no call waits under a nil view;
// every call waits under "always"; under "when", a call with no arguments
// does not wait and a call carrying the first values of one of the
// conditions does.
func requireWorkerApproval(t *testing.T, tl string, p *capability.Personality, v *ApprovalView) {
	t.Helper()
	needed, _ := p.Approval.Needs(tl, json.RawMessage(`{}`))
	if v == nil {
		require.False(t, needed, "no approval shown for %s, so none needed", tl)
		if p.Approval != nil {
			for _, r := range p.Approval.Require {
				require.False(t, r.Matches(tl))
			}
		}
		return
	}
	require.Equal(t, capability.FormatTimeout(p.Approval.TimeoutOrDefault()), v.Timeout)
	require.Equal(t, p.Approval.Self, v.Self)
	require.ElementsMatch(t, p.Approval.Approvers, v.Approvers)
	switch v.Required {
	case ApprovalAlways:
		require.Empty(t, v.When)
		require.True(t, needed, "%s always needs approval", tl)
	case ApprovalWhen:
		require.NotEmpty(t, v.When)
		require.False(t, needed, "%s without arguments needs no approval", tl)
		for _, w := range v.When {
			args := map[string]any{}
			for name, values := range w {
				args[name] = values[0]
			}
			b, err := json.Marshal(args)
			require.NoError(t, err)
			needed, _ := p.Approval.Needs(tl, b)
			require.True(t, needed, "%s with %s needs approval", tl, b)
		}
	default:
		t.Fatalf("approval.required %q", v.Required)
	}
}
