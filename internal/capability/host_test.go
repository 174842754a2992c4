package capability

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNormalizeHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want, err string
	}{
		{name: "lower-cased", in: "API.Example.COM", want: "api.example.com"},
		{name: "one trailing dot removed", in: "example.com.", want: "example.com"},
		{name: "two trailing dots refused", in: "example.com..", err: "each label must be 1 to 63 characters"},
		{name: "IDNA to ASCII", in: "bücher.de", want: "xn--bcher-kva.de"},
		{name: "IDNA upper-case", in: "BÜCHER.de", want: "xn--bcher-kva.de"},
		{name: "punycode kept", in: "xn--bcher-kva.de", want: "xn--bcher-kva.de"},
		{name: "full-width mapped", in: "ｅｘａｍｐｌｅ.com", want: "example.com"},
		{name: "single label", in: "localhost", want: "localhost"},
		{name: "IPv4", in: "10.1.2.3", want: "10.1.2.3"},
		{name: "IPv6 bare", in: "::1", want: "::1"},
		{name: "IPv6 bracketed", in: "[2001:DB8::1]", want: "2001:db8::1"},
		{name: "IPv4-mapped IPv6 unmapped", in: "::ffff:10.0.0.1", want: "10.0.0.1"},
		{name: "empty", in: "", err: "empty host"},
		{name: "empty label", in: "a..b", err: "each label must be 1 to 63 characters"},
		{name: "underscore refused", in: "a_b.com", err: "disallowed rune"},
		{name: "leading hyphen refused", in: "-a.com", err: "invalid label"},
		{name: "space refused", in: "ex ample.com", err: "disallowed rune"},
		{name: "star refused", in: "*", err: "disallowed rune"},
		{name: "short IPv4 refused", in: "127.1", err: "the last label must not be a number"},
		{name: "hex IPv4 refused", in: "0x7f.0x1", err: "the last label must not be a number"},
		{name: "numeric last label refused", in: "a.123", err: "the last label must not be a number"},
		{name: "numeric first label ok", in: "123.a", want: "123.a"},
		{name: "zone refused", in: "fe80::1%eth0", err: "IPv6 zones are not allowed"},
		{name: "bracketed IPv4 refused", in: "[10.0.0.1]", err: "brackets need an IPv6 address"},
		{name: "unbalanced bracket", in: "[::1", err: "unbalanced bracket"},
		{name: "host with port refused", in: "example.com:80", err: "invalid host"},
		{name: "label too long", in: string(make([]byte, 64)) + ".com", err: "invalid host name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := NormalizeHost(tt.in)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestParseHostPatternErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, pattern, err string }{
		{name: "empty", pattern: "", err: `invalid host pattern "": empty pattern`},
		{name: "star in middle", pattern: "api.*.com", err: `"*" is allowed only as the whole host or a leading "*." label`},
		{name: "star without dot", pattern: "*example.com", err: `"*" is allowed only as the whole host or a leading "*." label`},
		{name: "double wildcard", pattern: "*.*.com", err: `"*" is allowed only as the whole host or a leading "*." label`},
		{name: "wildcard over IP", pattern: "*.10.0.0.1", err: `"*." must be followed by a host name, not an IP address`},
		{name: "wildcard over numeric name", pattern: "*.a.123", err: "the last label must not be a number"},
		{name: "port zero", pattern: "example.com:0", err: `port "0" must be a number from 1 to 65535`},
		{name: "port too large", pattern: "example.com:65536", err: `port "65536" must be a number from 1 to 65535`},
		{name: "port not a number", pattern: "example.com:http", err: `port "http" must be a number from 1 to 65535`},
		{name: "signed port", pattern: "example.com:+80", err: `port "+80" must be a number`},
		{name: "empty port", pattern: "example.com:", err: `port "" must be a number`},
		{name: "empty host with port", pattern: ":8080", err: "empty host"},
		{name: "scheme", pattern: "https://example.com", err: "invalid host pattern"},
		{name: "path", pattern: "example.com/x", err: "invalid host pattern"},
		{name: "bad CIDR", pattern: "10.0.0.0/33", err: "invalid host pattern"},
		{name: "mapped CIDR", pattern: "::ffff:10.0.0.0/104", err: "IPv4-mapped IPv6 prefixes are not supported"},
		{name: "bracketed name", pattern: "[example.com]:80", err: "brackets need an IPv6 address"},
		{name: "text after bracket", pattern: "[::1]x", err: "unexpected text after ']'"},
		{name: "unbalanced bracket", pattern: "[::1:80", err: "unbalanced bracket"},
		{name: "invalid name", pattern: "ex ample.com", err: "disallowed rune"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseHostPattern(tt.pattern)
			require.ErrorContains(t, err, tt.err)
		})
	}
}

func TestHostPatternMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, pattern, scheme, host string
		port                        int
		allow, deny                 bool
	}{
		{name: "star https default", pattern: "*", scheme: "https", host: "example.com", allow: true, deny: true},
		{name: "star http default", pattern: "*", scheme: "http", host: "example.com", port: 80, allow: true, deny: true},
		{name: "star other port", pattern: "*", scheme: "https", host: "example.com", port: 8443, deny: true},
		{name: "star http on 443", pattern: "*", scheme: "http", host: "example.com", port: 443, deny: true},
		{name: "star matches IP", pattern: "*", scheme: "https", host: "10.0.0.1", allow: true, deny: true},
		{name: "star star any port", pattern: "*:*", scheme: "https", host: "example.com", port: 8443, allow: true, deny: true},
		{name: "star fixed port", pattern: "*:8443", scheme: "https", host: "example.com", port: 8443, allow: true, deny: true},
		{name: "exact", pattern: "example.com", scheme: "https", host: "example.com", allow: true, deny: true},
		{name: "exact case-insensitive", pattern: "Example.COM", scheme: "https", host: "EXAMPLE.com.", allow: true, deny: true},
		{name: "exact other name", pattern: "example.com", scheme: "https", host: "api.example.com"},
		{name: "exact IDNA", pattern: "bücher.de", scheme: "https", host: "xn--bcher-kva.de", allow: true, deny: true},
		{name: "suffix one label", pattern: "*.example.com", scheme: "https", host: "api.example.com", allow: true, deny: true},
		{name: "suffix two labels", pattern: "*.example.com", scheme: "https", host: "a.b.example.com", allow: true, deny: true},
		{name: "suffix never itself", pattern: "*.example.com", scheme: "https", host: "example.com"},
		{name: "suffix never evil", pattern: "*.example.com", scheme: "https", host: "evil-example.com"},
		{name: "suffix never infix", pattern: "*.example.com", scheme: "https", host: "example.com.evil.org"},
		{name: "suffix with dot", pattern: "*.example.com", scheme: "https", host: "api.example.com.", allow: true, deny: true},
		{name: "no port is default only", pattern: "example.com", scheme: "https", host: "example.com", port: 8443, deny: true},
		{name: "explicit port", pattern: "example.com:8443", scheme: "https", host: "example.com", port: 8443, allow: true, deny: true},
		{name: "explicit port not default", pattern: "example.com:8443", scheme: "https", host: "example.com"},
		{name: "explicit 443 with https", pattern: "example.com:443", scheme: "https", host: "example.com", allow: true, deny: true},
		{name: "any port", pattern: "example.com:*", scheme: "http", host: "example.com", port: 1, allow: true, deny: true},
		{name: "IP exact", pattern: "127.0.0.1:8080", scheme: "http", host: "127.0.0.1", port: 8080, allow: true, deny: true},
		{name: "IP other", pattern: "127.0.0.1", scheme: "http", host: "127.0.0.2"},
		{name: "CIDR", pattern: "10.1.2.0/24", scheme: "https", host: "10.1.2.77", allow: true, deny: true},
		{name: "CIDR outside", pattern: "10.1.2.0/24", scheme: "https", host: "10.1.3.1"},
		{name: "CIDR with port", pattern: "10.1.2.0/24:8080", scheme: "http", host: "10.1.2.3", port: 8080, allow: true, deny: true},
		{name: "IPv6 bracket port", pattern: "[::1]:8080", scheme: "http", host: "::1", port: 8080, allow: true, deny: true},
		{name: "IPv6 bracket host", pattern: "[::1]:8080", scheme: "http", host: "[::1]", port: 8080, allow: true, deny: true},
		{name: "IPv6 bare CIDR", pattern: "fd00::/8", scheme: "https", host: "fd12::1", allow: true, deny: true},
		{name: "IPv6 bracket CIDR port", pattern: "[fd00::/8]:*", scheme: "https", host: "fd12::1", port: 9, allow: true, deny: true},
		{name: "mapped IPv4 matches IPv4 entry", pattern: "10.0.0.0/8", scheme: "https", host: "::ffff:10.0.0.1", allow: true, deny: true},
		{name: "IP never matches name", pattern: "example.com", scheme: "https", host: "93.184.216.34"},
		{name: "name never matches IP entry", pattern: "127.0.0.1", scheme: "https", host: "localhost"},
		{name: "suffix never matches IP", pattern: "*.0.1.example", scheme: "https", host: "10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := ParseHostPattern(tt.pattern)
			require.NoError(t, err)
			e, err := ParseEndpoint(tt.scheme, tt.host, tt.port)
			require.NoError(t, err)
			require.Equal(t, tt.allow, p.Match(e), "allow")
			require.Equal(t, tt.deny, p.MatchDeny(e), "deny")
			require.Equal(t, tt.pattern, p.String())
		})
	}
}

