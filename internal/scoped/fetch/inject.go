package fetch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// SecretSource decides where the refs of secret headers may go and
// resolves them: what injection at egress needs, for one call's fetcher
// (Secrets) or for a long-lived connection (Injector).
type SecretSource interface {
	// CheckDestination returns nil when ref may be sent to e, or the
	// denial (SECRET_NOT_DECLARED, SECRET_DESTINATION). It resolves nothing.
	CheckDestination(ref string, e capability.Endpoint) error
	// Resolve returns the value of ref and records it for redaction.
	Resolve(ctx context.Context, ref string) (string, error)
}

// Secrets is what the fetcher needs to inject secret headers
// (tool.Request.SecretHeaders) for one call: the call's secrets grant and
// resolver. scopedsecrets.Injection implements it.
type Secrets interface {
	SecretSource
	// CheckCarried returns a SECRET_DESTINATION denial when a value the
	// call resolved appears in parts (a request's URL, header values and
	// body) and its ref is not bound to e.
	CheckCarried(e capability.Endpoint, parts ...string) error
}

// Option configures one fetcher.
type Option func(*fetcher)

// WithSecrets lets the fetcher inject the secrets of s (not nil) into
// requests that ask for it. Without it every request with SecretHeaders is
// refused with SECRET_NOT_DECLARED.
func WithSecrets(s Secrets) Option {
	return func(f *fetcher) { f.secrets = s }
}

// redactedValue replaces every injected value in the response a tool gets.
const redactedValue = "[REDACTED]"

// reservedHeaders are set by the transport itself; a secret header may not
// name them.
var reservedHeaders = []string{
	"Connection", "Content-Length", "Host", "Keep-Alive", "Proxy-Connection",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// ValidateSecretHeader checks one secret header as an operator writes it
// (a hosted MCP server's secret_headers): name must be an HTTP header name
// the transport does not set itself, and template a secret header template
// whose refs are valid (capability.ValidateSecretTemplate). The error names
// neither refs nor values.
func ValidateSecretHeader(name, template string) error {
	if err := checkSecretHeaderName(name); err != nil {
		return err
	}
	return capability.ValidateSecretTemplate(template)
}

func checkSecretHeaderName(name string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return errors.New("not a valid HTTP header name")
	}
	if slices.Contains(reservedHeaders, http.CanonicalHeaderKey(name)) {
		return errors.New("the transport sets this header itself")
	}
	return nil
}

// injection holds the secret headers of one Fetch, built before anything
// is sent. They go only to the first request's origin, and only while the
// redirect chain has not left it.
type injection struct {
	origin capability.Endpoint
	refs   []string
	header http.Header // canonical name → rendered value
	values []string    // the resolved values, longest first, for redaction
	left   atomic.Bool // the chain left origin: never inject again
}

type injectionKey struct{}

func injectionFrom(ctx context.Context) *injection {
	inj, _ := ctx.Value(injectionKey{}).(*injection)
	return inj
}

// prepare builds the secret headers of req for its first target e
// (prepareInjection with the call's secrets). It returns nil when req has
// no secret headers.
func (f *fetcher) prepare(ctx context.Context, req tool.Request, e capability.Endpoint) (*injection, error) {
	if len(req.SecretHeaders) == 0 {
		return nil, nil
	}
	return prepareInjection(ctx, f.secrets, req.SecretHeaders, req.Header, e)
}

