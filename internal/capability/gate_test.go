package capability

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
)

// newTool returns a tool named name, changed by each opt.
func newTool(name string, opts ...func(*tool.Tool)) *tool.Tool {
	t := &tool.Tool{Name: name}
	for _, o := range opts {
		o(t)
	}
	return t
}

func TestExcludeGate(t *testing.T) {
	t.Parallel()
	require.Nil(t, ExcludeGate("echo", nil))
	require.Nil(t, ExcludeGate("echo", []string{"terminal"}))
	r := ExcludeGate("terminal", []string{"echo", "terminal"})
	require.Equal(t, &Refusal{Decision: protocol.DecisionExcluded, Code: tool.CodeNotAvailable,
		Message: "Tool terminal is not available on this surface"}, r)
	require.EqualError(t, r, "Tool terminal is not available on this surface")
}

func TestToolsetGate(t *testing.T) {
	t.Parallel()
	fileTool := newTool("read_file", func(t *tool.Tool) { t.Toolset = "file" })
	always := newTool("todo", func(t *tool.Tool) { t.AlwaysInclude = true })
	mcp := newTool("mcp__github__create_issue")
	mcpAlways := newTool("mcp__github__list", func(t *tool.Tool) { t.AlwaysInclude = true })
	plugin := newTool("weather", func(t *tool.Tool) { t.Plugin = "wx" })
	mcpPlugin := newTool("mcp__github__x", func(t *tool.Tool) { t.Plugin = "wx" })
	tests := []struct {
		name   string
		tool   *tool.Tool
		p      *Personality
		narrow []string
		ok     bool
	}{
		{name: "toolset absent allows built-in", tool: fileTool, p: &Personality{}, ok: true},
		{name: "nil personality allows built-in", tool: fileTool, ok: true},
		{name: "toolset empty allows none", tool: fileTool, p: &Personality{Toolset: []string{}}},
		{name: "toolset by name", tool: fileTool, p: &Personality{Toolset: []string{"read_file"}}, ok: true},
		{name: "toolset by label", tool: fileTool, p: &Personality{Toolset: []string{"file"}}, ok: true},
		{name: "toolset other", tool: fileTool, p: &Personality{Toolset: []string{"web"}}},
		{name: "narrow lists it", tool: fileTool, p: &Personality{}, narrow: []string{"read_file"}, ok: true},
		{name: "narrow omits it", tool: fileTool, p: &Personality{}, narrow: []string{"echo"}},
		{name: "narrow empty", tool: fileTool, p: &Personality{}, narrow: []string{}},
		{name: "narrow by label does not count", tool: fileTool, p: &Personality{}, narrow: []string{"file"}},
		{name: "always include bypasses toolset", tool: always, p: &Personality{Toolset: []string{}}, ok: true},
		{name: "always include bypasses narrow", tool: always, p: &Personality{}, narrow: []string{}, ok: true},
		{name: "mcp server listed", tool: mcp, p: &Personality{MCPServers: []string{"github"}}, ok: true},
		{name: "mcp server absent", tool: mcp, p: &Personality{}},
		{name: "mcp server other", tool: mcp, p: &Personality{MCPServers: []string{"gitlab"}}},
		{name: "mcp not by toolset", tool: mcp, p: &Personality{Toolset: []string{"mcp__github__create_issue"}}},
		{name: "mcp narrowed out", tool: mcp, p: &Personality{MCPServers: []string{"github"}}, narrow: []string{"echo"}},
		{name: "mcp narrowed in", tool: mcp, p: &Personality{MCPServers: []string{"github"}}, narrow: []string{"mcp__github__create_issue"}, ok: true},
		{name: "always include does not bypass mcp filter", tool: mcpAlways, p: &Personality{}},
		{name: "mcp toolset empty irrelevant", tool: mcp, p: &Personality{Toolset: []string{}, MCPServers: []string{"github"}}, ok: true},
		{name: "plugin listed", tool: plugin, p: &Personality{Plugins: []string{"wx"}}, ok: true},
		{name: "plugin absent", tool: plugin, p: &Personality{}},
		{name: "plugin narrowed out", tool: plugin, p: &Personality{Plugins: []string{"wx"}}, narrow: []string{}},
		{name: "plugin and mcp needs both", tool: mcpPlugin, p: &Personality{Plugins: []string{"wx"}}},
		{name: "plugin and mcp both listed", tool: mcpPlugin, p: &Personality{Plugins: []string{"wx"}, MCPServers: []string{"github"}}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := ToolsetGate(tt.tool, tt.p, tt.narrow)
			if tt.ok {
				require.Nil(t, r)
				return
			}
			require.Equal(t, &Refusal{Decision: protocol.DecisionToolset, Code: tool.CodeNotAvailable,
				Message: "Tool " + tt.tool.Name + " is not permitted for this personality"}, r)
		})
	}
	require.NotNil(t, ToolsetGate(nil, &Personality{}, nil))
}

func TestPermissionGate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		perms   []string
		granted []string
		missing string
	}{
		{name: "no permissions declared", granted: nil},
		{name: "exact grant", perms: []string{"weather:read"}, granted: []string{"weather:read"}},
		{name: "namespace grant", perms: []string{"weather:read", "weather:write"}, granted: []string{"weather:*"}},
		{name: "star grant", perms: []string{"a:b", "c"}, granted: []string{"*"}},
		{name: "nothing granted", perms: []string{"weather:read"}, missing: "weather:read"},
		{name: "first missing named", perms: []string{"a:x", "b:y", "c:z"}, granted: []string{"a:*"}, missing: "b:y"},
		{name: "namespace is not a prefix match", perms: []string{"weatherx:read"}, granted: []string{"weather:*"}, missing: "weatherx:read"},
		{name: "namespace needs a suffix", perms: []string{"weather:"}, granted: []string{"weather:*"}, missing: "weather:"},
		{name: "namespace does not grant bare name", perms: []string{"weather"}, granted: []string{"weather:*"}, missing: "weather"},
		{name: "nested namespace", perms: []string{"a:b:c"}, granted: []string{"a:b:*"}},
		{name: "other namespace", perms: []string{"mail:send"}, granted: []string{"weather:*", "mail:read"}, missing: "mail:send"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tl := newTool("weather", func(t *tool.Tool) { t.Permissions = tt.perms })
			r := PermissionGate(tl, &Personality{Permissions: tt.granted})
			if tt.missing == "" {
				require.Nil(t, r)
				return
			}
			require.Equal(t, &Refusal{Decision: protocol.DecisionPermission, Code: tool.CodeNotAvailable,
				Message: "Tool weather requires permission " + tt.missing}, r)
		})
	}
	require.Equal(t, "Tool weather requires permission x",
		PermissionGate(newTool("weather", func(t *tool.Tool) { t.Permissions = []string{"x"} }), nil).Message)
	require.NotNil(t, PermissionGate(nil, nil))
}
