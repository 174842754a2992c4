package capability

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/tool"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	p := researcher()
	p.Toolset = []string{"fetcher", "writer", "files", "good", "lister"}
	p.MCPServers = []string{"github"}
	tools := []*tool.Tool{
		newTool("fetcher", withCaps(tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{
			"*", "api.github.com", "api.stripe.com", "gist.github.com", "api.openai.com:8443", "bad host", "*.github.com",
		}}})),
		nil,
		newTool("writer", withCaps(tool.Capabilities{FSReach: &tool.FSReach{
			Read:  tool.Paths("/srv/shared/a", "/etc/passwd", "rel"),
			Write: tool.Paths("/srv/agents/researcher/out/x", "/srv/agents/researcher/notes"),
		}})),
		newTool("files", withCaps(tool.Capabilities{FSReach: &tool.FSReach{Read: tool.FromPersonality(), Write: tool.FromPersonality()}})),
		newTool("outside", withCaps(tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"evil.com"}}})),
		newTool("always", func(t *tool.Tool) {
			t.AlwaysInclude = true
			t.Capabilities.Network = &tool.Network{AllowedHosts: []string{"always.example"}}
		}),
		newTool("mcp__github__x", withCaps(tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"mcp.example"}}})),
		newTool("mcp__gitlab__x", withCaps(tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"gitlab.example"}}})),
	}
	got := Validate(tools, p)
	require.Equal(t, []ValidationError{
		{Tool: "fetcher", Capability: "network", Message: `host "api.stripe.com" is not in personality network allow list`},
		{Tool: "fetcher", Capability: "network", Message: `host "gist.github.com" is on personality network deny list`},
		{Tool: "fetcher", Capability: "network", Message: `host "api.openai.com:8443" is not in personality network allow list`},
		{Tool: "fetcher", Capability: "network", Message: `invalid host pattern "bad host": invalid host name "bad host": idna: disallowed rune U+0020`},
		{Tool: "writer", Capability: "fs_reach.read", Message: `path "/etc/passwd" is not covered by personality fs_reach.read`},
		{Tool: "writer", Capability: "fs_reach.read", Message: `path "rel" must be absolute`},
		{Tool: "writer", Capability: "fs_reach.write", Message: `path "/srv/agents/researcher/notes" is not covered by personality fs_reach.write`},
		{Tool: "always", Capability: "network", Message: `host "always.example" is not in personality network allow list`},
		{Tool: "mcp__github__x", Capability: "network", Message: `host "mcp.example" is not in personality network allow list`},
	}, got)
	require.Equal(t, `tool fetcher: host "api.stripe.com" is not in personality network allow list`, got[0].Error())
}

func TestValidateCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		caps tool.Capabilities
		p    *Personality
		want []ValidationError
	}{
		{name: "nothing declared", p: researcher()},
		{name: "star only", caps: tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"*"}}}, p: &Personality{}},
		{name: "suffix covered by suffix", caps: tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"*.api.github.com"}}}, p: researcher()},
		{name: "suffix not covered by parent name", caps: tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"*.openai.com"}}}, p: researcher(),
			want: []ValidationError{{Tool: "t", Capability: "network", Message: `host "*.openai.com" is not in personality network allow list`}}},
		{name: "allowed and denied", caps: tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"x.example:*"}}},
			p:    &Personality{Network: NetworkPolicy{Allow: []string{"*:*"}, Deny: []string{"x.example"}}},
			want: []ValidationError{{Tool: "t", Capability: "network", Message: `host "x.example:*" is on personality network deny list`}}},
		{name: "deny with port covers only that port", caps: tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"x.example"}}},
			p: &Personality{Network: NetworkPolicy{Allow: []string{"*"}, Deny: []string{"x.example:8080"}}}},
		{name: "not allowed and denied", caps: tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"x.example"}}},
			p: &Personality{Network: NetworkPolicy{Deny: []string{"*.example"}}},
			want: []ValidationError{
				{Tool: "t", Capability: "network", Message: `host "x.example" is not in personality network allow list`},
				{Tool: "t", Capability: "network", Message: `host "x.example" is on personality network deny list`},
			}},
		{name: "IP covered by CIDR", caps: tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"10.1.2.3:8080"}}},
			p: &Personality{Network: NetworkPolicy{Allow: []string{"10.0.0.0/8:*"}}}},
		{name: "nil personality", caps: tool.Capabilities{
			Network: &tool.Network{AllowedHosts: []string{"a.example"}},
			FSReach: &tool.FSReach{Write: tool.Paths("/tmp")},
		}, want: []ValidationError{
			{Tool: "t", Capability: "network", Message: `host "a.example" is not in personality network allow list`},
			{Tool: "t", Capability: "fs_reach.write", Message: `path "/tmp" is not covered by personality fs_reach.write`},
		}},
		{name: "path covered after cleaning", caps: tool.Capabilities{FSReach: &tool.FSReach{Read: tool.Paths("/srv/shared/x/../y")}}, p: researcher()},
		{name: "sibling path not covered", caps: tool.Capabilities{FSReach: &tool.FSReach{Read: tool.Paths("/srv/shared2")}}, p: researcher(),
			want: []ValidationError{{Tool: "t", Capability: "fs_reach.read", Message: `path "/srv/shared2" is not covered by personality fs_reach.read`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tl := newTool("t", withCaps(tt.caps))
			require.Equal(t, tt.want, Validate([]*tool.Tool{tl}, tt.p))
			require.Equal(t, tt.want, ValidateTool(tl, tt.p))
		})
	}
}

