package fetch

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// Grants of the attack tables. In every one allowed.com and ports.test
// resolve to a public address, played by a loopback echo server.
var (
	// named allows allowed.com (default ports and 8443) and ports.test on
	// any port.
	named = grantSpec{declared: []string{"allowed.com", "allowed.com:8443", "ports.test:*"}, policy: capability.NetworkPolicy{Allow: []string{"*:*"}}}
	// anyHost allows every host and IP literal on the default ports.
	anyHost = grantSpec{declared: []string{"*"}, policy: capability.NetworkPolicy{Allow: []string{"*"}}}
	// anyPrivate is anyHost with allow_private_urls.
	anyPrivate = grantSpec{declared: []string{"*"}, policy: capability.NetworkPolicy{Allow: []string{"*"}, AllowPrivateURLs: true}}
)

type grantSpec struct {
	declared []string
	policy   capability.NetworkPolicy
}

// TestURLAttacks feeds the URL tricks used against SSRF filters to a
// fetcher. Each either ends in the exact HOST_NOT_ALLOWED detail, before
// any connection, or reaches the echo server that plays allowed.com (never
// anything else: the harness refuses any other dial).
func TestURLAttacks(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	tests := []struct {
		name  string
		grant grantSpec
		url   string
		want  string // "" = reaches the echo server as wantHost
		// wantHost is the Host header the server sees on success.
		wantHost string
	}{
		// User info and what hides behind "@".
		{name: "userinfo names the allowed host", grant: named, url: "http://allowed.com@evil.com/echo", want: "URLs with user info are not allowed"},
		{name: "userinfo with port-like password", grant: named, url: "http://allowed.com:443@evil.com/echo", want: "URLs with user info are not allowed"},
		{name: "userinfo with empty password", grant: named, url: "http://allowed.com:@evil.com/echo", want: "URLs with user info are not allowed"},
		{name: "empty userinfo", grant: named, url: "http://@allowed.com/echo", want: "URLs with user info are not allowed"},
		{name: "empty user and password", grant: named, url: "http://:@allowed.com/echo", want: "URLs with user info are not allowed"},
		{name: "fragment hides the allowed host", grant: named, url: "http://evil.com#@allowed.com", want: "evil.com is not in the declared allowedHosts"},
		{name: "query hides the allowed host", grant: named, url: "http://evil.com?@allowed.com", want: "evil.com is not in the declared allowedHosts"},
		{name: "path hides the allowed host", grant: named, url: "http://evil.com/@allowed.com", want: "evil.com is not in the declared allowedHosts"},
		{name: "encoded at sign", grant: named, url: "http://allowed.com%40evil.com/", want: `invalid URL: invalid URL escape "%40"`},
		{name: "backslash before at sign", grant: named, url: `http://allowed.com\@evil.com/`, want: "invalid URL: net/url: invalid userinfo"},
		{name: "backslash in host", grant: named, url: `http://evil.com\allowed.com/`, want: `invalid URL: invalid character "\\" in host name`},
		{name: "backslashes for slashes", grant: named, url: `http:\\allowed.com\echo`, want: "invalid URL: missing host"},
		{name: "single slash", grant: named, url: "http:/allowed.com/echo", want: "invalid URL: missing host"},
		{name: "scheme-relative", grant: named, url: "//allowed.com/echo", want: "invalid URL: missing scheme"},
		{name: "tab in host", grant: named, url: "http://allowed.com\t/", want: "invalid URL: net/url: invalid control character in URL"},
		{name: "NUL in host", grant: named, url: "http://allowed.com\x00.evil.com/", want: "invalid URL: net/url: invalid control character in URL"},
		{name: "encoded NUL in host", grant: named, url: "http://allowed.com%00.evil.com/", want: `invalid URL: invalid URL escape "%00"`},
		{name: "encoded dot in host", grant: named, url: "http://allowed.com%2eevil.com/", want: `invalid URL: invalid URL escape "%2e"`},
		{name: "encoded letter in host", grant: named, url: "http://%61llowed.com/", want: `invalid URL: invalid URL escape "%61"`},

		// Spelling of the name.
		{name: "trailing dot", grant: named, url: "http://allowed.com./echo", wantHost: "allowed.com"},
		{name: "two trailing dots", grant: named, url: "http://allowed.com../echo", want: `invalid URL: invalid host name "allowed.com..": each label must be 1 to 63 characters`},
		{name: "upper case", grant: named, url: "HTTP://ALLOWED.COM/echo", wantHost: "allowed.com"},
		{name: "allowed name as a label of another", grant: named, url: "http://allowed.com.evil.com/", want: "allowed.com.evil.com is not in the declared allowedHosts"},
		{name: "allowed name as a suffix", grant: named, url: "http://evilallowed.com/", want: "evilallowed.com is not in the declared allowedHosts"},
		{name: "subdomain of an exact entry", grant: named, url: "http://api.allowed.com/", want: "api.allowed.com is not in the declared allowedHosts"},
		{name: "underscore", grant: named, url: "http://allowed_com/", want: `invalid URL: invalid host name "allowed_com": idna: disallowed rune U+005F`},
		{name: "leading hyphen", grant: named, url: "http://-allowed.com/", want: `invalid URL: invalid host name "-allowed.com": idna: invalid label "-allowed"`},

		// IDN look-alikes: the host is matched in its ASCII form.
		{name: "Cyrillic a", grant: named, url: "http://\u0430llowed.com/", want: "xn--llowed-2nf.com is not in the declared allowedHosts"},
		{name: "punycode of the look-alike", grant: named, url: "http://xn--llowed-2nf.com/", want: "xn--llowed-2nf.com is not in the declared allowedHosts"},
		{name: "Greek omicron", grant: named, url: "http://all\u03bfwed.com/", want: "xn--allwed-k0e.com is not in the declared allowedHosts"},
		{name: "empty punycode", grant: named, url: "http://xn--/", want: `invalid URL: invalid host name "xn--": length must be 1 to 253`},
		{name: "ideographic full stop joins another name", grant: named, url: "http://allowed.com%E3%80%82evil.com/", want: "allowed.com.evil.com is not in the declared allowedHosts"},
		// IDNA maps these to allowed.com itself: the same host, dialled and
		// sent in the Host header (and as TLS server name) as allowed.com,
		// never in the transport's own conversion (xn--allowed-oka.com for
		// the soft hyphen, a different name).
		{name: "ideographic full stop", grant: named, url: "http://allowed\u3002com/echo", wantHost: "allowed.com"},
		{name: "fullwidth full stop", grant: named, url: "http://allowed\uff0ecom/echo", wantHost: "allowed.com"},
		{name: "fullwidth letters", grant: named, url: "http://allowed.\uff43\uff4f\uff4d/echo", wantHost: "allowed.com"},
		{name: "soft hyphen", grant: named, url: "http://allo\u00adwed.com/echo", wantHost: "allowed.com"},
		{name: "trailing ideographic full stop", grant: named, url: "http://allowed.com\u3002/", want: "invalid URL: invalid host name \"allowed.com\u3002\": each label must be 1 to 63 characters"},

		// Numeric spellings of IPv4 addresses are neither names nor IPs.
		{name: "decimal", grant: anyHost, url: "http://2130706433/", want: `invalid URL: invalid host name "2130706433": the last label must not be a number`},
		{name: "octal", grant: anyHost, url: "http://0177.0.0.1/", want: `invalid URL: invalid host name "0177.0.0.1": the last label must not be a number`},
		{name: "hex short", grant: anyHost, url: "http://0x7f.1/", want: `invalid URL: invalid host name "0x7f.1": the last label must not be a number`},
		{name: "hex", grant: anyHost, url: "http://0x7f000001/", want: `invalid URL: invalid host name "0x7f000001": the last label must not be a number`},
		{name: "short form", grant: anyHost, url: "http://127.1/", want: `invalid URL: invalid host name "127.1": the last label must not be a number`},
		{name: "leading zeros", grant: anyHost, url: "http://127.000.000.001/", want: `invalid URL: invalid host name "127.000.000.001": the last label must not be a number`},
		{name: "IPv4 with trailing dot", grant: anyHost, url: "http://169.254.169.254./", want: `invalid URL: invalid host name "169.254.169.254.": the last label must not be a number`},
		{name: "zero", grant: anyHost, url: "http://0/", want: `invalid URL: invalid host name "0": the last label must not be a number`},

		// IP literals.
		{name: "unspecified", grant: anyHost, url: "http://0.0.0.0/", want: "0.0.0.0 resolves to a private or reserved address"},
		{name: "unspecified IPv6", grant: anyHost, url: "http://[::]/", want: "[::] resolves to a private or reserved address"},
		{name: "loopback IPv6", grant: anyHost, url: "http://[::1]/", want: "[::1] resolves to a private or reserved address"},
		{name: "IPv4-mapped loopback", grant: anyHost, url: "http://[::ffff:127.0.0.1]/", want: "127.0.0.1 resolves to a private or reserved address"},
		{name: "IPv4-mapped loopback in hex", grant: anyHost, url: "http://[::ffff:7f00:1]/", want: "127.0.0.1 resolves to a private or reserved address"},
		{name: "IPv4-mapped metadata long form", grant: anyHost, url: "http://[0:0:0:0:0:ffff:a9fe:a9fe]/", want: "169.254.169.254 is a cloud metadata address"},
		{name: "IPv4-compatible metadata", grant: anyHost, url: "http://[::a9fe:a9fe]/", want: "[::a9fe:a9fe] is a cloud metadata address"},
		{name: "NAT64 metadata", grant: anyHost, url: "http://[64:ff9b::a9fe:a9fe]/", want: "[64:ff9b::a9fe:a9fe] is a cloud metadata address"},
		{name: "NAT64 metadata dotted", grant: anyHost, url: "http://[64:ff9b::169.254.169.254]/", want: "[64:ff9b::a9fe:a9fe] is a cloud metadata address"},
		{name: "NAT64 loopback", grant: anyHost, url: "http://[64:ff9b::7f00:1]/", want: "[64:ff9b::7f00:1] resolves to a private or reserved address"},
		{name: "NAT64 public", grant: anyHost, url: "http://[64:ff9b::808:808]/", want: "[64:ff9b::808:808] resolves to a private or reserved address"},
		{name: "NAT64 local-use metadata", grant: anyHost, url: "http://[64:ff9b:1::a9fe:a9fe]/", want: "[64:ff9b:1::a9fe:a9fe] is a cloud metadata address"},
		{name: "6to4 loopback", grant: anyHost, url: "http://[2002:7f00:1::]/", want: "[2002:7f00:1::] resolves to a private or reserved address"},
		{name: "6to4 metadata", grant: anyHost, url: "http://[2002:a9fe:a9fe::1]/", want: "[2002:a9fe:a9fe::1] is a cloud metadata address"},
		{name: "Teredo", grant: anyHost, url: "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", want: "[2001:0:4136:e378:8000:63bf:3fff:fdd2] resolves to a private or reserved address"},
		{name: "ULA", grant: anyHost, url: "http://[fd00::1]/", want: "[fd00::1] resolves to a private or reserved address"},
		{name: "zone id", grant: anyHost, url: "http://[fe80::1%25eth0]/", want: `invalid URL: invalid host "fe80::1%eth0": IPv6 zones are not allowed`},
		{name: "unescaped zone id", grant: anyHost, url: "http://[fe80::1%eth0]/", want: `invalid URL: invalid URL escape "%et"`},
		{name: "IPv4 in brackets", grant: anyHost, url: "http://[127.0.0.1]/", want: "invalid URL: invalid IP-literal"},
		{name: "IP literal against a name entry", grant: named, url: "http://8.8.8.8/", want: "8.8.8.8 is not in the declared allowedHosts"},
		{name: "metadata with private allowed", grant: anyPrivate, url: "http://169.254.169.254/latest/meta-data/", want: "169.254.169.254 is a cloud metadata address"},
		{name: "mapped metadata with private allowed", grant: anyPrivate, url: "http://[::ffff:a9fe:a9fe]/", want: "169.254.169.254 is a cloud metadata address"},
		{name: "NAT64 metadata with private allowed", grant: anyPrivate, url: "http://[64:ff9b::a9fe:a9fe]/", want: "[64:ff9b::a9fe:a9fe] is a cloud metadata address"},
		{name: "6to4 metadata with private allowed", grant: anyPrivate, url: "http://[2002:a9fe:a9fe::]/", want: "[2002:a9fe:a9fe::] is a cloud metadata address"},
		{name: "Alibaba metadata with private allowed", grant: anyPrivate, url: "http://100.100.100.200/", want: "100.100.100.200 is a cloud metadata address"},
		{name: "AWS IPv6 metadata with private allowed", grant: anyPrivate, url: "http://[fd00:ec2::254]/", want: "[fd00:ec2::254] is a cloud metadata address"},
		{name: "metadata name with private allowed", grant: anyPrivate, url: "http://METADATA.google.internal./", want: "metadata.google.internal is a cloud metadata address"},

		// Ports.
		{name: "explicit default port", grant: named, url: "http://allowed.com:80/echo", wantHost: "allowed.com"},
		{name: "empty port", grant: named, url: "http://allowed.com:/echo", wantHost: "allowed.com"},
		{name: "declared port", grant: named, url: "http://allowed.com:8443/echo", wantHost: "allowed.com:8443"},
		{name: "declared port with leading zero", grant: named, url: "http://allowed.com:08443/echo", wantHost: "allowed.com:8443"},
		{name: "undeclared port", grant: named, url: "http://allowed.com:8080/", want: "allowed.com:8080 is not in the declared allowedHosts"},
		{name: "http port on https", grant: named, url: "https://allowed.com:80/", want: "allowed.com:80 is not in the declared allowedHosts"},
		{name: "https port on http", grant: named, url: "http://allowed.com:443/", want: "allowed.com:443 is not in the declared allowedHosts"},
		{name: "any port entry", grant: named, url: "http://ports.test:1/echo", wantHost: "ports.test:1"},
		{name: "any port entry high", grant: named, url: "http://ports.test:65535/echo", wantHost: "ports.test:65535"},
		{name: "port zero", grant: named, url: "http://allowed.com:0/", want: `invalid URL: port "0" must be a number from 1 to 65535`},
		{name: "port too large", grant: named, url: "http://allowed.com:65536/", want: `invalid URL: port "65536" must be a number from 1 to 65535`},
		{name: "signed port", grant: named, url: "http://allowed.com:+80/", want: `invalid URL: invalid port ":+80" after host`},
		{name: "wildcard port in a URL", grant: named, url: "http://allowed.com:*/", want: `invalid URL: invalid port ":*" after host`},

		// Schemes.
		{name: "file", grant: anyPrivate, url: "file:///etc/passwd", want: `scheme "file" is not allowed (only http and https)`},
		{name: "gopher", grant: anyPrivate, url: "gopher://allowed.com:70/_GET", want: `scheme "gopher" is not allowed (only http and https)`},
		{name: "ftp", grant: anyPrivate, url: "ftp://allowed.com/", want: `scheme "ftp" is not allowed (only http and https)`},
		{name: "websocket", grant: anyPrivate, url: "ws://allowed.com/", want: `scheme "ws" is not allowed (only http and https)`},
		{name: "dict", grant: anyPrivate, url: "dict://127.0.0.1:11211/stat", want: `scheme "dict" is not allowed (only http and https)`},
		{name: "data", grant: anyPrivate, url: "data:text/plain,x", want: `scheme "data" is not allowed (only http and https)`},
		{name: "javascript", grant: anyPrivate, url: "javascript:alert(1)", want: `scheme "javascript" is not allowed (only http and https)`},
		{name: "no scheme", grant: anyPrivate, url: "allowed.com/echo", want: "invalid URL: missing scheme"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{
				declared: tt.grant.declared,
				policy:   tt.grant.policy,
				hosts:    map[string][]string{"allowed.com": {"8.8.8.8"}, "ports.test": {"8.8.8.8"}},
				dialTo:   srv.Listener.Addr().String(),
			})
			resp, err := e.fetch(t, tool.Request{URL: tt.url, Header: map[string][]string{"Authorization": {"Bearer s3cr3t"}}})
			if tt.want != "" {
				require.Nil(t, resp)
				requireDenied(t, e, err, tt.want, 1)
				require.NotContains(t, err.Error(), "s3cr3t")
				require.Zero(t, e.dials.Load(), "refused before any dial")
				return
			}
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			require.Equal(t, tt.wantHost, decodeEcho(t, resp).Host)
			for _, a := range e.dialledAddrs() {
				require.Regexp(t, `^8\.8\.8\.8:\d+$`, a, "only the checked address of the allowed name is dialled")
			}
		})
	}
}
