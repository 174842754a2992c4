// Package egress is the per-call HTTP proxy through which a confined child
// process reaches the network: the only way out of its network namespace.
// Every target is checked by a Dialer, in the worker the fetch accessor's
// own (fetch.Dialer), so a child reaches exactly what the call's tools
// could fetch.
//
// Serve speaks HTTP/1.1 to the child and supports two kinds of request:
//
//   - CONNECT host:port: the target is checked and dialled, the proxy
//     answers "HTTP/1.1 200 Connection established" and then copies bytes
//     both ways until both sides are done (a TLS tunnel, usually). The
//     scheme given to the Dialer, which decides the grant's default-port
//     rule, is "https" when the port is 443 and "http" otherwise: a pattern
//     without a port allows CONNECT to 443 and to 80, a pattern "host:8443"
//     allows CONNECT host:8443, "host:*" any port.
//   - absolute-form http:// requests (GET http://host/path HTTP/1.1): the
//     target is checked and dialled for every request, also the later ones
//     of a kept-alive connection, and the request is forwarded with
//     hop-by-hop, Proxy-*, Forwarded and X-Forwarded-* headers removed
//     (none added) and the host as matched (lower-case ASCII) in the URL
//     and Host header. The response comes back as the server sent it (no
//     decompression).
//
// A refused target gets 403 with a text/plain body: `Capstan egress: host
// "<host>" is not in personality network allow list` when the host is
// outside the grant's allow lists, else `Capstan egress: <detail>` where
// <detail> is the HOST_NOT_ALLOWED detail (deny list, private or reserved
// address, cloud metadata, invalid host). <host> is the host as the fetch
// accessor names it: lower-case ASCII, IPv6 in brackets, ":port" when the
// port is not the scheme's default. A dial that fails otherwise gets 502
// naming the target; requests that are neither of the two kinds above,
// absolute-form https:// included, and malformed requests get 400. No body
// echoes a request header, and the proxy logs nothing.
//
// Not supported: HTTP/2 or h2c to the proxy, absolute-form https:// (use
// CONNECT), protocol upgrades on absolute-form requests (the Upgrade header
// is removed; WebSockets work through CONNECT), SOCKS, proxy
// authentication, UDP.
package egress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"
)

// Dialer opens a checked TCP connection to host:port for a request of
// scheme ("http" or "https"; it decides the grant's default port). A target
// the call may not reach is refused with a *tool.DenialError of kind
// tool.ErrHostNotAllowed; any other error is a failed dial. *fetch.Dialer is
// the implementation: it also reports each denial to its onDeny, which is
// how the proxy's refusals reach the audit record.
type Dialer interface {
	Dial(ctx context.Context, scheme, host string, port int) (net.Conn, error)
}

// Defaults of Config.
const (
	// DefaultHeaderTimeout is Config.HeaderTimeout when it is 0.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultDialTimeout is Config.DialTimeout when it is 0.
	DefaultDialTimeout = 10 * time.Second
	// DefaultIdleTimeout is Config.IdleTimeout when it is 0.
	DefaultIdleTimeout = 90 * time.Second
	// maxHeaderBytes caps a request's header.
	maxHeaderBytes = 1 << 20
)

// Config configures Serve. Dialer is required; every zero duration takes its
// default.
type Config struct {
	// Dialer checks and opens every upstream connection; it is the proxy's
	// only way out. The proxy asks it exactly once per CONNECT and once per
	// absolute-form request, so a fetch.Dialer's onDeny sees each refusal
	// once; the proxy reports nothing itself.
	Dialer Dialer
	// HeaderTimeout bounds reading one request's header, from the first byte
	// of a connection or the end of the previous request. 0 means
	// DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// DialTimeout bounds one upstream dial, resolution included. 0 means
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// IdleTimeout closes a kept-alive client connection that sends no new
	// request for this long. 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
}

