package mcphost

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/explain"
	"github.com/capstanhq/capstan/tool"
)

func TestParseSpecExample(t *testing.T) {
	t.Parallel()
	// The definition of docs/mcp.md, less the url (command and url are exclusive).
	d, probs := Parse([]byte(`
name: fs
command: [npx, -y, "@modelcontextprotocol/server-filesystem", /srv/data]
env: {LOG_LEVEL: info}
secret_env: {GITHUB_TOKEN: providers/github/token}
capabilities:
  network: ['api.github.com']
  fs_reach: {read: [/srv/data], write: []}
  process: [node]
  secrets: ['providers/github/*']
untrusted: true
progress_audience: user
timeout: 60s
`), time.Minute)
	require.Empty(t, probs)
	require.Equal(t, &Definition{
		Name: "fs", Command: []string{"npx", "-y", "@modelcontextprotocol/server-filesystem", "/srv/data"},
		Env: map[string]string{"LOG_LEVEL": "info"}, SecretEnv: map[string]string{"GITHUB_TOKEN": "providers/github/token"},
		Network: []string{"api.github.com"}, Read: []string{"/srv/data"}, Write: []string{}, Process: []string{"node"},
		Secrets: []string{"providers/github/*"}, Untrusted: true, ProgressAudience: tool.AudienceUser, Timeout: time.Minute,
	}, d)
	require.True(t, d.Stdio())
	require.Equal(t, tool.Capabilities{
		Network: &tool.Network{AllowedHosts: []string{"api.github.com"}},
		Secrets: []string{"providers/github/*"},
		// secret_env values reach the server raw: declared as such.
		SecretsRaw: []string{"providers/github/token"},
		FSReach:    &tool.FSReach{Read: tool.Paths("/srv/data")},
		Process:    &tool.Process{AllowedBinaries: []string{"npx", "node"}},
	}, d.Capabilities())
	require.NoError(t, d.Capabilities().Validate())
	require.Equal(t, []string{"providers/github/token"}, d.secretRefs())
}

func TestParseDefaultsAndURL(t *testing.T) {
	t.Parallel()
	d, probs := Parse([]byte(`
name: remote-1
url: https://mcp.example.com/mcp
secret_headers: {Authorization: "Bearer {{providers/x/token}}", X-Team: "{{teams/a}}-{{teams/b}}"}
capabilities: {network: ['*.example.com'], secrets: ['providers/x/token', 'teams/*']}
`), 90*time.Second)
	require.Empty(t, probs)
	require.False(t, d.Stdio())
	require.True(t, d.Untrusted, "untrusted by default")
	require.Equal(t, tool.AudienceUser, d.ProgressAudience)
	require.Equal(t, 90*time.Second, d.Timeout, "the call timeout by default")
	require.Nil(t, d.Capabilities().Process, "a url server starts no process")
	require.Empty(t, d.Capabilities().SecretsRaw, "a url server is sent its secrets in headers, never given them raw")
	require.Equal(t, []string{"providers/x/token", "teams/a", "teams/b"}, d.secretRefs())

	d, probs = Parse([]byte(`{"name": "e", "command": ["/opt/e/bin/server"], "untrusted": false, "progress_audience": "dashboard", "timeout": "5s"}`), time.Minute)
	require.Empty(t, probs)
	require.False(t, d.Untrusted)
	require.Equal(t, tool.AudienceDashboard, d.ProgressAudience)
	require.Equal(t, 5*time.Second, d.Timeout)
	require.Equal(t, tool.Capabilities{Process: &tool.Process{AllowedBinaries: []string{"/opt/e/bin/server"}}}, d.Capabilities(),
		"a stdio server declares at least its own binary")
}

func TestParseProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"not yaml", "name: [", []string{"not valid YAML or JSON"}},
		{"not a mapping", "- a", []string{"a definition must be a mapping of keys"}},
		{"empty", "{}", []string{"name: is required", "one of command (a stdio server) or url (a streamable HTTP server) is required"}},
		{"unknown keys", "name: a\ncommand: [x]\nargs: [y]\ncapabilities: {net: []}\n",
			[]string{`unknown key "args"`, `unknown key "capabilities.net"`}},
		{"bad name", "name: a_b\ncommand: [x]", []string{`name: "a_b" must match ^[A-Za-z0-9-]+$`}},
		{"long name", "name: " + strings.Repeat("a", 65) + "\ncommand: [x]", []string{"is longer than 64 characters"}},
		{"both transports", "name: a\ncommand: [x]\nurl: https://a.example/mcp\ncapabilities: {network: [a.example]}",
			[]string{"command and url are exclusive"}},
		{"empty command", "name: a\ncommand: []", []string{"command: must name the server's binary and its arguments"}},
		{"relative binary", "name: a\ncommand: [bin/server]", []string{`command[0]: "bin/server" must be a bare name`}},
		{"command of numbers", "name: a\ncommand: [1]", []string{"command[0]: must be a string"}},
		{"bad url", "name: a\nurl: ftp://a.example/x", []string{`url: "ftp://a.example/x": scheme "ftp" is not allowed (only http and https)`}},
		{"user info", "name: a\nurl: https://u:p@a.example/x\ncapabilities: {network: [a.example]}", []string{"URLs with user info are not allowed"}},
		{"url host not declared", "name: a\nurl: https://a.example:8443/mcp\ncapabilities: {network: [a.example]}",
			[]string{`url: the host of "https://a.example:8443/mcp" is not covered by capabilities.network`}},
		{"url server with reach", "name: a\nurl: https://a.example/mcp\ncapabilities: {network: [a.example], fs_reach: {read: [/x]}, process: [git]}",
			[]string{"capabilities.fs_reach: a url server runs elsewhere", "capabilities.process: a url server runs elsewhere"}},
		{"url server with env", "name: a\nurl: https://a.example/mcp\nenv: {A: b}\nsecret_env: {B: c}\ncapabilities: {network: [a.example], secrets: [c]}",
			[]string{"env: only a stdio server", "secret_env: only a stdio server"}},
		{"stdio server with headers", "name: a\ncommand: [x]\nsecret_headers: {Authorization: x}", []string{"secret_headers: only a url server"}},
		{"bad host pattern", "name: a\ncommand: [x]\ncapabilities: {network: ['bad host']}", []string{`capabilities.network[0]: invalid host pattern "bad host"`}},
		{"relative path", "name: a\ncommand: [x]\ncapabilities: {fs_reach: {read: [rel], write: [/ok, ../up]}}",
			[]string{`capabilities.fs_reach.read[0]: path "rel" must be absolute`, `capabilities.fs_reach.write[1]: path "../up" must be absolute`}},
		{"from-personality", "name: a\ncommand: [x]\ncapabilities: {fs_reach: {read: from-personality}}",
			[]string{"capabilities.fs_reach.read: must be a list of absolute paths: a hosted server is shared by every personality"}},
		{"bad secret pattern", "name: a\ncommand: [x]\ncapabilities: {secrets: ['a/../b']}", []string{`capabilities.secrets[0]: invalid secret pattern "a/../b"`}},
		{"undeclared secret", "name: a\ncommand: [x]\nsecret_env: {TOKEN: providers/x/token}\ncapabilities: {secrets: [providers/y/*]}",
			[]string{`secret_env.TOKEN: secret ref "providers/x/token" is not covered by capabilities.secrets`}},
		{"invalid secret ref", "name: a\ncommand: [x]\nsecret_env: {TOKEN: 'a//b'}\ncapabilities: {secrets: ['*']}", []string{`invalid secret ref "a//b"`}},
		{"loader variables", "name: a\ncommand: [x]\nenv: {LD_PRELOAD: /x.so}\nsecret_env: {dyld_x: a}\ncapabilities: {secrets: [a]}",
			[]string{"env.LD_PRELOAD: LD_PRELOAD may not be set for a child process", "secret_env.dyld_x: dyld_x may not be set"}},
		{"variable twice", "name: a\ncommand: [x]\nenv: {T: a}\nsecret_env: {T: a}\ncapabilities: {secrets: [a]}", []string{"secret_env.T: is also set in env"}},
		{"env not strings", "name: a\ncommand: [x]\nenv: {A: 1}", []string{"env.A: must be a string"}},
		{"header template", "name: a\nurl: https://a.example/mcp\nsecret_headers: {X-A: 'Bearer {{a', X-B: '{{}}', X-C: '{{ a }}', Host: x, Upgrade: '{{a}}', 'bad name': x}\ncapabilities: {network: [a.example], secrets: [a]}",
			[]string{"secret_headers.Host: is set by the MCP transport", "secret_headers.Upgrade: the transport sets this header itself",
				`secret_headers.X-A: invalid template: "{{" at byte 7 has no closing "}}"`,
				"secret_headers.X-B: invalid template: placeholder 1 is empty", "secret_headers.X-C: invalid template: placeholder 1 has spaces around its ref",
				`secret_headers: invalid header name "bad name"`}},
		{"bad audience and flags", "name: a\ncommand: [x]\nuntrusted: 'no'\nprogress_audience: everyone",
			[]string{"untrusted: must be true or false", `progress_audience: "everyone" must be user, internal or dashboard`}},
		{"timeout too long", "name: a\ncommand: [x]\ntimeout: 2m", []string{"timeout: 2m must be at most CAPSTAN_CALL_TIMEOUT (1m0s)"}},
		{"timeout not a duration", "name: a\ncommand: [x]\ntimeout: 30", []string{"timeout: must be a string"}},
		{"timeout garbage", "name: a\ncommand: [x]\ntimeout: soon", []string{`timeout: "soon" is not a duration`}},
		{"timeout negative", "name: a\ncommand: [x]\ntimeout: -1s", []string{"timeout: must be positive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, probs := Parse([]byte(tt.doc), time.Minute)
			require.Nil(t, d)
			msgs := make([]string, len(probs))
			for i, p := range probs {
				msgs[i] = p.Message
			}
			require.Len(t, msgs, len(tt.want), "problems: %q", msgs)
			for i, want := range tt.want {
				require.Contains(t, msgs[i], want)
			}
		})
	}
}

