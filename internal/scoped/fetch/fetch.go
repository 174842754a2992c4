// Package fetch is the scoped HTTP accessor: a tool.Fetcher that reaches
// exactly the hosts of one call's resolved capability.NetworkGrant and
// nothing else.
//
// A request passes four gates, each returning a *tool.DenialError of kind
// tool.ErrHostNotAllowed whose detail the spec fixes (capabilities.md,
// "Scoped accessors and their errors"):
//
//  1. the URL: http or https only, no user info, well formed
//     (capability.CheckURL);
//  2. the host: the grant's allow and deny lists (NetworkGrant.CheckEndpoint),
//     for the first request and again for every redirect hop, at most 4
//     redirects; once a redirect leaves the first request's origin (scheme,
//     host, port) the caller's credential headers are dropped for the rest
//     of the chain (see sensitiveHeader for the rule) and the client's
//     automatic Referer is never sent;
//  3. the connection (Dialer, also used on its own by the egress proxy of
//     child processes): every dial resolves the name itself, refuses the
//     connection when any address is private or reserved (unless the grant
//     has AllowPrivateURLs) or a cloud-metadata address (always), and then
//     dials the checked address, so DNS rebinding cannot slip through; the
//     dialer's control hook applies the same policy to the socket address
//     before it connects. Private and reserved are decided by the
//     code.dny.dev/ssrf guard (IANA special-purpose registries); the
//     cloud-metadata set is this package's (see guard.go);
//  4. the response: the body is cut at Config.MaxBodyBytes.
//
// Secrets are injected at egress (tool.Request.SecretHeaders, WithSecrets;
// see inject.go). Before anything is sent, every ref of every template must
// be allowed by the call's secrets grant (SECRET_NOT_DECLARED) and bound by
// the personality's secrets.send_to to the first request's host
// (SECRET_DESTINATION: this secret may not be sent to <host>); only then
// are the values resolved. The headers are added where each request is
// sent (the transport), never to the http.Request the client keeps, and
// only to requests for the first request's origin (scheme, host and port)
// while the redirect chain has not left it: a redirect to another host, to
// another port or from https to http (or back) drops them for the rest of
// the chain, even when it comes back to the first origin or reaches
// another host the secret is bound to (a redirect chain that left the
// origin is steered by someone else, who must not get to choose an
// authenticated request). Every injected value is replaced by [REDACTED] in
// the response the tool gets. A secret value the call resolved (a tool
// that read it raw, under secrets_raw) found literally in the URL, a
// header or the body of any request is held to the same bindings
// (checkCarried), so the tool cannot send it elsewhere through the fetcher.
//
// No proxy from the environment is used, and keep-alives are off so that
// every request of a call goes through the dial-time check.
package fetch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// Defaults of Config.
const (
	// DefaultMaxBodyBytes is the response body cap when Config.MaxBodyBytes is 0.
	DefaultMaxBodyBytes int64 = 10 << 20
	// DefaultTimeout is the per-request limit when Config.Timeout is 0.
	DefaultTimeout = 30 * time.Second
)

// Config tunes a fetcher. The zero value is usable: every zero field takes
// its default.
type Config struct {
	// MaxBodyBytes caps the response body; the body is cut there and
	// Response.Truncated set. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Timeout bounds one Fetch, redirects and body read included, and one
	// Dialer.Dial. 0 means DefaultTimeout.
	Timeout time.Duration
	// LookupIP resolves a host name for the dial-time check; the connection
	// goes to one of the addresses it returns, after all of them passed the
	// check. It exists so tests can map names to loopback; nil means
	// net.DefaultResolver.LookupNetIP(ctx, "ip", host).
	LookupIP func(ctx context.Context, host string) ([]netip.Addr, error)
	// WrapTransport, when set, wraps the transport that dials, inside the
	// grant checks: it sees only admitted requests, one per redirect hop
	// (the worker's tracing middleware).
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// Validate reports every invalid field of c, naming it. A worker should call
// it at start-up: New panics on an invalid Config.
func (c Config) Validate() error {
	var errs []error
	if c.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("fetch: Config.MaxBodyBytes must not be negative, got %d", c.MaxBodyBytes))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("fetch: Config.Timeout must not be negative, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	if c.LookupIP == nil {
		c.LookupIP = lookupIP
	}
	return c
}

