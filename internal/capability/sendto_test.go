package capability

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/tool"
)

func endpoint(t *testing.T, scheme, host string, port int) Endpoint {
	t.Helper()
	e, err := ParseEndpoint(scheme, host, port)
	require.NoError(t, err)
	return e
}

func TestSecretDestinationsAllows(t *testing.T) {
	t.Parallel()
	d, err := NewSecretDestinations(map[string][]string{
		"providers/github/*": {"api.github.com", "*.githubusercontent.com"},
		"http/openai":        {"api.openai.com"},
		"http/*":             {"internal.example.com:8443"},
		"local/*":            {"127.0.0.1:*", "[::1]:8080"},
		"nowhere/*":          {},
	})
	require.NoError(t, err)
	tests := []struct {
		name   string
		ref    string
		scheme string
		host   string
		port   int
		want   bool
	}{
		{name: "bound host", ref: "providers/github/token", scheme: "https", host: "api.github.com", want: true},
		{name: "bound host, case and trailing dot", ref: "providers/github/token", scheme: "https", host: "API.GitHub.com.", want: true},
		{name: "bound host over http on its default port", ref: "providers/github/token", scheme: "http", host: "api.github.com", want: true},
		{name: "bound host, other port", ref: "providers/github/token", scheme: "https", host: "api.github.com", port: 8443},
		{name: "suffix pattern", ref: "providers/github/app/key", scheme: "https", host: "raw.githubusercontent.com", want: true},
		{name: "suffix pattern never the parent", ref: "providers/github/token", scheme: "https", host: "githubusercontent.com"},
		{name: "another host", ref: "providers/github/token", scheme: "https", host: "api.openai.com"},
		{name: "look-alike host", ref: "providers/github/token", scheme: "https", host: "api.github.com.evil.example"},
		{name: "prefix pattern never the prefix itself", ref: "providers/github", scheme: "https", host: "api.github.com"},
		{name: "exact ref", ref: "http/openai", scheme: "https", host: "api.openai.com", want: true},
		{name: "patterns add up", ref: "http/openai", scheme: "https", host: "internal.example.com", port: 8443, want: true},
		{name: "prefix entry for another ref", ref: "http/other", scheme: "https", host: "api.openai.com"},
		{name: "explicit port", ref: "http/other", scheme: "https", host: "internal.example.com", port: 8443, want: true},
		{name: "explicit port only", ref: "http/other", scheme: "https", host: "internal.example.com"},
		{name: "IP any port", ref: "local/a", scheme: "http", host: "127.0.0.1", port: 9999, want: true},
		{name: "IP pattern never a name", ref: "local/a", scheme: "http", host: "localhost", port: 9999},
		{name: "IPv6 port", ref: "local/a", scheme: "http", host: "::1", port: 8080, want: true},
		{name: "empty host list", ref: "nowhere/x", scheme: "https", host: "api.github.com"},
		{name: "ref without entry fails closed", ref: "vault/root", scheme: "https", host: "api.github.com"},
		{name: "invalid ref", ref: "providers/github/../../vault/root", scheme: "https", host: "api.github.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, d.Allows(tt.ref, endpoint(t, tt.scheme, tt.host, tt.port)))
		})
	}
	require.False(t, d.Empty())
	require.Equal(t, []string{"127.0.0.1:*", "[::1]:8080"}, d.Bindings()["local/*"])
}

func TestSecretDestinationsZeroSendsNothing(t *testing.T) {
	t.Parallel()
	for _, m := range []map[string][]string{nil, {}, {"a/*": {}}} {
		d, err := NewSecretDestinations(m)
		require.NoError(t, err)
		require.True(t, d.Empty())
		require.False(t, d.Allows("a/b", endpoint(t, "https", "example.com", 0)))
	}
	require.False(t, SecretDestinations{}.Allows("a/b", endpoint(t, "https", "example.com", 0)))
	require.Nil(t, SecretDestinations{}.Bindings())
}

func TestNewSecretDestinationsErrors(t *testing.T) {
	t.Parallel()
	_, err := NewSecretDestinations(map[string][]string{
		"a/*/b": {"example.com"},
		"c":     {"a.*.com", "ok.com"},
	})
	require.EqualError(t, err, `secrets.send_to: invalid secret pattern "a/*/b": want a ref like a/b, a prefix like a/* or *`+"\n"+
		`secrets.send_to "c": invalid host pattern "a.*.com": "*" is allowed only as the whole host or a leading "*." label`)
}

