package capability

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/tool"
)

// sampleRefs are refs the description tests check against the grants'
// own Check methods.
var sampleRefs = []string{
	"http/openai", "http/github/token", "http", "providers/github/token", "providers/github/app/key",
	"providers/gitlab/token", "providers", "other/x", "a/b", "a/b/c",
}

func TestNetworkGrantHosts(t *testing.T) {
	t.Parallel()
	policy := NetworkPolicy{Allow: []string{"*.github.com", "api.openai.com:8443"}, Deny: []string{"gist.github.com"}}
	tests := []struct {
		name     string
		declared []string
		policy   NetworkPolicy
		hosts    []string
		denied   []string
	}{
		{name: "star is the allow list", declared: []string{"*"}, policy: policy,
			hosts: []string{"*.github.com", "api.openai.com:8443"}, denied: []string{"gist.github.com"}},
		{name: "explicit declared patterns", declared: []string{"api.github.com", "*.github.com"}, policy: policy,
			hosts: []string{"api.github.com", "*.github.com"}, denied: []string{"gist.github.com"}},
		{name: "star and explicit: star wins", declared: []string{"api.github.com", "*"}, policy: policy,
			hosts: []string{"*.github.com", "api.openai.com:8443"}, denied: []string{"gist.github.com"}},
		{name: "uncovered declared pattern left out", declared: []string{"api.github.com", "api.openai.com"}, policy: policy,
			hosts: []string{"api.github.com"}, denied: []string{"gist.github.com"}},
		{name: "no allow list", declared: []string{"*"}, policy: NetworkPolicy{}, hosts: []string{}},
		{name: "nothing declared", declared: []string{}, policy: policy, hosts: []string{}, denied: []string{"gist.github.com"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, err := NewNetworkGrant(tc.declared, tc.policy)
			require.NoError(t, err)
			require.Equal(t, tc.hosts, g.Hosts())
			require.Equal(t, tc.denied, g.Denied())
		})
	}
	var nilGrant *NetworkGrant
	require.Nil(t, nilGrant.Hosts())
	require.Nil(t, nilGrant.Denied())
}

func TestIntersectRefPatterns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want string
		ok   bool
	}{
		{a: "*", b: "*", want: "*", ok: true},
		{a: "*", b: "http/*", want: "http/*", ok: true},
		{a: "http/*", b: "*", want: "http/*", ok: true},
		{a: "http/*", b: "http/github/*", want: "http/github/*", ok: true},
		{a: "http/github/*", b: "http/*", want: "http/github/*", ok: true},
		{a: "http/*", b: "http/openai", want: "http/openai", ok: true},
		{a: "http/openai", b: "http/openai", want: "http/openai", ok: true},
		{a: "http/*", b: "http", ok: false},
		{a: "http/*", b: "https/*", ok: false},
		{a: "http/openai", b: "http/other", ok: false},
		{a: "http/./x", b: "*", ok: false},
		{a: "*", b: "a/**", ok: false},
	}
	for _, tc := range tests {
		t.Run(tc.a+" ∩ "+tc.b, func(t *testing.T) {
			t.Parallel()
			got, ok := IntersectRefPatterns(tc.a, tc.b)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
			for _, r := range sampleRefs {
				require.Equal(t, RefMatch(tc.a, r) && RefMatch(tc.b, r), ok && RefMatch(got, r), "ref %s", r)
			}
		})
	}
}

func FuzzIntersectRefPatterns(f *testing.F) {
	f.Add("http/*", "http/github/*", "http/github/token")
	f.Add("*", "a/b", "a/b")
	f.Add("a/*", "b/*", "a/x")
	f.Fuzz(func(t *testing.T, a, b, ref string) {
		got, ok := IntersectRefPatterns(a, b)
		if RefMatch(a, ref) && RefMatch(b, ref) && ValidateRefPattern(a) == nil && ValidateRefPattern(b) == nil {
			if !ok || !RefMatch(got, ref) {
				t.Fatalf("%q ∩ %q = %q, %v: misses %q", a, b, got, ok, ref)
			}
		}
		if ok && RefMatch(got, ref) && !(RefMatch(a, ref) && RefMatch(b, ref)) {
			t.Fatalf("%q ∩ %q = %q matches %q, which one of them does not", a, b, got, ref)
		}
	})
}