func TestHostPatternCovers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, outer, inner string
		deny, want         bool
	}{
		{name: "star covers name", outer: "*", inner: "api.example.com", want: true},
		{name: "star covers suffix", outer: "*", inner: "*.example.com", want: true},
		{name: "star not other port", outer: "*", inner: "example.com:8443"},
		{name: "star star covers port", outer: "*:*", inner: "example.com:8443", want: true},
		{name: "name covers itself", outer: "example.com", inner: "Example.com.", want: true},
		{name: "name not suffix", outer: "example.com", inner: "*.example.com"},
		{name: "name not star", outer: "example.com", inner: "*"},
		{name: "suffix covers sub", outer: "*.github.com", inner: "api.github.com", want: true},
		{name: "suffix not parent", outer: "*.github.com", inner: "github.com"},
		{name: "suffix not evil", outer: "*.github.com", inner: "evilgithub.com"},
		{name: "suffix covers same suffix", outer: "*.github.com", inner: "*.github.com", want: true},
		{name: "suffix covers deeper suffix", outer: "*.github.com", inner: "*.api.github.com", want: true},
		{name: "suffix not wider suffix", outer: "*.api.github.com", inner: "*.github.com"},
		{name: "CIDR covers IP", outer: "10.0.0.0/8", inner: "10.1.2.3", want: true},
		{name: "CIDR covers narrower CIDR", outer: "10.0.0.0/8", inner: "10.1.0.0/16", want: true},
		{name: "CIDR not wider CIDR", outer: "10.1.0.0/16", inner: "10.0.0.0/8"},
		{name: "IPv4 not IPv6", outer: "0.0.0.0/0", inner: "::1"},
		{name: "CIDR not name", outer: "0.0.0.0/0", inner: "example.com"},
		{name: "default not explicit port", outer: "example.com", inner: "example.com:443"},
		{name: "port covers port", outer: "example.com:8443", inner: "example.com:8443", want: true},
		{name: "port not default", outer: "example.com:443", inner: "example.com"},
		{name: "any port covers default", outer: "example.com:*", inner: "example.com", want: true},
		{name: "port not any port", outer: "example.com:8443", inner: "example.com:*"},
		{name: "deny without port covers every port", outer: "example.com", inner: "example.com:*", deny: true, want: true},
		{name: "deny with port", outer: "example.com:8443", inner: "example.com", deny: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			outer, err := ParseHostPattern(tt.outer)
			require.NoError(t, err)
			inner, err := ParseHostPattern(tt.inner)
			require.NoError(t, err)
			require.Equal(t, tt.want, outer.Covers(inner, tt.deny))
		})
	}
}

func TestEndpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, scheme, host string
		port               int
		display, host2     string
		wantPort           int
		err                string
	}{
		{name: "default https", scheme: "https", host: "Example.com", display: "example.com", host2: "example.com", wantPort: 443},
		{name: "explicit default http", scheme: "HTTP", host: "example.com", port: 80, display: "example.com", host2: "example.com", wantPort: 80},
		{name: "other port", scheme: "https", host: "example.com", port: 8443, display: "example.com:8443", host2: "example.com", wantPort: 8443},
		{name: "http on 443", scheme: "http", host: "example.com", port: 443, display: "example.com:443", host2: "example.com", wantPort: 443},
		{name: "IPv6", scheme: "https", host: "::1", display: "[::1]", host2: "::1", wantPort: 443},
		{name: "IPv6 port", scheme: "http", host: "[::1]", port: 8080, display: "[::1]:8080", host2: "::1", wantPort: 8080},
		{name: "bad scheme", scheme: "ftp", host: "example.com", err: `scheme "ftp" is not allowed (only http and https)`},
		{name: "bad port", scheme: "http", host: "example.com", port: 70000, err: "invalid port 70000"},
		{name: "bad host", scheme: "http", host: "", err: "empty host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e, err := ParseEndpoint(tt.scheme, tt.host, tt.port)
			if tt.err != "" {
				require.EqualError(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.display, e.String())
			require.Equal(t, tt.host2, e.Host())
			require.Equal(t, tt.wantPort, e.Port())
			require.Equal(t, strings.ToLower(tt.scheme), e.Scheme())
			_, isIP := e.IP()
			require.Equal(t, tt.host2 == "::1", isIP)
		})
	}
}

func TestParseHostList(t *testing.T) {
	t.Parallel()
	l, err := ParseHostList([]string{"example.com", "bad host", "*.x.org", "a.*.b"})
	require.Len(t, l, 2)
	require.ErrorContains(t, err, `invalid host pattern "bad host"`)
	require.ErrorContains(t, err, `invalid host pattern "a.*.b"`)
	e, err := ParseEndpoint("https", "a.x.org", 0)
	require.NoError(t, err)
	require.True(t, l.Allows(e))
	require.True(t, l.Denies(e))
	e, err = ParseEndpoint("https", "example.com", 8443)
	require.NoError(t, err)
	require.False(t, l.Allows(e))
	require.True(t, l.Denies(e))
}
