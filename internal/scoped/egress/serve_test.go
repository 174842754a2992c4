package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
)

// TestMalformed: requests the proxy does not serve are 400, never refusals.
func TestMalformed(t *testing.T) {
	t.Parallel()
	p := startProxy(t, proxyOpts{
		declared: []string{"*:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
	})
	const origin = "Capstan egress: send absolute-form requests (GET http://host/path) or CONNECT host:port"
	const https = "Capstan egress: only http:// URLs are proxied in absolute form; use CONNECT for https"
	tests := []struct {
		name string
		raw  string
		want string // "" = any body (the server's own 400)
	}{
		{name: "origin form", raw: "GET /path HTTP/1.1\r\nHost: allowed.test\r\n\r\n", want: origin},
		{name: "asterisk form", raw: "OPTIONS * HTTP/1.1\r\nHost: allowed.test\r\n\r\n", want: origin},
		{name: "absolute https", raw: "GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", want: https},
		{name: "absolute ftp", raw: "GET ftp://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", want: https},
		{name: "user info", raw: "GET http://user:pw@allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", want: "Capstan egress: URLs with user info are not supported"},
		{name: "port out of range", raw: "GET http://allowed.test:99999/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", want: "Capstan egress: invalid request target: port must be a number from 1 to 65535"},
		{name: "port zero", raw: "GET http://allowed.test:0/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", want: "Capstan egress: invalid request target: port must be a number from 1 to 65535"},
		{name: "CONNECT without port", raw: "CONNECT allowed.test HTTP/1.1\r\n\r\n", want: "Capstan egress: CONNECT needs host:port: missing port"},
		{name: "CONNECT empty port", raw: "CONNECT allowed.test: HTTP/1.1\r\n\r\n", want: "Capstan egress: CONNECT needs host:port: missing port"},
		{name: "CONNECT port zero", raw: "CONNECT allowed.test:0 HTTP/1.1\r\n\r\n", want: "Capstan egress: CONNECT needs host:port: port must be a number from 1 to 65535"},
		{name: "CONNECT port too big", raw: "CONNECT allowed.test:65536 HTTP/1.1\r\n\r\n", want: "Capstan egress: CONNECT needs host:port: port must be a number from 1 to 65535"},
		{name: "CONNECT without host", raw: "CONNECT :443 HTTP/1.1\r\n\r\n", want: "Capstan egress: CONNECT needs host:port: missing host"},
		{name: "CONNECT path", raw: "CONNECT /chat HTTP/1.1\r\nHost: allowed.test\r\n\r\n", want: "Capstan egress: CONNECT needs host:port: missing host"},
		{name: "CONNECT bare IPv6", raw: "CONNECT ::1:443 HTTP/1.1\r\n\r\n"},
		{name: "not HTTP", raw: "HELLO\r\n\r\n"},
		{name: "no Host header", raw: "GET http://allowed.test/ HTTP/1.1\r\n\r\n"},
		{name: "two Host headers", raw: "GET http://allowed.test/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"},
		{name: "control byte in target", raw: "GET http://allowed.test/\x01 HTTP/1.1\r\nHost: a\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := p.dialRaw(t)
			resp, body := c.do(t, tt.raw)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
			if tt.want != "" {
				requireText(t, resp)
				require.Equal(t, tt.want, body)
			}
		})
	}
	t.Cleanup(func() { require.Empty(t, p.deniedErrs(), "malformed requests are not refusals") })
}

