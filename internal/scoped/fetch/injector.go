package fetch

import (
	"context"
	"net/http"
	"slices"

	"github.com/capstanhq/capstan/internal/capability"
)

// Injector injects secret headers at egress into the requests of a
// long-lived HTTP client that is not a Fetch (a hosted MCP url server's
// connection), with the fetcher's own machinery: the templates are parsed,
// checked against s for origin and resolved as for tool.Request's
// SecretHeaders (prepareInjection), and each request the transport sends
// gets them only when it goes to origin (scheme, host and port) and its
// redirect chain never left origin; the destinations are checked again
// for every such request (injection.headerFor). The values are never set
// on the client's own requests, never logged, and kept only for
// redaction (Values). The zero of *Injector (nil) injects nothing.
type Injector struct {
	s   SecretSource
	inj *injection
}

// NewInjector checks and resolves headers (name → template, as
// tool.Request.SecretHeaders) for requests to origin through s, before
// anything is sent. It returns nil when headers is empty. Errors are
// prepareInjection's: a *tool.SecretHeaderError or s's denial; none holds
// a value.
func NewInjector(ctx context.Context, s SecretSource, headers map[string]string, origin capability.Endpoint) (*Injector, error) {
	if len(headers) == 0 {
		return nil, nil
	}
	inj, err := prepareInjection(ctx, s, headers, nil, origin)
	if err != nil {
		return nil, err
	}
	return &Injector{s: s, inj: inj}, nil
}

// Values returns the resolved values, longest first, for redaction.
func (i *Injector) Values() []string {
	if i == nil {
		return nil
	}
	return slices.Clone(i.inj.values)
}

// Transport returns next with the secret headers added where they may go
// (see Injector); next itself when i is nil.
func (i *Injector) Transport(next http.RoundTripper) http.RoundTripper {
	if i == nil {
		return next
	}
	return injectingTransport{i: i, next: next}
}

type injectingTransport struct {
	i    *Injector
	next http.RoundTripper
}

// RoundTrip implements http.RoundTripper. A request whose target cannot be
// read as an endpoint is sent as it is, without the secrets.
func (t injectingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	e, err := endpointOf(req.URL)
	if err != nil {
		return t.next.RoundTrip(req)
	}
	header, err := t.i.inj.headerFor(t.i.s, req.Header, e, chainLeft(req, t.i.inj.origin))
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	// A copy: the client's request never holds the values.
	out := req.Clone(req.Context())
	out.Header = header
	return t.next.RoundTrip(out)
}

// chainLeft reports whether a request of http.Client's redirect chain
// (Request.Response is the redirect that caused it) follows a request to
// an endpoint other than origin: then, as in a Fetch, the chain left the
// origin and the secrets are never sent again, even back to it.
func chainLeft(req *http.Request, origin capability.Endpoint) bool {
	for r := req.Response; r != nil && r.Request != nil; r = r.Request.Response {
		if e, err := endpointOf(r.Request.URL); err != nil || e != origin {
			return true
		}
	}
	return false
}