// prepareInjection builds the secret headers (name → template) to be sent
// to e, through s (nil refuses every ref), in three passes so that nothing
// is resolved before everything is known to be allowed: the header names
// and templates (a *tool.SecretHeaderError; a name may not also be in
// header), then every ref against s.CheckDestination (the denial), then
// the values (a *tool.SecretHeaderError wrapping the resolver's error or
// tool.ErrSecretValueInvalid).
func prepareInjection(ctx context.Context, s SecretSource, secretHeaders map[string]string, header map[string][]string, e capability.Endpoint) (*injection, error) {
	names := slices.Sorted(maps.Keys(secretHeaders))
	templates := make([]capability.SecretTemplate, len(names))
	seen := make(map[string]bool, len(names))
	inj := &injection{origin: e, header: make(http.Header, len(names))}
	for i, name := range names {
		headerErr := func(err error) error { return &tool.SecretHeaderError{Header: name, Err: err} }
		if err := checkSecretHeaderName(name); err != nil {
			return nil, headerErr(err)
		}
		canon := http.CanonicalHeaderKey(name)
		if seen[canon] {
			return nil, headerErr(errors.New("set twice (header names are case-insensitive)"))
		}
		seen[canon] = true
		for k := range header {
			if http.CanonicalHeaderKey(k) == canon {
				return nil, headerErr(errors.New("also set in Request.Header"))
			}
		}
		t, err := capability.ParseSecretTemplate(secretHeaders[name])
		if err != nil {
			return nil, headerErr(err)
		}
		templates[i] = t
		for _, ref := range t.Refs() {
			if !slices.Contains(inj.refs, ref) {
				inj.refs = append(inj.refs, ref)
			}
		}
	}
	if err := checkDestinations(s, inj.refs, e); err != nil {
		return nil, err
	}
	values := make(map[string]string, len(inj.refs))
	for i, name := range names {
		v, err := templates[i].Render(func(ref string) (string, error) {
			if v, ok := values[ref]; ok {
				return v, nil
			}
			v, err := s.Resolve(ctx, ref)
			if err != nil {
				return "", err
			}
			values[ref] = v
			return v, nil
		})
		if err != nil {
			if _, denied := tool.DenialCode(err); denied {
				return nil, err
			}
			return nil, &tool.SecretHeaderError{Header: name, Err: err}
		}
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, &tool.SecretHeaderError{Header: name, Err: tool.ErrSecretValueInvalid}
		}
		inj.header.Set(name, v)
	}
	for _, v := range values {
		if v != "" {
			inj.values = append(inj.values, v)
		}
	}
	slices.SortFunc(inj.values, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	return inj, nil
}

// checkDestinations checks through s that every ref may be sent to e; a
// nil s allows none.
func checkDestinations(s SecretSource, refs []string, e capability.Endpoint) error {
	if s == nil {
		return tool.Deny(tool.ErrSecretNotDeclared, "requested secret is not permitted for this tool")
	}
	for _, ref := range refs {
		if err := s.CheckDestination(ref, e); err != nil {
			return err
		}
	}
	return nil
}

// bodyKey carries the request body of one Fetch to the transport, for
// checkCarried on every hop that resends it.
type bodyKey struct{}

// checkCarried refuses a request to e whose URL, header values (the
// caller's, not the injected ones) or body hold a secret value the call
// resolved, when the secret's ref is not bound to e: a tool that read a
// value raw (secrets_raw) is held to the same destinations as injection.
func (f *fetcher) checkCarried(req *http.Request, e capability.Endpoint) error {
	if f.secrets == nil {
		return nil
	}
	parts := []string{req.URL.String(), req.URL.Path}
	if q, err := url.QueryUnescape(req.URL.RawQuery); err == nil {
		parts = append(parts, q)
	}
	for _, vs := range req.Header {
		parts = append(parts, vs...)
	}
	if body, _ := req.Context().Value(bodyKey{}).([]byte); len(body) > 0 && req.Body != nil && req.Body != http.NoBody {
		parts = append(parts, string(body))
	}
	return f.secrets.CheckCarried(e, parts...)
}

// headerFor returns the header to send to e: h itself, or a copy with the
// call's injected secrets when e is the injection's origin and the chain
// never left it (injection.headerFor).
func (f *fetcher) headerFor(ctx context.Context, h http.Header, e capability.Endpoint) (http.Header, error) {
	inj := injectionFrom(ctx)
	return inj.headerFor(f.secrets, h, e, inj != nil && inj.left.Load())
}

// headerFor is the per-hop check of injection, shared by the fetcher and
// Injector: it returns h itself when inj is nil, when the redirect chain
// of the request has left the origin (left) or when e is not the origin;
// otherwise it checks every ref's destination again through s, where the
// request is sent, and returns a copy of h with the secret headers.
func (inj *injection) headerFor(s SecretSource, h http.Header, e capability.Endpoint, left bool) (http.Header, error) {
	if inj == nil || left || e != inj.origin {
		return h, nil
	}
	if err := checkDestinations(s, inj.refs, e); err != nil {
		return nil, err
	}
	out := h.Clone()
	if out == nil {
		out = make(http.Header, len(inj.header))
	}
	for k, v := range inj.header {
		out[k] = slices.Clone(v)
	}
	return out, nil
}

// redact replaces every injected value in what the tool gets back: the
// body, the header values and the final URL. The worker redacts every
// resolved secret again (encoded forms included) from what leaves it.
func (inj *injection) redact(resp *tool.Response) {
	if inj == nil || len(inj.values) == 0 {
		return
	}
	for _, v := range inj.values {
		resp.Body = bytes.ReplaceAll(resp.Body, []byte(v), []byte(redactedValue))
		resp.FinalURL = strings.ReplaceAll(resp.FinalURL, v, redactedValue)
		for _, vs := range resp.Header {
			for i := range vs {
				vs[i] = strings.ReplaceAll(vs[i], v, redactedValue)
			}
		}
	}
}
