package capability

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/tool"
)

func TestNetworkGrantCheck(t *testing.T) {
	t.Parallel()
	policy := NetworkPolicy{
		Allow: []string{"*.github.com", "api.openai.com", "127.0.0.1:8080", "[::1]:*", "10.1.2.0/24"},
		Deny:  []string{"gist.github.com", "10.1.2.9"},
	}
	tests := []struct {
		name     string
		declared []string
		policy   NetworkPolicy
		scheme   string
		host     string
		port     int
		err      string
	}{
		{name: "declared star uses allow list", declared: []string{"*"}, policy: policy, scheme: "https", host: "api.github.com"},
		{name: "declared star allows IP entry", declared: []string{"*"}, policy: policy, scheme: "http", host: "127.0.0.1", port: 8080},
		{name: "declared star allows IPv6 any port", declared: []string{"*"}, policy: policy, scheme: "http", host: "::1", port: 9000},
		{name: "declared star outside allow", declared: []string{"*"}, policy: policy, scheme: "https", host: "api.stripe.com",
			err: "HOST_NOT_ALLOWED: api.stripe.com is not in the declared allowedHosts"},
		{name: "deny wins", declared: []string{"*"}, policy: policy, scheme: "https", host: "Gist.GitHub.com.",
			err: "HOST_NOT_ALLOWED: gist.github.com is on the deny list"},
		{name: "deny without port denies every port", declared: []string{"*:*"}, policy: NetworkPolicy{Allow: []string{"*:*"}, Deny: []string{"gist.github.com"}},
			scheme: "https", host: "gist.github.com", port: 8443, err: "HOST_NOT_ALLOWED: gist.github.com:8443 is on the deny list"},
		{name: "deny reported even when not declared", declared: []string{"api.openai.com"}, policy: policy, scheme: "https", host: "gist.github.com",
			err: "HOST_NOT_ALLOWED: gist.github.com is on the deny list"},
		{name: "deny IP in allowed CIDR", declared: []string{"*"}, policy: policy, scheme: "https", host: "10.1.2.9",
			err: "HOST_NOT_ALLOWED: 10.1.2.9 is on the deny list"},
		{name: "CIDR allowed", declared: []string{"10.1.2.0/24"}, policy: policy, scheme: "https", host: "10.1.2.8"},
		{name: "explicit intersect", declared: []string{"api.openai.com"}, policy: policy, scheme: "https", host: "api.openai.com"},
		{name: "explicit not declared", declared: []string{"api.openai.com"}, policy: policy, scheme: "https", host: "api.github.com",
			err: "HOST_NOT_ALLOWED: api.github.com is not in the declared allowedHosts"},
		{name: "declared but not allowed", declared: []string{"api.stripe.com"}, policy: policy, scheme: "https", host: "api.stripe.com",
			err: "HOST_NOT_ALLOWED: api.stripe.com is not in the declared allowedHosts"},
		{name: "declared port narrower than allow", declared: []string{"api.github.com"}, policy: NetworkPolicy{Allow: []string{"*.github.com:*"}},
			scheme: "https", host: "api.github.com", port: 8443, err: "HOST_NOT_ALLOWED: api.github.com:8443 is not in the declared allowedHosts"},
		{name: "non-default port in message", declared: []string{"*"}, policy: policy, scheme: "http", host: "api.openai.com", port: 443,
			err: "HOST_NOT_ALLOWED: api.openai.com:443 is not in the declared allowedHosts"},
		{name: "IPv6 in brackets in message", declared: []string{"*"}, policy: policy, scheme: "https", host: "2001:db8::1",
			err: "HOST_NOT_ALLOWED: [2001:db8::1] is not in the declared allowedHosts"},
		{name: "no allow list is nothing", declared: []string{"*"}, scheme: "https", host: "api.github.com",
			err: "HOST_NOT_ALLOWED: api.github.com is not in the declared allowedHosts"},
		{name: "no allow list with explicit", declared: []string{"api.github.com"}, scheme: "https", host: "api.github.com",
			err: "HOST_NOT_ALLOWED: api.github.com is not in the declared allowedHosts"},
		{name: "IDNA host normalised in message", declared: []string{"*"}, policy: policy, scheme: "https", host: "BÜCHER.de",
			err: "HOST_NOT_ALLOWED: xn--bcher-kva.de is not in the declared allowedHosts"},
		{name: "bad scheme", declared: []string{"*"}, policy: policy, scheme: "FTP", host: "api.github.com",
			err: `HOST_NOT_ALLOWED: scheme "ftp" is not allowed (only http and https)`},
		{name: "invalid host", declared: []string{"*"}, policy: policy, scheme: "https", host: "a_b.github.com",
			err: "HOST_NOT_ALLOWED: invalid URL: invalid host name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := NewNetworkGrant(tt.declared, tt.policy)
			require.NoError(t, err)
			err = g.Check(tt.scheme, tt.host, tt.port)
			if tt.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tool.ErrHostNotAllowed)
			require.ErrorContains(t, err, tt.err)
			var d *tool.DenialError
			require.ErrorAs(t, err, &d)
		})
	}
}

