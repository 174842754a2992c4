package capability

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/tool"
)

func researcher() *Personality {
	return &Personality{
		ID: "researcher",
		FSReach: FSReach{
			Workdir: "/srv/agents/researcher",
			Read:    []string{"/srv/agents/researcher", "/srv/shared"},
			Write:   []string{"/srv/agents/researcher/out"},
		},
		Network: NetworkPolicy{Allow: []string{"*.github.com", "api.openai.com"}, Deny: []string{"gist.github.com"}},
		Secrets: &Ceiling{Allow: []string{"providers/github/*"}},
		Process: &Ceiling{Allow: []string{"git", "ls"}},
	}
}

func withCaps(c tool.Capabilities) func(*tool.Tool) {
	return func(t *tool.Tool) { t.Capabilities = c }
}

func TestResolveEmptyDeclaration(t *testing.T) {
	t.Parallel()
	g, err := Resolve(newTool("echo"), researcher(), CallView{Tool: "echo", SessionID: "s1"})
	require.NoError(t, err)
	require.Equal(t, &Grant{}, g)
	_, err = Resolve(nil, nil, CallView{})
	require.EqualError(t, err, "resolve: nil tool")
}

func TestResolveNetwork(t *testing.T) {
	t.Parallel()
	tl := newTool("fetch_url", withCaps(tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"*"}}}))
	g, err := Resolve(tl, researcher(), CallView{SessionID: "s1"})
	require.NoError(t, err)
	require.NoError(t, g.Network.Check("https", "api.github.com", 0))
	require.EqualError(t, g.Network.Check("https", "gist.github.com", 0), "HOST_NOT_ALLOWED: gist.github.com is on the deny list")
	require.EqualError(t, g.Network.Check("https", "api.stripe.com", 0), "HOST_NOT_ALLOWED: api.stripe.com is not in the declared allowedHosts")
	require.Nil(t, g.FS)

	// No personality: network reaches nothing.
	g, err = Resolve(tl, nil, CallView{SessionID: "s1"})
	require.NoError(t, err)
	require.EqualError(t, g.Network.Check("https", "api.github.com", 0), "HOST_NOT_ALLOWED: api.github.com is not in the declared allowedHosts")

	bad := newTool("bad", withCaps(tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"a.*.com"}}}))
	_, err = Resolve(bad, researcher(), CallView{SessionID: "s1"})
	require.ErrorContains(t, err, `resolve capabilities of tool bad: network.allowed_hosts: invalid host pattern "a.*.com"`)
}

func TestResolveFS(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		decl        *tool.FSReach
		p           *Personality
		wd          string
		read, write []string
		wantWD      string
		err         string
	}{
		{name: "from personality", decl: &tool.FSReach{Read: tool.FromPersonality(), Write: tool.FromPersonality()}, p: researcher(),
			read: []string{"/srv/agents/researcher", "/srv/shared"}, write: []string{"/srv/agents/researcher/out"}, wantWD: "/srv/agents/researcher"},
		{name: "read only", decl: &tool.FSReach{Read: tool.FromPersonality()}, p: researcher(),
			read: []string{"/srv/agents/researcher", "/srv/shared"}, wantWD: "/srv/agents/researcher"},
		{name: "explicit kept inside", decl: &tool.FSReach{Read: tool.Paths("/srv/shared/docs", "/etc", "/srv/shared/../shared/x", "/srv/sharedx")}, p: researcher(),
			read: []string{"/srv/shared/docs", "/srv/shared/x"}, wantWD: "/srv/agents/researcher"},
		{name: "explicit broader than reach dropped", decl: &tool.FSReach{Write: tool.Paths("/srv/agents")}, p: researcher(),
			write: []string{}, wantWD: "/srv/agents/researcher"},
		{name: "call working dir", decl: &tool.FSReach{Read: tool.FromPersonality()}, p: researcher(), wd: "/srv/shared/./x",
			read: []string{"/srv/agents/researcher", "/srv/shared"}, wantWD: "/srv/shared/x"},
		{name: "no personality list", decl: &tool.FSReach{Read: tool.FromPersonality(), Write: tool.Paths("/tmp")}, p: &Personality{ID: "x"},
			read: []string{}, write: []string{}},
		{name: "nil personality", decl: &tool.FSReach{Read: tool.Paths("/tmp")}, read: []string{}},
		{name: "relative working dir", decl: &tool.FSReach{Read: tool.FromPersonality()}, p: researcher(), wd: "rel",
			err: `working_dir "rel" must be an absolute path`},
		{name: "relative declared path", decl: &tool.FSReach{Read: tool.Paths("data")}, p: researcher(),
			err: `fs_reach.read path "data" must be absolute`},
		{name: "unclean personality path", decl: &tool.FSReach{Read: tool.FromPersonality()}, p: &Personality{FSReach: FSReach{Read: []string{"/a/../b"}}},
			err: `personality fs_reach.read path "/a/../b" must be absolute and clean`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := Resolve(newTool("file_tool", withCaps(tool.Capabilities{FSReach: tt.decl})), tt.p, CallView{SessionID: "s", WorkingDir: tt.wd})
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			var writable []string
			if tt.p != nil {
				writable = tt.p.FSReach.Write
			}
			require.Equal(t, &FSGrant{Read: tt.read, Write: tt.write, WorkingDir: tt.wantWD, Writable: writable}, g.FS)
		})
	}
}