func lookupIP(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// fetcher is the tool.Fetcher returned by New.
type fetcher struct {
	grant     *capability.NetworkGrant // nil allows nothing
	secrets   Secrets                  // nil: no secret headers
	cfg       Config
	onDeny    func(error)
	dialer    *Dialer // reports nothing: Fetch reports its denials itself
	transport *http.Transport
	client    *http.Client
}

// New returns a tool.Fetcher that allows exactly the grant g (nil allows
// nothing). cfg is copied and defaulted; New panics when cfg.Validate fails,
// which is a programmer error. onDeny, when not nil, is called once with
// every denial Fetch returns, for the audit record; it must not block.
// WithSecrets lets it inject the call's secrets.
func New(g *capability.NetworkGrant, cfg Config, onDeny func(error), opts ...Option) tool.Fetcher {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	f := &fetcher{grant: g, cfg: cfg.withDefaults(), onDeny: onDeny, dialer: NewDialer(g, cfg, nil)}
	for _, o := range opts {
		o(f)
	}
	f.transport = &http.Transport{
		Proxy:                  nil, // never HTTP_PROXY and friends
		DialContext:            f.dialContext,
		ForceAttemptHTTP2:      true,
		DisableKeepAlives:      true, // every request dials, so every connection is checked
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
	var next http.RoundTripper = f.transport
	if f.cfg.WrapTransport != nil {
		next = f.cfg.WrapTransport(next)
	}
	f.client = &http.Client{
		Transport:     checkedTransport{f: f, next: next},
		CheckRedirect: f.checkRedirect,
	}
	return f
}

// Fetch performs req under the grant. A refusal is a *tool.DenialError of
// kind tool.ErrHostNotAllowed, returned as is (its message is
// "HOST_NOT_ALLOWED: <detail>") and reported to onDeny; so are the secret
// refusals (tool.ErrSecretNotDeclared, tool.ErrSecretDestination). A secret
// header that cannot be built is a *tool.SecretHeaderError. Any other failure
// (connection refused, timeout, cancellation) is wrapped with the method and
// the origin of the failing request, never with headers, bodies, paths or
// queries.
func (f *fetcher) Fetch(ctx context.Context, req tool.Request) (*tool.Response, error) {
	resp, err := f.fetch(ctx, req)
	if err == nil {
		return resp, nil
	}
	var d *tool.DenialError
	if errors.As(err, &d) {
		if f.onDeny != nil {
			f.onDeny(d)
		}
		return nil, d
	}
	return nil, err
}

func (f *fetcher) fetch(ctx context.Context, req tool.Request) (*tool.Response, error) {
	// CheckURL on the caller's string first, for its exact parse reasons.
	if _, _, _, err := capability.CheckURL(req.URL); err != nil {
		return nil, err
	}
	method := cmp.Or(req.Method, http.MethodGet)
	timedOut := &timeoutError{f.cfg.Timeout}
	ctx, cancel := context.WithTimeoutCause(ctx, f.cfg.Timeout, timedOut)
	defer cancel()

	var body io.Reader
	if req.Body != nil {
		body = bytes.NewReader(req.Body)
	}
	hreq, err := http.NewRequestWithContext(ctx, method, req.URL, body)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", safeMethod(method), unwrapURLError(err))
	}
	first, err := f.admit(hreq.URL)
	if err != nil {
		return nil, err
	}
	inj, err := f.prepare(ctx, req, first)
	if err != nil {
		return nil, err
	}
	if inj != nil || (f.secrets != nil && len(req.Body) > 0) {
		rctx := ctx
		if inj != nil {
			rctx = context.WithValue(rctx, injectionKey{}, inj)
		}
		if f.secrets != nil && len(req.Body) > 0 {
			rctx = context.WithValue(rctx, bodyKey{}, req.Body)
		}
		hreq = hreq.WithContext(rctx)
	}
	for k, vs := range req.Header {
		for _, v := range vs {
			hreq.Header.Add(k, v) // canonical keys, so redirect checks see every spelling
		}
	}

	resp, err := f.client.Do(hreq)
	if err != nil {
		return nil, wrapError(ctx, timedOut, method, hreq.URL, err)
	}
	defer resp.Body.Close()
	data, truncated, err := readCapped(resp.Body, f.cfg.MaxBodyBytes)
	if err != nil {
		return nil, wrapError(ctx, timedOut, method, resp.Request.URL, fmt.Errorf("read body: %w", err))
	}
	out := &tool.Response{
		StatusCode: resp.StatusCode,
		Status:     resp.Status,
		Header:     map[string][]string(resp.Header),
		Body:       data,
		Truncated:  truncated,
		FinalURL:   resp.Request.URL.String(),
	}
	inj.redact(out)
	return out, nil
}

// readCapped reads at most limit bytes of r and reports whether more followed.
func readCapped(r io.Reader, limit int64) ([]byte, bool, error) {
	n := limit
	if n < math.MaxInt64 {
		n++
	}
	data, err := io.ReadAll(io.LimitReader(r, n))
	if int64(len(data)) > limit {
		return data[:limit], true, nil
	}
	return data, false, err
}

// wrapError turns a non-denial failure into "fetch <METHOD> <origin>: ...".
// The origin is the one of the request that failed (a redirect hop's, when a
// hop failed); the path and query are left out, they may carry credentials.
func wrapError(ctx context.Context, timedOut error, method string, fallback *url.URL, err error) error {
	target := origin(fallback)
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
			target = origin(u)
		}
		err = ue.Err
	}
	if context.Cause(ctx) == timedOut && !errors.Is(err, timedOut) {
		return fmt.Errorf("fetch %s %s: %w: %w", safeMethod(method), target, timedOut, err)
	}
	return fmt.Errorf("fetch %s %s: %w", safeMethod(method), target, err)
}

// timeoutError is the cause of a Fetch that ran out of Config.Timeout; it
// matches context.DeadlineExceeded.
type timeoutError struct{ d time.Duration }

func (e *timeoutError) Error() string        { return "timed out after " + e.d.String() }
func (e *timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }
func (e *timeoutError) Timeout() bool        { return true }

// unwrapURLError drops the *url.Error layer, whose message repeats the URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func origin(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// safeMethod quotes a method that is not a plain token, so an error never
// carries caller text verbatim.
func safeMethod(m string) string {
	for _, c := range m {
		if c < '!' || c > '~' {
			return fmt.Sprintf("%q", m)
		}
	}
	return m
}
