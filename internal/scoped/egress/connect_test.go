package egress

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
)

// TestConnectTLS: an http.Client reaches an https server through a CONNECT
// tunnel; the server sees TLS and the request as sent.
func TestConnectTLS(t *testing.T) {
	t.Parallel()
	_, secure, _, port := echoServers(t)
	p := startProxy(t, proxyOpts{
		declared: []string{"allowed.test:" + port},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
	})
	for _, keepAlive := range []bool{false, true} {
		c := p.client(t, secure, keepAlive)
		for range 3 {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "https://allowed.test:"+port+"/echo?q=1", strings.NewReader("payload"))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer x")
			resp, err := c.Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			got := decodeEcho(t, body)
			require.True(t, got.TLS)
			require.Equal(t, "POST", got.Method)
			require.Equal(t, "/echo?q=1", got.URI)
			require.Equal(t, "payload", got.Body)
			require.Equal(t, "Bearer x", got.Header.Get("Authorization"))
		}
	}
	require.Empty(t, p.deniedErrs())
}

// TestConnectEagerBytesAndHalfClose: bytes sent in the same packet as the
// CONNECT header reach the server, and a client that shuts its write side
// gets the rest of the answer and then EOF.
func TestConnectEagerBytesAndHalfClose(t *testing.T) {
	t.Parallel()
	echo := newTCPEcho(t)
	p := startProxy(t, proxyOpts{
		declared: []string{"echo.test:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
	})
	c := p.dialRaw(t)
	target := "echo.test:" + itoa(echo.port())
	_, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\nhello ")
	require.NoError(t, err)
	line, err := c.r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1 200 Connection established\r\n", line)
	line, err = c.r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "\r\n", line)
	_, err = io.WriteString(c, "world")
	require.NoError(t, err)
	require.NoError(t, c.Conn.(interface{ CloseWrite() error }).CloseWrite())
	rest, err := io.ReadAll(c.r)
	require.NoError(t, err, "EOF after the server's EOF")
	require.Equal(t, "hello world", string(rest))
	require.Equal(t, io.EOF, <-echo.closed)
}