func TestRefGrantDescription(t *testing.T) {
	t.Parallel()
	sendTo := map[string][]string{
		"providers/github/*": {"api.github.com"},
		"http/openai":        {"api.openai.com"},
		"*":                  {"vault.internal:8200"},
		"nowhere/*":          {},
	}
	tests := []struct {
		name     string
		declared []string
		raw      []string
		ceiling  *Ceiling
		sendTo   map[string][]string
		refs     []string
		rawRefs  []string
		bindings map[string][]string
	}{
		{name: "no ceiling: the declaration", declared: []string{"http/*", "providers/github/token"}, sendTo: sendTo,
			refs: []string{"http/*", "providers/github/token"}, rawRefs: []string{},
			bindings: map[string][]string{
				"http/*": {"vault.internal:8200"}, "providers/github/token": {"vault.internal:8200", "api.github.com"},
				"http/openai": {"api.openai.com"},
			}},
		{name: "ceiling narrows", declared: []string{"*"}, ceiling: &Ceiling{Allow: []string{"providers/github/*", "http/openai"}},
			refs: []string{"providers/github/*", "http/openai"}, rawRefs: []string{}},
		{name: "declaration narrower than ceiling", declared: []string{"providers/github/token"}, ceiling: &Ceiling{Allow: []string{"providers/*"}},
			raw: []string{"providers/github/token"}, refs: []string{"providers/github/token"}, rawRefs: []string{"providers/github/token"}},
		{name: "disjoint ceiling", declared: []string{"http/*"}, ceiling: &Ceiling{Allow: []string{"providers/*"}}, sendTo: sendTo,
			raw: []string{"http/*"}, refs: []string{}, rawRefs: []string{}},
		{name: "empty ceiling", declared: []string{"http/*"}, ceiling: &Ceiling{}, refs: []string{}, rawRefs: []string{}},
		{name: "raw is capped by the ceiling", declared: []string{"http/*"}, ceiling: &Ceiling{Allow: []string{"http/github/*"}},
			raw: []string{"http/*"}, refs: []string{"http/github/*"}, rawRefs: []string{"http/github/*"}},
		{name: "malformed declared pattern", declared: []string{"http/../x", "a/b"}, refs: []string{"a/b"}, rawRefs: []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dest, err := NewSecretDestinations(tc.sendTo)
			require.NoError(t, err)
			g := &RefGrant{Declared: tc.declared, Raw: tc.raw, Ceiling: tc.ceiling, Destinations: dest}
			require.Equal(t, tc.refs, g.Refs())
			require.Equal(t, tc.rawRefs, g.RawRefs())
			require.Equal(t, tc.bindings, g.SendTo())
			// The description agrees with the grant's own checks.
			for _, r := range sampleRefs {
				require.Equal(t, g.Check(r) == nil, matchesAny(g.Refs(), r), "Check %s", r)
				require.Equal(t, g.CheckRaw(r) == nil, matchesAny(g.RawRefs(), r), "CheckRaw %s", r)
				for _, host := range []string{"api.github.com", "api.openai.com", "vault.internal:8200", "other.example"} {
					h, port := cutPort(host)
					e := endpoint(t, "https", h, port)
					bound := false
					for pattern, hosts := range g.SendTo() {
						if RefMatch(pattern, r) {
							list, err := ParseHostList(hosts)
							require.NoError(t, err)
							bound = bound || list.Allows(e)
						}
					}
					require.Equal(t, g.CheckDestination(r, e) == nil, bound, "CheckDestination %s to %s", r, host)
				}
			}
		})
	}
	var nilGrant *RefGrant
	require.Nil(t, nilGrant.Refs())
	require.Nil(t, nilGrant.RawRefs())
	require.Nil(t, nilGrant.SendTo())
}

func matchesAny(patterns []string, ref string) bool {
	for _, p := range patterns {
		if RefMatch(p, ref) {
			return true
		}
	}
	return false
}

// cutPort splits "host:port" for the test's endpoints (0: the default port).
func cutPort(s string) (string, int) {
	host, port, ok := strings.Cut(s, ":")
	if !ok {
		return s, 0
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		panic(err)
	}
	return host, n
}

func TestBinaryGrantBinaries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		declared []string
		ceiling  *Ceiling
		want     []string
	}{
		{name: "no ceiling", declared: []string{"git", "ls"}, want: []string{"git", "ls"}},
		{name: "star declared, ceiling names", declared: []string{"*"}, ceiling: &Ceiling{Allow: []string{"git", "ls"}}, want: []string{"git", "ls"}},
		{name: "star ceiling", declared: []string{"bash"}, ceiling: &Ceiling{Allow: []string{"*"}}, want: []string{"bash"}},
		{name: "star both", declared: []string{"*"}, ceiling: &Ceiling{Allow: []string{"*"}}, want: []string{"*"}},
		{name: "disjoint", declared: []string{"bash"}, ceiling: &Ceiling{Allow: []string{"git"}}, want: []string{}},
		{name: "paths are exact", declared: []string{"/usr/bin/git"}, ceiling: &Ceiling{Allow: []string{"git", "/usr/bin/git"}}, want: []string{"/usr/bin/git"}},
		{name: "empty ceiling", declared: []string{"*"}, ceiling: &Ceiling{}, want: []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := &BinaryGrant{Declared: tc.declared, Ceiling: tc.ceiling}
			require.Equal(t, tc.want, g.Binaries())
			for _, b := range []string{"git", "ls", "bash", "/usr/bin/git", "rm"} {
				allowed := false
				for _, e := range g.Binaries() {
					allowed = allowed || BinaryMatch(e, b)
				}
				require.Equal(t, g.Check(b) == nil, allowed, "binary %s", b)
			}
		})
	}
	var nilGrant *BinaryGrant
	require.Nil(t, nilGrant.Binaries())
}

func TestDescribeResolvedGrant(t *testing.T) {
	t.Parallel()
	p := researcher()
	p.SendTo = map[string][]string{"providers/github/*": {"api.github.com"}}
	tl := newTool("gh", withCaps(tool.Capabilities{
		Network: &tool.Network{AllowedHosts: []string{"*"}},
		Secrets: []string{"providers/*"}, SecretsRaw: []string{"providers/github/token"},
		Process: &tool.Process{AllowedBinaries: []string{"*"}},
	}))
	g, err := Resolve(tl, p, CallView{SessionID: "s1"})
	require.NoError(t, err)
	require.Equal(t, []string{"*.github.com", "api.openai.com"}, g.Network.Hosts())
	require.Equal(t, []string{"gist.github.com"}, g.Network.Denied())
	require.Equal(t, []string{"providers/github/*"}, g.Secrets.Refs())
	require.Equal(t, []string{"providers/github/token"}, g.Secrets.RawRefs())
	require.Equal(t, map[string][]string{"providers/github/*": {"api.github.com"}}, g.Secrets.SendTo())
	require.Equal(t, []string{"git", "ls"}, g.Process.Binaries())
}