// Validate reports every invalid field of c, naming it.
func (c Config) Validate() error {
	var errs []error
	if c.Dialer == nil {
		errs = append(errs, errors.New("egress: Config.Dialer is required"))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"HeaderTimeout", c.HeaderTimeout}, {"DialTimeout", c.DialTimeout}, {"IdleTimeout", c.IdleTimeout}} {
		if f.d < 0 {
			errs = append(errs, fmt.Errorf("egress: Config.%s must not be negative, got %s", f.name, f.d))
		}
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	c.HeaderTimeout = cmp.Or(c.HeaderTimeout, DefaultHeaderTimeout)
	c.DialTimeout = cmp.Or(c.DialTimeout, DefaultDialTimeout)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, DefaultIdleTimeout)
	return c
}

// Serve serves proxy requests on ln until ctx ends or ln is closed, then
// closes ln, every client connection and every upstream connection it
// opened (tunnels and requests in flight included) and returns once all of
// its goroutines have ended. It returns nil after such a stop, the listener's
// error when accepting failed otherwise, and cfg.Validate's error (with ln
// closed) for an invalid cfg. Each Serve is independent: the worker runs one
// per call, on the listener the child's namespace reaches.
func Serve(ctx context.Context, ln net.Listener, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		ln.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := newProxy(cfg.withDefaults())
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: p.cfg.HeaderTimeout,
		IdleTimeout:       p.cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnState:         p.connState,
		// "OPTIONS *" is a request to the proxy itself: 400 like any other.
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     log.New(io.Discard, "", 0), // nothing about a child's requests is logged
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	srv.Protocols = &protocols

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
		cancel()       // ends dials and forwarded requests in flight
		srv.Close()    // closes ln and every client connection not hijacked
		err = <-served // after this no connection is added
	case err = <-served: // ln failed or was closed
		cancel()
		srv.Close()
	}
	p.stop() // closes tunnels, waits for handlers, dials and connections
	p.transport.CloseIdleConnections()
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return fmt.Errorf("egress: serve: %w", err)
}

// proxy is the http.Handler of one Serve.
type proxy struct {
	cfg       Config
	transport *http.Transport
	forwarder *httputil.ReverseProxy

	conns sync.WaitGroup // client connections between StateNew and StateClosed/StateHijacked

	mu       sync.Mutex
	stopped  bool
	handlers sync.WaitGroup         // handlers and dials running; Add only under mu while !stopped
	open     map[io.Closer]struct{} // hijacked client connections and tunnels' upstream connections
}

func newProxy(cfg Config) *proxy {
	p := &proxy{cfg: cfg, open: make(map[io.Closer]struct{})}
	p.transport = &http.Transport{
		Proxy:       nil, // never HTTP_PROXY and friends
		DialContext: p.dialForward,
		// Every request dials, so every request is checked (DNS included),
		// and a refused request is refused (and reported) exactly once.
		DisableKeepAlives:      true,
		DisableCompression:     true, // the response reaches the child as the server sent it
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	p.forwarder = &httputil.ReverseProxy{
		Rewrite:       rewrite,
		Transport:     p.transport,
		FlushInterval: -1, // streamed responses reach the child as they come
		ErrorHandler:  p.forwardError,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	return p
}

// connState counts client connections, so stop can wait for their
// goroutines. A hijacked connection is the CONNECT handler's from then on.
func (p *proxy) connState(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		p.conns.Add(1)
	case http.StateHijacked, http.StateClosed:
		p.conns.Done()
	}
}

// enter registers a running handler or dial; it fails once stop has begun.
func (p *proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false
	}
	p.handlers.Add(1)
	return true
}

func (p *proxy) leave() { p.handlers.Done() }

// track registers connections that stop must close. It fails, closing
// them, once stop has begun; otherwise untrack closes them and forgets them.
func (p *proxy) track(cs ...io.Closer) (untrack func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		for _, c := range cs {
			c.Close()
		}
		return nil, false
	}
	for _, c := range cs {
		p.open[c] = struct{}{}
	}
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range cs {
			c.Close()
			delete(p.open, c)
		}
	}, true
}

// stop closes every tracked connection and waits for every handler, dial
// and client connection goroutine to end. Call it after the server has
// stopped accepting.
func (p *proxy) stop() {
	p.mu.Lock()
	p.stopped = true
	for c := range p.open {
		c.Close()
	}
	p.mu.Unlock()
	p.handlers.Wait()
	p.conns.Wait()
}