// A tool hosted from an MCP server runs with its server's whole declaration
// whoever calls it: the personality's secrets and process ceilings must
// cover it, where a built-in tool's grant would merely be narrowed.
func TestValidateToolHostedMCPCeilings(t *testing.T) {
	t.Parallel()
	caps := tool.Capabilities{
		Secrets: []string{"providers/github/token", "providers/gitlab/*"},
		Process: &tool.Process{AllowedBinaries: []string{"npx", "node"}},
	}
	tests := []struct {
		name    string
		secrets *Ceiling
		process *Ceiling
		want    []ValidationError
	}{
		{name: "no ceilings: the declaration stands"},
		{name: "covering ceilings", secrets: &Ceiling{Allow: []string{"providers/*"}}, process: &Ceiling{Allow: []string{"node", "npx", "git"}}},
		{name: "star ceilings", secrets: &Ceiling{Allow: []string{"*"}}, process: &Ceiling{Allow: []string{"*"}}},
		{name: "exact ref and prefix", secrets: &Ceiling{Allow: []string{"providers/github/token", "providers/gitlab/*"}}},
		{name: "narrower prefix does not cover a wider one", secrets: &Ceiling{Allow: []string{"providers/github/*", "providers/gitlab/ci/*"}},
			want: []ValidationError{{Tool: "mcp__gh__search", Capability: "secrets", Message: `secret "providers/gitlab/*" is not covered by personality secrets.allow`}}},
		{name: "empty ceilings refuse everything", secrets: &Ceiling{Allow: []string{}}, process: &Ceiling{Allow: []string{}},
			want: []ValidationError{
				{Tool: "mcp__gh__search", Capability: "secrets", Message: `secret "providers/github/token" is not covered by personality secrets.allow`},
				{Tool: "mcp__gh__search", Capability: "secrets", Message: `secret "providers/gitlab/*" is not covered by personality secrets.allow`},
				{Tool: "mcp__gh__search", Capability: "process", Message: `binary "npx" is not covered by personality process.allow`},
				{Tool: "mcp__gh__search", Capability: "process", Message: `binary "node" is not covered by personality process.allow`},
			}},
		{name: "one binary missing", process: &Ceiling{Allow: []string{"node"}},
			want: []ValidationError{{Tool: "mcp__gh__search", Capability: "process", Message: `binary "npx" is not covered by personality process.allow`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &Personality{Secrets: tt.secrets, Process: tt.process}
			require.Equal(t, tt.want, ValidateTool(newTool("mcp__gh__search", withCaps(caps)), p))
			// A built-in tool's grant is narrowed by the ceilings instead.
			require.Empty(t, ValidateTool(newTool("search", withCaps(caps)), p))
		})
	}
}

func TestRefPatternCovers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		ceiling, declared string
		want              bool
	}{
		{"*", "*", true}, {"*", "a/b", true}, {"a/*", "*", false}, {"a/b", "*", false},
		{"a/*", "a/b", true}, {"a/*", "a", false}, {"a/*", "a/*", true}, {"a/*", "a/b/*", true},
		{"a/b/*", "a/*", false}, {"a/b", "a/b", true}, {"a/b", "a/b/*", false}, {"ab/*", "a/*", false},
		{"a/*", "ab/*", false}, {"a/*", "a/../x", false},
	} {
		require.Equal(t, tt.want, refPatternCovers(tt.ceiling, tt.declared), "ceiling %q, declared %q", tt.ceiling, tt.declared)
	}
}