func TestResolveFSDoesNotAlias(t *testing.T) {
	t.Parallel()
	p := researcher()
	g, err := Resolve(newTool("f", withCaps(tool.Capabilities{FSReach: &tool.FSReach{Read: tool.FromPersonality()}})), p, CallView{SessionID: "s"})
	require.NoError(t, err)
	g.FS.Read[0] = "/"
	require.Equal(t, "/srv/agents/researcher", p.FSReach.Read[0])
}

func TestResolveSecretsAndProcess(t *testing.T) {
	t.Parallel()
	tl := newTool("http_request", withCaps(tool.Capabilities{
		Secrets: []string{"providers/*"},
		Process: &tool.Process{AllowedBinaries: []string{"*"}},
	}))
	g, err := Resolve(tl, researcher(), CallView{SessionID: "s"})
	require.NoError(t, err)
	require.NoError(t, g.Secrets.Check("providers/github/token"))
	require.ErrorIs(t, g.Secrets.Check("providers/stripe/token"), tool.ErrSecretNotDeclared)
	require.NoError(t, g.Process.Check("git"))
	require.EqualError(t, g.Process.Check("rm"), "BINARY_NOT_ALLOWED: rm is not in the declared allowedBinaries")

	// No ceiling: the declaration stands.
	g, err = Resolve(tl, &Personality{ID: "open"}, CallView{SessionID: "s"})
	require.NoError(t, err)
	require.NoError(t, g.Secrets.Check("providers/stripe/token"))
	require.ErrorIs(t, g.Secrets.Check("vault/root"), tool.ErrSecretNotDeclared)
	require.NoError(t, g.Process.Check("rm"))
	require.Nil(t, g.Network)
	require.Nil(t, g.Storage)
}

func TestResolveStorage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		scope tool.StorageScope
		ttl   int64
		call  CallView
		id    string
		err   string
	}{
		{name: "tool-private", scope: tool.ScopeToolPrivate, call: CallView{SessionID: "s1", PersonalityID: "p"}, id: "tool:kv_tool"},
		{name: "session", scope: tool.ScopeSession, call: CallView{SessionID: "s1", PersonalityID: "p"}, id: "session:s1"},
		{name: "personality", scope: tool.ScopePersonality, ttl: 60, call: CallView{SessionID: "s1", PersonalityID: "p"}, id: "personality:p"},
		{name: "personality without personality", scope: tool.ScopePersonality, call: CallView{SessionID: "s1"}, id: "session:s1"},
		{name: "session without session id", scope: tool.ScopeSession, err: "storage scope session needs the call's session id"},
		{name: "unknown scope", scope: "global", call: CallView{SessionID: "s1"}, err: `storage scope "global" must be tool-private, session or personality`},
		{name: "negative ttl", scope: tool.ScopeSession, ttl: -1, call: CallView{SessionID: "s1"}, err: "storage ttl_seconds_default must be 0 to"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tl := newTool("kv_tool", withCaps(tool.Capabilities{Storage: &tool.Storage{Scope: tt.scope, Kind: "kv", TTLSecondsDefault: tt.ttl}}))
			g, err := Resolve(tl, nil, tt.call)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, &StorageGrant{Scope: tt.scope, ScopeID: tt.id, TTLDefault: time.Duration(tt.ttl) * time.Second}, g.Storage)
		})
	}
}

func TestScopeID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "tool:kv", ScopeID(tool.ScopeToolPrivate, "kv", "s", "p"))
	require.Equal(t, "session:s", ScopeID(tool.ScopeSession, "kv", "s", "p"))
	require.Equal(t, "personality:p", ScopeID(tool.ScopePersonality, "kv", "s", "p"))
	require.Equal(t, "session:s", ScopeID(tool.ScopePersonality, "kv", "s", ""))
	require.Empty(t, ScopeID("other", "kv", "s", "p"))
}

func TestParseResolveValidateEndToEnd(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(fullDoc), Env{Home: "/home/w"})
	require.NoError(t, err)
	fetch := newTool("fetch_url", withCaps(tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"*"}}}))
	read := newTool("read_file", withCaps(tool.Capabilities{FSReach: &tool.FSReach{Read: tool.FromPersonality()}}))
	require.Empty(t, Validate([]*tool.Tool{fetch, read}, p))
	require.Nil(t, ToolsetGate(fetch, p, nil))

	g, err := Resolve(fetch, p, CallView{Tool: "fetch_url", SessionID: "s", PersonalityID: p.ID})
	require.NoError(t, err)
	scheme, host, port, err := CheckURL("https://API.GitHub.com/repos")
	require.NoError(t, err)
	require.NoError(t, g.Network.Check(scheme, host, port))
	scheme, host, port, err = CheckURL("https://gist.github.com:8443/x")
	require.NoError(t, err)
	require.EqualError(t, g.Network.Check(scheme, host, port), "HOST_NOT_ALLOWED: gist.github.com:8443 is on the deny list")

	g, err = Resolve(read, p, CallView{Tool: "read_file", SessionID: "s", PersonalityID: p.ID})
	require.NoError(t, err)
	abs, err := g.FS.Check(Read, "notes/a.md")
	require.NoError(t, err)
	require.Equal(t, "/home/w/agents/researcher/notes/a.md", abs)
	_, err = g.FS.Check(Write, "x")
	require.EqualError(t, err, "PATH_NOT_REACHABLE: write not permitted for /home/w/agents/researcher/x")
}
