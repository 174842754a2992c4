package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// connectEstablished is the answer to an allowed CONNECT.
const connectEstablished = "HTTP/1.1 200 Connection established\r\n\r\n"

// errStopping fails a dial that starts while Serve is stopping.
var errStopping = errors.New("egress: proxy is stopping")

// ServeHTTP handles one request of the child.
func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		w.Header().Set("Connection", "close")
		reply(w, http.StatusServiceUnavailable, "Capstan egress: the proxy is stopping")
		return
	}
	defer p.leave()
	switch {
	case r.Method == http.MethodConnect:
		p.connect(w, r)
	case r.URL.Scheme == "http" && r.URL.Host != "":
		p.forward(w, r)
	case r.URL.Scheme != "":
		reply(w, http.StatusBadRequest, "Capstan egress: only http:// URLs are proxied in absolute form; use CONNECT for https")
	default:
		reply(w, http.StatusBadRequest, "Capstan egress: send absolute-form requests (GET http://host/path) or CONNECT host:port")
	}
}

// connectScheme is the scheme a CONNECT target is checked with: "https"
// for port 443, "http" for any other port. It matters for patterns without
// a port, which allow the scheme's default port only, and for how the host
// is named in refusals.
func connectScheme(port int) string {
	if port == capability.DefaultPort("https") {
		return "https"
	}
	return "http"
}

// connect checks and dials a CONNECT target, then splices the child's
// connection to it.
func (p *proxy) connect(w http.ResponseWriter, r *http.Request) {
	host, port, err := splitAuthority(r.URL.Host, 0)
	if err != nil {
		w.Header().Set("Connection", "close")
		reply(w, http.StatusBadRequest, "Capstan egress: CONNECT needs host:port: "+err.Error())
		return
	}
	scheme := connectScheme(port)
	up, err := p.dial(r.Context(), scheme, host, port)
	if err != nil {
		// The child may have sent tunnel bytes already; they must not be
		// read as a request.
		w.Header().Set("Connection", "close")
		dialFailed(w, scheme, host, port, err)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		reply(w, http.StatusInternalServerError, "Capstan egress: cannot take over the connection")
		return
	}
	untrack, ok := p.track(conn, up)
	if !ok {
		return
	}
	defer untrack()
	// Deadlines the server set for reading the header do not apply to the
	// tunnel.
	if conn.SetDeadline(time.Time{}) != nil {
		return
	}
	if _, err := io.WriteString(conn, connectEstablished); err != nil {
		return
	}
	// Bytes the child sent right after its CONNECT header (an eager TLS
	// ClientHello) are in the server's buffer.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	splice(conn, up)
}

// splice copies bytes both ways between the child's connection and the
// upstream one until both directions are done. A side that stops sending
// (EOF) has the other side's write half shut, so half-closed exchanges
// complete; an error in either direction closes both connections.
func splice(client, up net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(client, up)
	}()
	pipe(up, client)
	<-done
}

func pipe(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	dst.Close()
}

// endpointKey carries a forwarded request's checked endpoint to rewrite
// and forwardError.
type endpointKey struct{}

// forward sends an absolute-form http:// request on through the transport,
// whose only dial is the Dialer.
func (p *proxy) forward(w http.ResponseWriter, r *http.Request) {
	if r.URL.User != nil {
		reply(w, http.StatusBadRequest, "Capstan egress: URLs with user info are not supported")
		return
	}
	host, port, err := splitAuthority(r.URL.Host, capability.DefaultPort("http"))
	if err != nil {
		reply(w, http.StatusBadRequest, "Capstan egress: invalid request target: "+err.Error())
		return
	}
	e, err := capability.ParseEndpoint("http", host, port)
	if err != nil {
		// The Dialer refuses such a host, with the fetch accessor's detail,
		// and reports it like every other refusal: let it answer.
		conn, err := p.dial(r.Context(), "http", host, port)
		if err == nil {
			conn.Close()
			reply(w, http.StatusBadRequest, "Capstan egress: invalid host")
			return
		}
		dialFailed(w, "http", host, port, err)
		return
	}
	p.forwarder.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), endpointKey{}, e)))
}

// rewrite is the forwarder's Rewrite. ReverseProxy has already removed the
// hop-by-hop headers and the Forwarded and X-Forwarded-* headers; rewrite
// points the request at the endpoint as matched (so the Host header is the
// name that was checked, not the transport's own IDNA conversion), keeps the
// query exactly as sent, and removes every Proxy-* header and any protocol
// upgrade.
func rewrite(pr *httputil.ProxyRequest) {
	e := pr.In.Context().Value(endpointKey{}).(capability.Endpoint)
	u := *pr.In.URL
	u.Scheme, u.Host, u.User = "http", e.String(), nil
	pr.Out.URL, pr.Out.Host = &u, ""
	for k := range pr.Out.Header {
		if len(k) >= len("proxy-") && strings.EqualFold(k[:len("proxy-")], "proxy-") {
			delete(pr.Out.Header, k)
		}
	}
	pr.Out.Header.Del("Upgrade")
	pr.Out.Header.Del("Connection")
}

// dialForward is the transport's DialContext: addr is the host and port
// rewrite set, always for an http:// request.
func (p *proxy) dialForward(ctx context.Context, _, addr string) (net.Conn, error) {
	if !p.enter() {
		return nil, errStopping
	}
	defer p.leave()
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &dialError{err}
	}
	port, err := parsePort(portText)
	if err != nil {
		return nil, &dialError{err}
	}
	conn, err := p.dial(ctx, "http", host, port)
	if err != nil {
		var d *tool.DenialError
		if errors.As(err, &d) {
			return nil, err
		}
		return nil, &dialError{err}
	}
	return conn, nil
}

// dialError marks a failed dial of the forwarder, to tell it from a
// failure after the connection was made.
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// forwardError is the forwarder's ErrorHandler, called before any of the
// response was written.
func (p *proxy) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	e, _ := r.Context().Value(endpointKey{}).(capability.Endpoint)
	var d *tool.DenialError
	var de *dialError
	switch {
	case errors.As(err, &d):
		refuse(w, d)
	case errors.As(err, &de):
		reply(w, http.StatusBadGateway, "Capstan egress: cannot connect to "+e.String())
	default:
		reply(w, http.StatusBadGateway, "Capstan egress: no valid response from "+e.String())
	}
}

// dial is one bounded dial through the Dialer.
func (p *proxy) dial(ctx context.Context, scheme, host string, port int) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	return p.cfg.Dialer.Dial(ctx, scheme, host, port)
}

// dialFailed answers a failed dial of scheme://host:port: 403 for a
// refusal, else 502 naming the target.
func dialFailed(w http.ResponseWriter, scheme, host string, port int, err error) {
	var d *tool.DenialError
	if errors.As(err, &d) {
		refuse(w, d)
		return
	}
	target := strconv.Quote(net.JoinHostPort(host, strconv.Itoa(port)))
	if e, perr := capability.ParseEndpoint(scheme, host, port); perr == nil {
		target = e.String()
	}
	reply(w, http.StatusBadGateway, "Capstan egress: cannot connect to "+target)
}

// refuse answers a refusal with 403 and the body the spec fixes.
func refuse(w http.ResponseWriter, d *tool.DenialError) {
	body := "Capstan egress: " + d.Detail
	if host, ok := capability.NotAllowedHost(d); ok {
		body = `Capstan egress: host "` + host + `" is not in personality network allow list`
	}
	reply(w, http.StatusForbidden, body)
}

// reply writes a plain-text response whose body is exactly body.
func reply(w http.ResponseWriter, code int, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = io.WriteString(w, body)
}