func TestNotAllowedHost(t *testing.T) {
	t.Parallel()
	g, err := NewNetworkGrant([]string{"*"}, NetworkPolicy{Allow: []string{"*.github.com", "[::1]:*"}, Deny: []string{"gist.github.com"}})
	require.NoError(t, err)
	tests := []struct {
		name   string
		scheme string
		host   string
		port   int
		want   string // "" = not the not-allowed refusal
	}{
		{name: "outside the allow list", scheme: "https", host: "API.Stripe.com.", want: "api.stripe.com"},
		{name: "port shown", scheme: "http", host: "api.stripe.com", port: 443, want: "api.stripe.com:443"},
		{name: "IPv6 in brackets", scheme: "https", host: "2001:db8::1", port: 8443, want: "[2001:db8::1]:8443"},
		{name: "deny list", scheme: "https", host: "gist.github.com"},
		{name: "bad scheme", scheme: "ftp", host: "api.github.com"},
		{name: "invalid host", scheme: "https", host: "a_b.github.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := g.Check(tt.scheme, tt.host, tt.port)
			require.Error(t, err)
			host, ok := NotAllowedHost(err)
			require.Equal(t, tt.want != "", ok)
			require.Equal(t, tt.want, host)
			wrapped, ok := NotAllowedHost(fmt.Errorf("dial: %w", err))
			require.Equal(t, tt.want, wrapped, "wrapped")
			require.Equal(t, tt.want != "", ok)
		})
	}
	for _, err := range []error{
		nil,
		errors.New("HOST_NOT_ALLOWED: x is not in the declared allowedHosts"), // not a denial
		tool.Deny(tool.ErrPathNotReachable, "x is not in the declared allowedHosts"),
		tool.Deny(tool.ErrHostNotAllowed, "invalid URL: x is not in the declared allowedHosts"),
		tool.Deny(tool.ErrHostNotAllowed, " is not in the declared allowedHosts"),
	} {
		host, ok := NotAllowedHost(err)
		require.False(t, ok, "%v", err)
		require.Empty(t, host)
	}
}

func TestNetworkGrantNil(t *testing.T) {
	t.Parallel()
	var g *NetworkGrant
	require.EqualError(t, g.Check("https", "example.com", 0), "HOST_NOT_ALLOWED: example.com is not in the declared allowedHosts")
	require.EqualError(t, g.CheckEndpoint(Endpoint{}), "HOST_NOT_ALLOWED: invalid URL: missing host")
}

func TestNetworkGrantEmpty(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		declared []string
		allow    []string
		want     bool
	}{
		{name: "star under an allow list", declared: []string{"*"}, allow: []string{"api.github.com"}, want: false},
		{name: "explicit host under an allow list", declared: []string{"api.github.com"}, allow: []string{"*.github.com"}, want: false},
		{name: "no allow list", declared: []string{"*"}, want: true},
		{name: "nothing declared", declared: []string{}, allow: []string{"*"}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := NewNetworkGrant(tt.declared, NetworkPolicy{Allow: tt.allow})
			require.NoError(t, err)
			require.Equal(t, tt.want, g.Empty())
		})
	}
	var none *NetworkGrant
	require.True(t, none.Empty())
}