// TestHeaderTimeout: a client that never finishes its header is
// disconnected after HeaderTimeout.
func TestHeaderTimeout(t *testing.T) {
	t.Parallel()
	p := startProxy(t, proxyOpts{
		declared: []string{"*:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
		cfg:      Config{HeaderTimeout: 100 * time.Millisecond},
	})
	for _, start := range []string{"", "GET http://allowed.test/ HTTP/1.1\r\nHost: allo", "CONNECT allowed.test:443 HTTP/1.1\r\n"} {
		c := p.dialRaw(t)
		_, err := io.WriteString(c, start)
		require.NoError(t, err)
		begin := time.Now()
		requireClosedByPeer(t, c)
		require.Less(t, time.Since(begin), waitFor/2)
	}
}

// TestDialTimeout: a dial that does not finish (here: a resolver that
// never answers) ends after DialTimeout with 502.
func TestDialTimeout(t *testing.T) {
	t.Parallel()
	p := startProxy(t, proxyOpts{
		declared: []string{"*:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
		lookup: func(ctx context.Context, _ string) ([]netip.Addr, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
		cfg: Config{DialTimeout: 100 * time.Millisecond},
	})
	for _, raw := range []string{"CONNECT slow.test:443", "GET http://slow.test/"} {
		c := p.dialRaw(t)
		resp, body := c.do(t, raw+" HTTP/1.1\r\nHost: slow.test\r\n\r\n")
		require.Equal(t, http.StatusBadGateway, resp.StatusCode)
		require.Equal(t, "Capstan egress: cannot connect to slow.test", body)
	}
	require.Empty(t, p.deniedErrs())
}

// TestStopClosesEverything: when Serve's context ends it closes idle
// tunnels, connections that never sent a byte, half-sent headers and dials
// in flight, and returns; goleak (TestMain) checks that nothing is left.
func TestStopClosesEverything(t *testing.T) {
	t.Parallel()
	echo := newTCPEcho(t)
	dialling := make(chan struct{}, 1)
	p := startProxy(t, proxyOpts{
		declared: []string{"*:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
		lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			if host == "slow.test" {
				dialling <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
	})
	target := "echo.test:" + itoa(echo.port())

	// An established tunnel on which the client never sends anything.
	tunnel := p.dialRaw(t)
	resp, _ := tunnel.do(t, "CONNECT "+target+" HTTP/1.1\r\n\r\n")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// A connection that sent nothing, one that sent half a header, one
	// with a CONNECT whose dial hangs, and a kept-alive idle one.
	silent := p.dialRaw(t)
	half := p.dialRaw(t)
	_, err := io.WriteString(half, "CONNECT "+target+" HTTP/1.1\r\n")
	require.NoError(t, err)
	pending := p.dialRaw(t)
	_, err = io.WriteString(pending, "CONNECT slow.test:443 HTTP/1.1\r\n\r\n")
	require.NoError(t, err)
	idle := p.dialRaw(t)
	resp, _ = idle.do(t, "GET http://"+target+"/ HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
	require.Equal(t, http.StatusBadGateway, resp.StatusCode, "the echo server does not speak HTTP")
	select {
	case <-dialling:
	case <-time.After(waitFor):
		t.Fatal("the pending dial did not start")
	}

	require.NoError(t, p.stop(t))
	for _, c := range []*rawConn{tunnel, silent, half, pending, idle} {
		requireClosedByPeer(t, c)
	}
	// The tunnel's upstream connection was closed too (the GET's earlier).
	for range 2 {
		select {
		case <-echo.closed:
		case <-time.After(waitFor):
			t.Fatal("an upstream connection was not closed")
		}
	}
	// The listener is closed.
	_, err = net.DialTimeout("tcp", p.addr, waitFor)
	require.Error(t, err)
}

// TestListenerClosed: Serve also stops, cleanly, when its listener is
// closed under it.
func TestListenerClosed(t *testing.T) {
	t.Parallel()
	g, err := capability.NewNetworkGrant([]string{"*"}, capability.NetworkPolicy{Allow: []string{"*"}})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- Serve(t.Context(), ln, Config{Dialer: fetch.NewDialer(g, fetch.Config{}, nil)}) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	ln.Close()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(waitFor):
		t.Fatal("Serve did not return after its listener was closed")
	}
	requireClosedByPeer(t, c)
}

// failingListener fails every Accept with a permanent error.
type failingListener struct{ net.Listener }

func (failingListener) Accept() (net.Conn, error) { return nil, errors.New("accept: broken") }

func TestServeErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	err = Serve(t.Context(), ln, Config{HeaderTimeout: -1})
	require.EqualError(t, err, "egress: Config.Dialer is required\negress: Config.HeaderTimeout must not be negative, got -1ns")
	_, err = ln.Accept()
	require.ErrorIs(t, err, net.ErrClosed, "Serve closes ln even when it refuses cfg")

	ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g, err := capability.NewNetworkGrant([]string{"*"}, capability.NetworkPolicy{Allow: []string{"*"}})
	require.NoError(t, err)
	err = Serve(t.Context(), failingListener{ln}, Config{Dialer: fetch.NewDialer(g, fetch.Config{}, nil)})
	require.EqualError(t, err, "egress: serve: accept: broken")
	_, err = ln.Accept()
	require.ErrorIs(t, err, net.ErrClosed)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	g, err := capability.NewNetworkGrant(nil, capability.NetworkPolicy{})
	require.NoError(t, err)
	d := fetch.NewDialer(g, fetch.Config{}, nil)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "defaults", cfg: Config{Dialer: d}},
		{name: "no dialer", cfg: Config{}, want: "egress: Config.Dialer is required"},
		{name: "negative dial timeout", cfg: Config{Dialer: d, DialTimeout: -time.Second}, want: "egress: Config.DialTimeout must not be negative, got -1s"},
		{name: "negative idle timeout", cfg: Config{Dialer: d, IdleTimeout: -time.Second}, want: "egress: Config.IdleTimeout must not be negative, got -1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.want)
		})
	}
	c := Config{Dialer: d}.withDefaults()
	require.Equal(t, DefaultHeaderTimeout, c.HeaderTimeout)
	require.Equal(t, DefaultDialTimeout, c.DialTimeout)
	require.Equal(t, DefaultIdleTimeout, c.IdleTimeout)
}

func TestConnectScheme(t *testing.T) {
	t.Parallel()
	for port, want := range map[int]string{443: "https", 80: "http", 8443: "http", 8080: "http", 1: "http"} {
		require.Equal(t, want, connectScheme(port), "port %d", port)
	}
	require.True(t, strings.HasSuffix(connectEstablished, "\r\n\r\n"))
}
