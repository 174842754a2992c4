package mcphost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// errRedirect refuses every redirect of a url server: its endpoint is the
// declared URL.
var errRedirect = errors.New("MCP server URLs are not redirected")

// startHTTP connects to a url server with the streamable HTTP transport.
// Every connection is dialled by the scoped fetch dialer under the grant of
// the declared network (the allow list, the private-address and
// cloud-metadata refusals, DNS rebinding), no proxy from the environment is
// used, redirects are refused, and secret_headers are injected at egress by
// the fetch accessor's machinery (fetch.Injector), to the host of the URL
// only: a request to any other host, or following a redirect through one,
// never carries them.
func (s *server) startHTTP(_, sctx context.Context) (*conn, error) {
	d := s.def
	scheme, _, _, err := capability.CheckURL(d.URL)
	if err != nil {
		return nil, err
	}
	origin, err := d.endpoint()
	if err != nil {
		return nil, err
	}
	g, err := capability.NewNetworkGrant(d.Network, capability.NetworkPolicy{Allow: d.Network, AllowPrivateURLs: s.h.cfg.AllowPrivateURLs})
	if err != nil {
		return nil, err
	}
	c := newConn()
	inj, err := d.injector(sctx, origin, s.h.cfg.Secrets)
	if err != nil {
		return nil, err
	}
	c.values = inj.Values()
	dialer := fetch.NewDialer(g, fetch.Config{LookupIP: s.h.cfg.LookupIP}, s.onDeny)
	base := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, portText, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, err := strconv.Atoi(portText)
			if err != nil {
				return nil, fmt.Errorf("invalid port %q", portText)
			}
			return dialer.Dial(ctx, scheme, host, port)
		},
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		MaxIdleConnsPerHost: 8,
	}
	rt := inj.Transport(base)
	if s.h.cfg.WrapTransport != nil {
		rt = s.h.cfg.WrapTransport(rt)
	}
	client := &http.Client{
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return errRedirect },
	}
	session, err := s.client.Connect(sctx, &mcp.StreamableClientTransport{Endpoint: d.URL, HTTPClient: client}, nil)
	if err != nil {
		base.CloseIdleConnections()
		return nil, err
	}
	c.session = session
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = session.Wait()
		c.fail("the connection to " + d.URL + " closed")
	})
	c.stop = func() {
		_ = session.Close()
		wg.Wait()
		base.CloseIdleConnections()
	}
	return c, nil
}