func TestNewNetworkGrantErrors(t *testing.T) {
	t.Parallel()
	_, err := NewNetworkGrant([]string{"a.*.com"}, NetworkPolicy{Allow: []string{"x:0"}, Deny: []string{"[::1"}})
	require.ErrorContains(t, err, `network.allowed_hosts: invalid host pattern "a.*.com"`)
	require.ErrorContains(t, err, `safety.network.allow: invalid host pattern "x:0"`)
	require.ErrorContains(t, err, `safety.network.deny: invalid host pattern "[::1"`)

	g, err := NewNetworkGrant([]string{"*"}, NetworkPolicy{Allow: []string{"*"}, AllowPrivateURLs: true})
	require.NoError(t, err)
	require.True(t, g.AllowPrivateURLs)
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url, scheme, host string
		port                    int
		err                     string
	}{
		{name: "https default port", url: "https://API.Example.com/x?y=1", scheme: "https", host: "api.example.com", port: 443},
		{name: "http explicit port", url: "http://example.com:8080/", scheme: "http", host: "example.com", port: 8080},
		{name: "upper-case scheme", url: "HTTP://example.com", scheme: "http", host: "example.com", port: 80},
		{name: "IPv6", url: "http://[::1]:8080/", scheme: "http", host: "::1", port: 8080},
		{name: "trailing dot", url: "https://example.com./", scheme: "https", host: "example.com", port: 443},
		{name: "IDNA", url: "https://bücher.de/", scheme: "https", host: "xn--bcher-kva.de", port: 443},
		{name: "ftp refused", url: "ftp://example.com/", err: `HOST_NOT_ALLOWED: scheme "ftp" is not allowed (only http and https)`},
		{name: "file refused", url: "file:///etc/passwd", err: `HOST_NOT_ALLOWED: scheme "file" is not allowed (only http and https)`},
		{name: "user info refused", url: "https://user:pw@example.com/", err: "HOST_NOT_ALLOWED: URLs with user info are not allowed"},
		{name: "user only refused", url: "https://user@example.com/", err: "HOST_NOT_ALLOWED: URLs with user info are not allowed"},
		{name: "missing scheme", url: "example.com/x", err: "HOST_NOT_ALLOWED: invalid URL: missing scheme"},
		{name: "missing host", url: "http:///x", err: "HOST_NOT_ALLOWED: invalid URL: missing host"},
		{name: "opaque", url: "http:example.com", err: "HOST_NOT_ALLOWED: invalid URL: missing host"},
		{name: "port zero", url: "http://example.com:0/", err: `HOST_NOT_ALLOWED: invalid URL: port "0" must be a number from 1 to 65535`},
		{name: "port too large", url: "http://example.com:70000/", err: `HOST_NOT_ALLOWED: invalid URL: port "70000" must be a number from 1 to 65535`},
		{name: "bad port", url: "http://example.com:x/", err: `HOST_NOT_ALLOWED: invalid URL: invalid port ":x" after host`},
		{name: "short IPv4", url: "http://127.1/", err: `HOST_NOT_ALLOWED: invalid URL: invalid host name "127.1": the last label must not be a number`},
		{name: "zone", url: "http://[fe80::1%25eth0]/", err: "HOST_NOT_ALLOWED: invalid URL: invalid host \"fe80::1%eth0\": IPv6 zones are not allowed"},
		{name: "control character", url: "http://exa\nmple.com/", err: "HOST_NOT_ALLOWED: invalid URL: net/url: invalid control character in URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			scheme, host, port, err := CheckURL(tt.url)
			if tt.err != "" {
				require.EqualError(t, err, tt.err)
				require.ErrorIs(t, err, tool.ErrHostNotAllowed)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.scheme, scheme)
			require.Equal(t, tt.host, host)
			require.Equal(t, tt.port, port)
		})
	}
}