func TestLoadDirNamesEveryFileAndProblem(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, doc string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o600))
	}
	write("a.yaml", "name: a\ncommand: [x]\n")
	write("b.yml", "name: b\ncommand: [x]\nbogus: 1\ntimeout: 1h\n")
	write("c.yaml", "name: a\ncommand: [other]\n")
	write("notes.txt", "not a definition")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o700))
	_, err := LoadDir(dir, time.Minute)
	require.ErrorIs(t, err, ErrInvalid)
	require.Equal(t, "CAPSTAN_MCP_SERVERS_DIR has invalid MCP server definitions:\n  "+
		filepath.Join(dir, "b.yml")+`: unknown key "bogus"`+"\n  "+
		filepath.Join(dir, "b.yml")+": timeout: 1h must be at most CAPSTAN_CALL_TIMEOUT (1m0s)\n  "+
		filepath.Join(dir, "c.yaml")+`: name: server "a" is also defined in `+filepath.Join(dir, "a.yaml"), err.Error())

	require.NoError(t, os.Remove(filepath.Join(dir, "b.yml")))
	require.NoError(t, os.Remove(filepath.Join(dir, "c.yaml")))
	write("0.yml", "name: z\nurl: https://z.example/mcp\ncapabilities: {network: [z.example]}\n")
	defs, err := LoadDir(dir, time.Minute)
	require.NoError(t, err)
	require.Len(t, defs, 2)
	require.Equal(t, "a", defs[0].Name, "sorted by server name")
	require.Equal(t, filepath.Join(dir, "a.yaml"), defs[0].File)
	require.Equal(t, "z", defs[1].Name)

	_, err = LoadDir(filepath.Join(dir, "missing"), time.Minute)
	require.ErrorContains(t, err, "CAPSTAN_MCP_SERVERS_DIR: open ")
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("name: fs\ncommand: [node, x]\ncapabilities: {fs_reach: {read: [/a]}}\n"))
	f.Add([]byte("name: r\nurl: https://a.example/mcp\nsecret_headers: {A: '{{x}}'}\ncapabilities: {network: [a.example], secrets: [x]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, probs := Parse(data, time.Minute)
		if (d == nil) == (len(probs) == 0) {
			t.Fatalf("Parse returned definition %v and %d problems", d, len(probs))
		}
		if d != nil {
			if err := d.Capabilities().Validate(); err != nil {
				t.Fatalf("a valid definition's capabilities are invalid: %v", err)
			}
		}
	})
}

// The shipped example definitions are valid.
func TestExampleDefinitions(t *testing.T) {
	t.Parallel()
	defs, err := LoadDir(filepath.Join("..", "..", "examples", "mcp-servers"), time.Minute)
	require.NoError(t, err)
	require.Len(t, defs, 2)
	require.Equal(t, "fs", defs[0].Name)
	require.Equal(t, "github", defs[1].Name)
}

// TestSecretEnvIsExplainedAsRaw: a stdio server's secret_env values reach
// its process raw, not through injection at egress, so dispatcher explain
// lists their refs under raw secrets for every hosted tool of the server
// (security.md section 4); a url server's secret_headers refs are not raw.
func TestSecretEnvIsExplainedAsRaw(t *testing.T) {
	t.Parallel()
	p, err := capability.Parse([]byte(`id: dev
toolset: [mcp]
mcp_servers: [gh, remote]
safety: {network: {allow: [api.github.com, mcp.example.com]}}
secrets: {allow: ["providers/*"], send_to: {"providers/x/*": [mcp.example.com]}}
process: {allow: [gh-mcp]}
`), capability.Env{Home: "/home/agent"})
	require.NoError(t, err)
	for _, tc := range []struct {
		name, doc string
		raw       []string
	}{
		{"gh", "name: gh\ncommand: [gh-mcp]\nsecret_env: {GITHUB_TOKEN: providers/github/token}\n" +
			"capabilities: {network: [api.github.com], secrets: ['providers/github/*']}", []string{"providers/github/token"}},
		{"remote", "name: remote\nurl: https://mcp.example.com/mcp\nsecret_headers: {Authorization: 'Bearer {{providers/x/token}}'}\n" +
			"capabilities: {network: [mcp.example.com], secrets: ['providers/x/token']}", []string{}},
	} {
		d, probs := Parse([]byte(tc.doc), time.Minute)
		require.Empty(t, probs, tc.name)
		e := explain.Tool(&tool.Tool{Name: "mcp__" + tc.name + "__search", Toolset: "mcp", Capabilities: d.Capabilities()}, "", p)
		require.True(t, e.Allowed, "%s: %s", tc.name, e.Message)
		require.Equal(t, tc.raw, e.Grant.Secrets.Raw, tc.name)
	}
}
