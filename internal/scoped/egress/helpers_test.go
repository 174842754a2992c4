package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
	"github.com/capstanhq/capstan/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitFor is how long a test waits for something that should happen at
// once; reaching it is a failure, never a pass.
const waitFor = 10 * time.Second

// proxyOpts describe one proxy under test.
type proxyOpts struct {
	declared []string
	policy   capability.NetworkPolicy
	// names maps host names to addresses for the Dialer's LookupIP; a name
	// not in it resolves to 127.0.0.1.
	names map[string]string
	// lookup, when set, replaces the table.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	cfg    Config
}

// testProxy is a running Serve on a loopback listener.
type testProxy struct {
	addr string
	url  *url.URL

	mu     sync.Mutex
	denied []error

	cancel context.CancelFunc
	done   chan error
}

// startProxy runs Serve with the real fetch.Dialer on the grant of o. The
// proxy is stopped, and Serve's nil return checked, when the test ends.
func startProxy(t testing.TB, o proxyOpts) *testProxy {
	t.Helper()
	g, err := capability.NewNetworkGrant(o.declared, o.policy)
	require.NoError(t, err)
	p := &testProxy{done: make(chan error, 1)}
	lookup := o.lookup
	if lookup == nil {
		lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
			a, ok := o.names[host]
			if !ok {
				a = "127.0.0.1"
			}
			return []netip.Addr{netip.MustParseAddr(a)}, nil
		}
	}
	cfg := o.cfg
	cfg.Dialer = fetch.NewDialer(g, fetch.Config{LookupIP: lookup}, func(err error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.denied = append(p.denied, err)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.addr = ln.Addr().String()
	p.url = &url.URL{Scheme: "http", Host: p.addr}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() { p.done <- Serve(ctx, ln, cfg) }()
	t.Cleanup(func() { require.NoError(t, p.stop(t)) })
	return p
}

// stop cancels Serve and returns what it returned; it fails the test when
// Serve does not return in time.
func (p *testProxy) stop(t testing.TB) error {
	t.Helper()
	p.cancel()
	select {
	case err := <-p.done:
		p.done <- err // a second stop (the cleanup) sees it too
		return err
	case <-time.After(waitFor):
		t.Fatal("Serve did not return after its context ended")
		return nil
	}
}

func (p *testProxy) deniedErrs() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.denied...)
}

// client is an http.Client that uses the proxy for http and https and
// trusts srv's certificate (for any name) when srv is a TLS server.
func (p *testProxy) client(t testing.TB, srv *httptest.Server, keepAlive bool) *http.Client {
	t.Helper()
	tr := &http.Transport{Proxy: http.ProxyURL(p.url), DisableKeepAlives: !keepAlive}
	if srv != nil && srv.TLS != nil {
		tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		tr.TLSClientConfig.ServerName = "example.com" // a name of httptest's certificate
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitFor}
}

// echoed is what the echo handler answers.
type echoed struct {
	Method string
	Host   string
	URI    string
	Header http.Header
	Body   string
	TLS    bool
}

// echoHandler answers 201 with the request as JSON and a header of its own.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Served-By", "echo")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(echoed{Method: r.Method, Host: r.Host, URI: r.RequestURI, Header: r.Header, Body: string(body), TLS: r.TLS != nil})
}

// echoServers returns a plain and a TLS echo server on 127.0.0.1 and their
// ports.
func echoServers(t testing.TB) (plain, secure *httptest.Server, plainPort, securePort string) {
	t.Helper()
	plain = httptest.NewServer(http.HandlerFunc(echoHandler))
	t.Cleanup(plain.Close)
	secure = httptest.NewUnstartedServer(http.HandlerFunc(echoHandler))
	secure.Config.ErrorLog = log.New(io.Discard, "", 0) // tunnels closed before a handshake are expected
	secure.StartTLS()
	t.Cleanup(secure.Close)
	return plain, secure, portOf(t, plain.Listener.Addr()), portOf(t, secure.Listener.Addr())
}

func portOf(t testing.TB, a net.Addr) string {
	t.Helper()
	_, port, err := net.SplitHostPort(a.String())
	require.NoError(t, err)
	return port
}

func decodeEcho(t *testing.T, body []byte) echoed {
	t.Helper()
	var e echoed
	require.NoError(t, json.Unmarshal(body, &e), "body: %s", body)
	return e
}

// rawConn is a plain TCP connection to the proxy, for requests an
// http.Client would not send.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *testProxy) dialRaw(t *testing.T) *rawConn {
	t.Helper()
	c, err := (&net.Dialer{Timeout: waitFor}).DialContext(t.Context(), "tcp", p.addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(waitFor)))
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// do writes raw and reads one response, body included (none after an
// established CONNECT).
func (c *rawConn) do(t *testing.T, raw string) (*http.Response, string) {
	t.Helper()
	_, err := io.WriteString(c, raw)
	require.NoError(t, err)
	return c.read(t, raw)
}

func (c *rawConn) read(t *testing.T, raw string) (*http.Response, string) {
	t.Helper()
	method := "GET"
	if len(raw) >= 7 && raw[:7] == "CONNECT" {
		method = "CONNECT"
	}
	resp, err := http.ReadResponse(c.r, &http.Request{Method: method})
	require.NoError(t, err)
	if method == "CONNECT" && resp.StatusCode == http.StatusOK {
		return resp, "" // the tunnel follows
	}
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	return resp, string(body)
}

// requireRefused asserts a 403 with the exact plain-text body and that the
// Dialer reported the refusal once (the nth so far).
func requireRefused(t *testing.T, p *testProxy, resp *http.Response, body, want string, nth int) {
	t.Helper()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "body: %s", body)
	requireText(t, resp)
	require.Equal(t, want, body)
	denied := p.deniedErrs()
	require.Len(t, denied, nth, "each refusal is reported once")
	require.ErrorIs(t, denied[nth-1], tool.ErrHostNotAllowed)
}

func requireText(t *testing.T, resp *http.Response) {
	t.Helper()
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "text/plain", mt)
}

// tcpEcho is a plain TCP server that echoes what it reads and shuts its
// write side at EOF; closed records each connection's end.
type tcpEcho struct {
	ln     net.Listener
	wg     sync.WaitGroup
	closed chan error // one value per connection: how its read ended
}

func newTCPEcho(t *testing.T) *tcpEcho {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	e := &tcpEcho{ln: ln, closed: make(chan error, 16)}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				_, err := io.Copy(c, c)
				if err == nil {
					err = io.EOF
				}
				_ = c.(*net.TCPConn).CloseWrite()
				e.closed <- err
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		e.wg.Wait()
	})
	return e
}

func (e *tcpEcho) port() int { return e.ln.Addr().(*net.TCPAddr).Port }

// requireClosedByPeer reads c until it ends and requires that the peer
// closed it (EOF or reset), not the read deadline.
func requireClosedByPeer(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(waitFor)))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) {
		require.False(t, ne.Timeout(), "the connection was not closed: %v", err)
	}
}

// tlsConfigFor returns a client TLS config that trusts srv.
func tlsConfigFor(srv *httptest.Server) *tls.Config {
	c := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	c.ServerName = "example.com"
	return c
}

func itoa(n int) string { return strconv.Itoa(n) }
