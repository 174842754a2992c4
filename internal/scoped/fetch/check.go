package fetch

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// maxRedirects is the most redirects one Fetch follows (5 requests in all).
const maxRedirects = 4

func deny(detail string) *tool.DenialError { return tool.Deny(tool.ErrHostNotAllowed, detail) }

// admit runs the checks that need no DNS on one request target: the URL
// (capability.CheckURL), the grant, and the address of an IP literal or a
// cloud-metadata name. It returns the normalised endpoint.
func (f *fetcher) admit(u *url.URL) (capability.Endpoint, error) {
	scheme, host, port, err := capability.CheckURL(u.String())
	if err != nil {
		return capability.Endpoint{}, err
	}
	e, err := capability.ParseEndpoint(scheme, host, port)
	if err != nil {
		return capability.Endpoint{}, deny("invalid URL: " + err.Error())
	}
	// The transport dials u.Hostname() and u.Port(), not the re-parsed
	// string: refuse a URL whose two readings name different targets.
	if direct, err := endpointOf(u); err != nil || direct != e {
		return capability.Endpoint{}, deny("invalid URL: ambiguous host")
	}
	if err := f.grant.CheckEndpoint(e); err != nil {
		return capability.Endpoint{}, err
	}
	return e, f.dialer.screenStatic(e)
}

// endpointOf reads the endpoint the transport will dial for u.
func endpointOf(u *url.URL) (capability.Endpoint, error) {
	port := 0
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return capability.Endpoint{}, err
		}
		port = n
	}
	return capability.ParseEndpoint(u.Scheme, u.Hostname(), port)
}

// checkRedirect is the http.Client's CheckRedirect: it limits the chain,
// checks the next hop exactly as the first request and drops the caller's
// credentials and the injected secrets once the chain has left the first
// request's origin.
func (f *fetcher) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > maxRedirects {
		return deny("too many redirects (at most " + strconv.Itoa(maxRedirects) + ")")
	}
	if _, err := f.admit(req.URL); err != nil {
		return err
	}
	first := via[0]
	if !sameOrigin(first.URL, req.URL) || !chainSameOrigin(first.URL, via) {
		for k := range req.Header {
			if sensitiveHeader(k) {
				delete(req.Header, k)
			}
		}
		// Injected secrets are never set on req (the transport adds
		// them); from here on it adds them no more.
		if inj := injectionFrom(req.Context()); inj != nil {
			inj.left.Store(true)
		}
	}
	// http.Client sets Referer to the previous URL, whose query may hold a
	// credential; keep only a Referer the caller set.
	if _, set := first.Header["Referer"]; !set {
		req.Header.Del("Referer")
	}
	return nil
}

func chainSameOrigin(first *url.URL, via []*http.Request) bool {
	for _, r := range via[1:] {
		if !sameOrigin(first, r.URL) {
			return false
		}
	}
	return true
}

// sameOrigin reports whether a and b have the same scheme, normalised host
// and port.
func sameOrigin(a, b *url.URL) bool {
	ea, erra := endpointOf(a)
	eb, errb := endpointOf(b)
	return erra == nil && errb == nil && ea == eb
}

// sensitiveParts are the substrings that mark a header name as a credential.
var sensitiveParts = []string{
	"auth", "cookie", "token", "secret", "key", "passw", "credential", "session", "signature",
}

// sensitiveHeader reports whether a request header may carry a credential
// and is therefore dropped when a redirect leaves the origin (scheme, host
// and port) of the first request. The rule, case-insensitive: the name
// contains "auth" (Authorization, Proxy-Authorization, X-Auth-Key),
// "cookie" (Cookie, Cookie2), "token" (X-Auth-Token, Private-Token),
// "secret", "key" (X-Api-Key, Api_Key, X-Goog-Api-Key,
// Ocp-Apim-Subscription-Key), "passw", "credential", "session" or
// "signature". Once dropped they stay dropped for the rest of the chain,
// even if it comes back to the first origin.
func sensitiveHeader(name string) bool {
	n := strings.ToLower(name)
	for _, p := range sensitiveParts {
		if strings.Contains(n, p) {
			return true
		}
	}
	return false
}

// checkedTransport admits every request again where the transport sees it
// (the first and each redirect hop), adds the injected secrets where they
// may go (fetcher.headerFor) and tells the dialer the scheme, so the
// dial-time details show the port exactly as the other checks do.
type checkedTransport struct {
	f    *fetcher
	next http.RoundTripper
}

type schemeKey struct{}

// RoundTrip implements http.RoundTripper.
func (t checkedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	e, err := t.f.admit(req.URL)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	if err := t.f.checkCarried(req, e); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	header, err := t.f.headerFor(req.Context(), req.Header, e)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	ctx := context.WithValue(req.Context(), schemeKey{}, e.Scheme())
	out := req.WithContext(ctx)
	out.Header = header
	resp, err := t.next.RoundTrip(canonical(out, e))
	if err != nil {
		return nil, err
	}
	// The client would fail on a Location it cannot parse with an error
	// quoting it whole (query included); refuse the hop without echoing it.
	if loc := resp.Header.Get("Location"); loc != "" && followed(resp.StatusCode) {
		if _, err := req.URL.Parse(loc); err != nil {
			resp.Body.Close()
			return nil, deny("invalid URL: the redirect location cannot be parsed")
		}
	}
	return resp, nil
}

// followed reports whether http.Client follows a response with this status
// and a Location.
func followed(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// canonical points r (a copy the transport may keep) at the endpoint as
// matched: the URL's scheme and host, and the Host header, become e's
// normalised form. Otherwise the transport would convert a non-ASCII host
// with its own IDNA profile: "allo\u00adwed.com" is matched and dialled as
// allowed.com but would be sent as Host (and TLS server name)
// xn--allowed-oka.com, a different, registrable name that a shared front
// end would serve.
func canonical(r *http.Request, e capability.Endpoint) *http.Request {
	u := *r.URL
	u.Scheme, u.Host = e.Scheme(), e.String()
	r.URL, r.Host = &u, e.String()
	return r
}

// schemeFrom returns the scheme of the request being dialled, guessing
// from the port when the context does not carry it.
func schemeFrom(ctx context.Context, port int) string {
	if s, ok := ctx.Value(schemeKey{}).(string); ok {
		return s
	}
	if port == capability.DefaultPort("https") {
		return "https"
	}
	return "http"
}