func TestRefGrantCheckDestination(t *testing.T) {
	t.Parallel()
	d, err := NewSecretDestinations(map[string][]string{"providers/*": {"api.github.com"}})
	require.NoError(t, err)
	github := endpoint(t, "https", "api.github.com", 0)
	tests := []struct {
		name  string
		grant *RefGrant
		ref   string
		e     Endpoint
		want  string // "" = allowed
	}{
		{name: "declared and bound", grant: &RefGrant{Declared: []string{"providers/github/*"}, Destinations: d}, ref: "providers/github/token", e: github},
		{name: "declared, bound elsewhere", grant: &RefGrant{Declared: []string{"providers/github/*"}, Destinations: d}, ref: "providers/github/token",
			e: endpoint(t, "https", "evil.example", 0), want: "SECRET_DESTINATION: this secret may not be sent to evil.example"},
		{name: "host shown with its port", grant: &RefGrant{Declared: []string{"providers/github/*"}, Destinations: d}, ref: "providers/github/token",
			e: endpoint(t, "http", "127.0.0.1", 8080), want: "SECRET_DESTINATION: this secret may not be sent to 127.0.0.1:8080"},
		{name: "IPv6 in brackets", grant: &RefGrant{Declared: []string{"providers/github/*"}, Destinations: d}, ref: "providers/github/token",
			e: endpoint(t, "https", "::1", 0), want: "SECRET_DESTINATION: this secret may not be sent to [::1]"},
		{name: "declared, no send_to", grant: &RefGrant{Declared: []string{"providers/github/*"}}, ref: "providers/github/token", e: github,
			want: "SECRET_DESTINATION: this secret may not be sent to api.github.com"},
		{name: "bound but not declared", grant: &RefGrant{Declared: []string{"other/*"}, Destinations: d}, ref: "providers/github/token", e: github,
			want: "SECRET_NOT_DECLARED: requested secret is not permitted for this tool"},
		{name: "bound but over the ceiling", grant: &RefGrant{Declared: []string{"*"}, Ceiling: &Ceiling{Allow: []string{"other/*"}}, Destinations: d},
			ref: "providers/github/token", e: github, want: "SECRET_NOT_DECLARED: requested secret is not permitted for this tool"},
		{name: "nil grant", ref: "providers/github/token", e: github, want: "SECRET_NOT_DECLARED: requested secret is not permitted for this tool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.grant.CheckDestination(tt.ref, tt.e)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.want)
			code, ok := tool.DenialCode(err)
			require.True(t, ok)
			require.Equal(t, tt.want[:len(code)], code)
		})
	}
}

func TestRefGrantCheckRaw(t *testing.T) {
	t.Parallel()
	g := &RefGrant{Declared: []string{"providers/*"}, Raw: []string{"providers/github/*", "vault/*"}}
	require.NoError(t, g.CheckRaw("providers/github/token"))
	require.EqualError(t, g.CheckRaw("providers/gitlab/token"),
		"SECRET_NOT_DECLARED: requested secret may only be sent by the fetch accessor; the tool must declare it under secrets_raw to read its value")
	require.NoError(t, g.Check("providers/gitlab/token"), "injection needs the declaration only")
	require.EqualError(t, g.CheckRaw("vault/root"), "SECRET_NOT_DECLARED: requested secret is not permitted for this tool",
		"secrets_raw never widens the declaration")
	var nilGrant *RefGrant
	require.ErrorIs(t, nilGrant.CheckRaw("providers/github/token"), tool.ErrSecretNotDeclared)
}

func TestResolveSecretsCarriesRawAndSendTo(t *testing.T) {
	t.Parallel()
	p := researcher()
	p.SendTo = map[string][]string{"providers/github/*": {"api.github.com"}}
	tl := newTool("t", withCaps(tool.Capabilities{Secrets: []string{"providers/*"}, SecretsRaw: []string{"providers/github/app/*"}}))
	g, err := Resolve(tl, p, CallView{SessionID: "s"})
	require.NoError(t, err)
	require.Equal(t, []string{"providers/github/app/*"}, g.Secrets.Raw)
	require.NoError(t, g.Secrets.CheckDestination("providers/github/token", endpoint(t, "https", "api.github.com", 0)))
	require.ErrorIs(t, g.Secrets.CheckDestination("providers/github/token", endpoint(t, "https", "gist.github.com", 0)), tool.ErrSecretDestination)
	require.ErrorIs(t, g.Secrets.CheckDestination("providers/gitlab/token", endpoint(t, "https", "api.github.com", 0)), tool.ErrSecretNotDeclared,
		"the ceiling still applies")
	require.NoError(t, g.Secrets.CheckRaw("providers/github/app/key"))
	require.ErrorIs(t, g.Secrets.CheckRaw("providers/github/token"), tool.ErrSecretNotDeclared)

	tl.Capabilities.SecretsRaw[0] = "x"
	require.Equal(t, "providers/github/app/*", g.Secrets.Raw[0], "the grant does not alias the declaration")

	p.SendTo = map[string][]string{"a/*/b": {"x.com"}}
	_, err = Resolve(tl, p, CallView{SessionID: "s"})
	require.ErrorContains(t, err, `secrets.send_to: invalid secret pattern "a/*/b"`)
}