// TestConnectRefused: each refusal is a 403 with the exact body, reported
// once, before any connection; the client's connection is closed after it.
func TestConnectRefused(t *testing.T) {
	t.Parallel()
	_, _, _, port := echoServers(t)
	named := proxyOpts{
		declared: []string{"allowed.test:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, Deny: []string{"blocked.test"}, AllowPrivateURLs: true},
	}
	everything := proxyOpts{
		declared: []string{"*:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, Deny: []string{"blocked.test"}, AllowPrivateURLs: true},
		names:    map[string]string{"meta.test": "169.254.169.254", "mapped.test": "::ffff:169.254.169.254"},
	}
	public := proxyOpts{
		declared: []string{"*:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}},
	}
	tests := []struct {
		name   string
		opts   proxyOpts
		target string
		want   string
	}{
		{name: "not allowed, https port", opts: named, target: "other.test:443", want: `Capstan egress: host "other.test" is not in personality network allow list`},
		{name: "not allowed, http port", opts: named, target: "Other.Test.:80", want: `Capstan egress: host "other.test" is not in personality network allow list`},
		{name: "not allowed, other port", opts: named, target: "other.test:" + port, want: `Capstan egress: host "other.test:` + port + `" is not in personality network allow list`},
		{name: "not allowed, IPv6", opts: named, target: "[2606:4700::1111]:443", want: `Capstan egress: host "[2606:4700::1111]" is not in personality network allow list`},
		{name: "not allowed, IDN", opts: named, target: "BÜCHER.test:443", want: `Capstan egress: host "xn--bcher-kva.test" is not in personality network allow list`},
		{name: "deny list wins", opts: everything, target: "blocked.test:" + port, want: "Capstan egress: blocked.test:" + port + " is on the deny list"},
		{name: "private without allow_private_urls", opts: public, target: "allowed.test:" + port, want: "Capstan egress: allowed.test:" + port + " resolves to a private or reserved address"},
		{name: "private literal", opts: public, target: "127.0.0.1:" + port, want: "Capstan egress: 127.0.0.1:" + port + " resolves to a private or reserved address"},
		{name: "IPv6 loopback", opts: public, target: "[::1]:" + port, want: "Capstan egress: [::1]:" + port + " resolves to a private or reserved address"},
		{name: "metadata literal", opts: everything, target: "169.254.169.254:80", want: "Capstan egress: 169.254.169.254 is a cloud metadata address"},
		{name: "metadata name", opts: everything, target: "metadata.google.internal:443", want: "Capstan egress: metadata.google.internal is a cloud metadata address"},
		{name: "metadata by lookup", opts: everything, target: "meta.test:443", want: "Capstan egress: meta.test is a cloud metadata address"},
		{name: "mapped metadata by lookup", opts: everything, target: "mapped.test:8080", want: "Capstan egress: mapped.test:8080 is a cloud metadata address"},
		{name: "ambiguous IPv4 name", opts: everything, target: "127.1:443", want: `Capstan egress: invalid URL: invalid host name "127.1": the last label must not be a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := startProxy(t, tt.opts)
			c := p.dialRaw(t)
			resp, body := c.do(t, "CONNECT "+tt.target+" HTTP/1.1\r\n\r\n") // no Host: CONNECT needs none
			requireRefused(t, p, resp, body, tt.want, 1)
			require.True(t, resp.Close, "a refused CONNECT closes the connection")
			requireClosedByPeer(t, c)
		})
	}
}

// TestConnectTLSRefusedByClient: a real client sees the refusal as a
// failed CONNECT.
func TestConnectTLSRefusedByClient(t *testing.T) {
	t.Parallel()
	_, secure, _, port := echoServers(t)
	p := startProxy(t, proxyOpts{
		declared: []string{"allowed.test:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
	})
	resp, err := p.client(t, secure, true).Get("https://other.test:" + port + "/echo")
	if resp != nil {
		resp.Body.Close()
	}
	require.ErrorContains(t, err, "Forbidden")
	require.Len(t, p.deniedErrs(), 1)
	require.EqualError(t, p.deniedErrs()[0], "HOST_NOT_ALLOWED: other.test:"+port+" is not in the declared allowedHosts")
}

// TestPortRules: a pattern without a port allows CONNECT to 443 (https)
// and 80 (http) only; "host:8443" allows that port; "host:*" any port.
// Absolute-form requests are http: their default port is 80.
func TestPortRules(t *testing.T) {
	t.Parallel()
	_, secure, plainPort, securePort := echoServers(t)
	p := startProxy(t, proxyOpts{
		declared: []string{"plain.test", "alt.test:8443", "any.test:*", "exact.test:" + securePort, "exact.test:" + plainPort},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
		// Targets on the fixed ports resolve to an address where nothing
		// is expected to listen: allowed means "dialled", 200 or 502.
		names: map[string]string{"plain.test": "127.0.0.9", "alt.test": "127.0.0.9"},
	})
	tests := []struct {
		name    string
		raw     string // request line
		refused string // "" = allowed; else the 403 body's host
		status  int    // when allowed and known
	}{
		{name: "CONNECT default https port", raw: "CONNECT plain.test:443"},
		{name: "CONNECT default http port", raw: "CONNECT plain.test:80"},
		{name: "CONNECT other port", raw: "CONNECT plain.test:8443", refused: "plain.test:8443"},
		{name: "CONNECT test server port", raw: "CONNECT plain.test:" + securePort, refused: "plain.test:" + securePort},
		{name: "CONNECT exact port", raw: "CONNECT alt.test:8443"},
		{name: "CONNECT exact port only", raw: "CONNECT alt.test:443", refused: "alt.test"},
		{name: "CONNECT exact port only, http", raw: "CONNECT alt.test:80", refused: "alt.test"},
		{name: "CONNECT any port", raw: "CONNECT any.test:" + securePort, status: 200},
		{name: "CONNECT listed port", raw: "CONNECT exact.test:" + securePort, status: 200},
		{name: "GET on 443 is not the http default", raw: "GET http://plain.test:443/", refused: "plain.test:443"},
		{name: "GET default port", raw: "GET http://plain.test/"},
		{name: "GET exact port only", raw: "GET http://alt.test/", refused: "alt.test"},
		{name: "GET listed port", raw: "GET http://exact.test:" + plainPort + "/echo", status: 201},
		{name: "GET any port", raw: "GET http://any.test:" + plainPort + "/echo", status: 201},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: the count of refusals is the proxy's.
			before := len(p.deniedErrs())
			c := p.dialRaw(t)
			host := strings.TrimPrefix(strings.Fields(tt.raw)[1], "http://")
			host, _, _ = strings.Cut(host, "/")
			resp, body := c.do(t, tt.raw+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
			if tt.refused != "" {
				requireRefused(t, p, resp, body, `Capstan egress: host "`+tt.refused+`" is not in personality network allow list`, before+1)
				return
			}
			require.Len(t, p.deniedErrs(), before, "not refused: %s", body)
			if tt.status != 0 {
				require.Equal(t, tt.status, resp.StatusCode, body)
				return
			}
			require.Contains(t, []int{200, 502}, resp.StatusCode, body)
		})
	}
	// The tunnel of "CONNECT any port" carried TLS.
	c := p.dialRaw(t)
	resp, _ := c.do(t, "CONNECT any.test:"+securePort+" HTTP/1.1\r\nHost: any.test\r\n\r\n")
	require.Equal(t, 200, resp.StatusCode)
	tc := tls.Client(c.Conn, tlsConfigFor(secure))
	require.NoError(t, tc.HandshakeContext(t.Context()))
	require.NoError(t, tc.Close())
}
