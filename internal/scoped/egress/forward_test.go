package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
)

// TestForward: absolute-form GET and POST reach the server with body and
// end-to-end headers, without hop-by-hop, Proxy-* or forwarding headers;
// the response comes back whole.
func TestForward(t *testing.T) {
	t.Parallel()
	_, _, port, _ := echoServers(t)
	p := startProxy(t, proxyOpts{
		declared: []string{"allowed.test:" + port},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
	})
	tests := []struct {
		name   string
		method string
		body   string
	}{
		{name: "GET", method: http.MethodGet},
		{name: "POST", method: http.MethodPost, body: strings.Repeat("b", 100_000)},
		{name: "PUT empty", method: http.MethodPut},
		{name: "DELETE", method: http.MethodDelete},
	}
	for _, keepAlive := range []bool{false, true} {
		c := p.client(t, nil, keepAlive)
		for _, tt := range tests {
			req, err := http.NewRequestWithContext(t.Context(), tt.method, "http://Allowed.Test:"+port+"/echo/a%2Fb?q=1;x&y=%zz", strings.NewReader(tt.body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer t")
			req.Header.Set("X-Custom", "v1")
			req.Header.Add("X-Custom", "v2")
			req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
			req.Header.Set("Proxy-Trace", "1")
			req.Header.Set("Connection", "X-Hop, Upgrade")
			req.Header.Set("X-Hop", "gone")
			req.Header.Set("X-Forwarded-For", "10.0.0.1")
			req.Header.Set("Upgrade", "websocket")
			resp, err := c.Do(req)
			require.NoError(t, err, tt.name)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode, tt.name)
			require.Equal(t, "echo", resp.Header.Get("X-Served-By"))
			got := decodeEcho(t, body)
			require.Equal(t, tt.method, got.Method)
			require.Equal(t, "allowed.test:"+port, got.Host, "the host as matched")
			require.Equal(t, "/echo/a%2Fb?q=1;x&y=%zz", got.URI, "path and query as sent")
			require.Equal(t, tt.body, got.Body)
			require.Equal(t, "Bearer t", got.Header.Get("Authorization"))
			require.Equal(t, []string{"v1", "v2"}, got.Header["X-Custom"])
			for _, h := range []string{"Proxy-Authorization", "Proxy-Trace", "Proxy-Connection", "X-Hop", "X-Forwarded-For", "Forwarded", "Upgrade", "Via"} {
				require.Empty(t, got.Header.Values(h), h)
			}
		}
	}
	require.Empty(t, p.deniedErrs())
}

// TestForwardHostAsMatched: a request target the transport would convert
// differently reaches the server as the name that was checked.
func TestForwardHostAsMatched(t *testing.T) {
	t.Parallel()
	_, _, port, _ := echoServers(t)
	p := startProxy(t, proxyOpts{
		declared: []string{"allowed.test:" + port},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
	})
	c := p.dialRaw(t)
	resp, body := c.do(t, "GET http://allo\u00adwed.test.:"+port+"/echo HTTP/1.1\r\nHost: evil.test\r\n\r\n")
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	require.Equal(t, "allowed.test:"+port, decodeEcho(t, []byte(body)).Host)
}

// TestForwardRefused: each refusal of an absolute-form request is a 403
// with the exact body, reported once, and the connection stays usable.
func TestForwardRefused(t *testing.T) {
	t.Parallel()
	_, _, port, _ := echoServers(t)
	named := proxyOpts{
		declared: []string{"allowed.test:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, Deny: []string{"blocked.test"}, AllowPrivateURLs: true},
	}
	everything := proxyOpts{
		declared: []string{"*:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, Deny: []string{"blocked.test"}, AllowPrivateURLs: true},
		names:    map[string]string{"meta.test": "fd00:ec2::254"},
	}
	public := proxyOpts{
		declared: []string{"*:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}},
	}
	tests := []struct {
		name string
		opts proxyOpts
		url  string
		want string
	}{
		{name: "not allowed", opts: named, url: "http://other.test/x?secret=1", want: `Capstan egress: host "other.test" is not in personality network allow list`},
		{name: "not allowed, port", opts: named, url: "http://OTHER.test:" + port + "/", want: `Capstan egress: host "other.test:` + port + `" is not in personality network allow list`},
		{name: "not allowed, IPv6 literal", opts: named, url: "http://[::1]:" + port + "/", want: `Capstan egress: host "[::1]:` + port + `" is not in personality network allow list`},
		{name: "deny list wins", opts: everything, url: "http://blocked.test:" + port + "/", want: "Capstan egress: blocked.test:" + port + " is on the deny list"},
		{name: "private without allow_private_urls", opts: public, url: "http://allowed.test:" + port + "/", want: "Capstan egress: allowed.test:" + port + " resolves to a private or reserved address"},
		{name: "metadata literal", opts: everything, url: "http://169.254.169.254/latest/meta-data/", want: "Capstan egress: 169.254.169.254 is a cloud metadata address"},
		{name: "metadata by lookup", opts: everything, url: "http://meta.test/", want: "Capstan egress: meta.test is a cloud metadata address"},
		{name: "metadata name", opts: everything, url: "http://metadata.google.internal/computeMetadata/v1/", want: "Capstan egress: metadata.google.internal is a cloud metadata address"},
		{name: "ambiguous IPv4 name", opts: everything, url: "http://0x7f.1/", want: `Capstan egress: invalid URL: invalid host name "0x7f.1": the last label must not be a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := startProxy(t, tt.opts)
			c := p.dialRaw(t)
			host := strings.SplitN(strings.TrimPrefix(tt.url, "http://"), "/", 2)[0]
			resp, body := c.do(t, "GET "+tt.url+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
			requireRefused(t, p, resp, body, tt.want, 1)
			require.False(t, resp.Close)
			// The same connection still works for a second request.
			resp, body = c.do(t, "GET "+tt.url+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
			requireRefused(t, p, resp, body, tt.want, 2)
		})
	}
}

// TestForwardRefusedByClient: a real client gets the 403 and its body.
func TestForwardRefusedByClient(t *testing.T) {
	t.Parallel()
	p := startProxy(t, proxyOpts{
		declared: []string{"allowed.test"},
		policy:   capability.NetworkPolicy{Allow: []string{"*"}, AllowPrivateURLs: true},
	})
	resp, err := p.client(t, nil, true).Post("http://other.test/upload", "text/plain", strings.NewReader("data"))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	requireRefused(t, p, resp, string(body), `Capstan egress: host "other.test" is not in personality network allow list`, 1)
}

// TestKeepAliveRechecks: every request on a kept-alive client connection
// is checked on its own; a refused one does not end the connection.
func TestKeepAliveRechecks(t *testing.T) {
	t.Parallel()
	_, _, port, _ := echoServers(t)
	p := startProxy(t, proxyOpts{
		declared: []string{"allowed.test:" + port},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
	})
	c := p.dialRaw(t)
	allowed := "GET http://allowed.test:" + port + "/echo HTTP/1.1\r\nHost: allowed.test:" + port + "\r\n\r\n"
	refused := "GET http://other.test:" + port + "/echo HTTP/1.1\r\nHost: allowed.test:" + port + "\r\n\r\n"

	resp, body := c.do(t, allowed)
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	resp, body = c.do(t, refused)
	requireRefused(t, p, resp, body, `Capstan egress: host "other.test:`+port+`" is not in personality network allow list`, 1)
	resp, body = c.do(t, allowed)
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)

	// Pipelined: both requests in one write.
	_, err := io.WriteString(c, refused+allowed)
	require.NoError(t, err)
	resp, body = c.read(t, refused)
	requireRefused(t, p, resp, body, `Capstan egress: host "other.test:`+port+`" is not in personality network allow list`, 2)
	resp, body = c.read(t, allowed)
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
}

// TestUpstreamFailures: dials that fail for another reason than a refusal,
// and servers that do not answer, are 502 naming the target, never
// reported as refusals.
func TestUpstreamFailures(t *testing.T) {
	t.Parallel()
	// A port where nothing listens: a listener opened and closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := portOf(t, ln.Addr())
	ln.Close()
	// A server that closes every connection without answering.
	hangup := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(hangup.Close)
	hangupPort := portOf(t, hangup.Listener.Addr())

	p := startProxy(t, proxyOpts{
		declared: []string{"*:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
		lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
			if host == "nxdomain.test" {
				return nil, errors.New("no such host")
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
	})
	tests := []struct {
		name string
		raw  string
		want string
	}{
		{name: "CONNECT refused by the server", raw: "CONNECT down.test:" + closedPort, want: "Capstan egress: cannot connect to down.test:" + closedPort},
		{name: "CONNECT unknown name", raw: "CONNECT nxdomain.test:443", want: "Capstan egress: cannot connect to nxdomain.test"},
		{name: "GET refused by the server", raw: "GET http://down.test:" + closedPort + "/", want: "Capstan egress: cannot connect to down.test:" + closedPort},
		{name: "GET unknown name", raw: "GET http://nxdomain.test/", want: "Capstan egress: cannot connect to nxdomain.test"},
		{name: "GET no answer", raw: "GET http://hangup.test:" + hangupPort + "/", want: "Capstan egress: no valid response from hangup.test:" + hangupPort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := p.dialRaw(t)
			resp, body := c.do(t, tt.raw+" HTTP/1.1\r\nHost: x.test\r\n\r\n")
			require.Equal(t, http.StatusBadGateway, resp.StatusCode, body)
			requireText(t, resp)
			require.Equal(t, tt.want, body)
		})
	}
	t.Cleanup(func() { require.Empty(t, p.deniedErrs()) })
}
