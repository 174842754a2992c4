package mcphost

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/tool"
)

// A url server's secret_headers are injected at egress by the fetch
// accessor's machinery (fetch.Injector): parsed as any secret header
// template, resolved once per connection through serverSecrets, and added
// by the transport only to requests for the host of the definition's URL
// (scheme, host and port), never to a redirect hop elsewhere. The
// connection is shared by every personality and opened with no call
// behind it, so the definition is what binds its secrets to that host; a
// call is refused unless the calling personality's secrets.send_to binds
// them there too (Definition.CheckSendTo).

// endpoint returns the endpoint of a url server's URL, as the fetch
// accessor and the send_to matcher read it.
func (d *Definition) endpoint() (capability.Endpoint, error) {
	scheme, host, port, err := capability.CheckURL(d.URL)
	if err != nil {
		return capability.Endpoint{}, err
	}
	return capability.ParseEndpoint(scheme, host, port)
}

// headerRefs returns the refs of the placeholders of secret_headers, sorted
// and unique (a template that does not parse has none: Parse refused it).
func (d *Definition) headerRefs() []string {
	var refs []string
	for _, tmpl := range d.SecretHeaders {
		if t, err := capability.ParseSecretTemplate(tmpl); err == nil {
			refs = append(refs, t.Refs()...)
		}
	}
	slices.Sort(refs)
	return slices.Compact(refs)
}

// CheckSendTo returns nil when a call whose secrets grant is g may use the
// server: a stdio server, a url server without secret_headers, or one each
// of whose secret_headers refs g lets go to the host of the URL
// (capability.RefGrant.CheckDestination, the check of the fetch accessor:
// the ref is declared and the personality's secrets.send_to binds it to
// that host). Otherwise it returns the first refusal, such as
// "SECRET_DESTINATION: this secret may not be sent to <host>"; a nil g
// refuses every ref (SECRET_NOT_DECLARED).
func (d *Definition) CheckSendTo(g *capability.RefGrant) error {
	refs := d.headerRefs()
	if d.Stdio() || len(refs) == 0 {
		return nil
	}
	e, err := d.endpoint()
	if err != nil {
		return tool.Deny(tool.ErrHostNotAllowed, "invalid URL: "+err.Error())
	}
	for _, ref := range refs {
		if err := g.CheckDestination(ref, e); err != nil {
			return err
		}
	}
	return nil
}

// CheckSendTo is Definition.CheckSendTo for the server of toolName
// (mcp__<server>__<tool>); nil for a name of no hosted server.
func (h *Host) CheckSendTo(toolName string, g *capability.RefGrant) error {
	name, ok := tool.MCPServer(toolName)
	if !ok {
		return nil
	}
	s, ok := h.byName[name]
	if !ok {
		return nil
	}
	return s.def.CheckSendTo(g)
}

// serverSecrets is the fetch.SecretSource of a url server's connection:
// the refs its capabilities.secrets declare, bound to the host of its URL
// only, resolved from the worker's backend.
type serverSecrets struct {
	grant   *capability.RefGrant
	backend secrets.Backend
}

// newServerSecrets binds the declared refs of d to the host of e.
func newServerSecrets(d *Definition, e capability.Endpoint, b secrets.Backend) (serverSecrets, error) {
	sendTo := make(map[string][]string, len(d.Secrets))
	for _, p := range d.Secrets {
		sendTo[p] = []string{e.String()}
	}
	dest, err := capability.NewSecretDestinations(sendTo)
	if err != nil {
		return serverSecrets{}, err
	}
	return serverSecrets{grant: &capability.RefGrant{Declared: d.Secrets, Destinations: dest}, backend: b}, nil
}

func (s serverSecrets) CheckDestination(ref string, e capability.Endpoint) error {
	return s.grant.CheckDestination(ref, e)
}

func (s serverSecrets) Resolve(ctx context.Context, ref string) (string, error) {
	if err := s.grant.Check(ref); err != nil {
		return "", err
	}
	return resolveSecret(ctx, s.backend, ref)
}

var _ fetch.SecretSource = serverSecrets{}

// injector resolves the secret_headers of a url server whose URL is e, for
// its connection. Its errors name the header, never a ref or a value:
// "secret_headers.<name>: secret not found", say.
func (d *Definition) injector(ctx context.Context, e capability.Endpoint, b secrets.Backend) (*fetch.Injector, error) {
	if len(d.SecretHeaders) == 0 {
		return nil, nil
	}
	src, err := newServerSecrets(d, e, b)
	if err != nil {
		return nil, err
	}
	inj, err := fetch.NewInjector(ctx, src, d.SecretHeaders, e)
	var she *tool.SecretHeaderError
	if errors.As(err, &she) {
		return nil, fmt.Errorf("secret_headers.%s: %w", she.Header, she.Err)
	}
	return inj, err
}

// errNoSecretsBackend is the start failure of a server whose definition
// uses secrets on a worker without a secrets backend.
var errNoSecretsBackend = errors.New("no secrets backend is configured (CAPSTAN_SECRETS_BACKEND=none)")

// resolveSecret resolves one ref. Its error names neither the ref nor a
// value (callers name the variable or header): errNoSecretsBackend,
// secrets.ErrNotFound, or the backend's error wrapped (secrets.ErrUnavailable
// among them).
func resolveSecret(ctx context.Context, b secrets.Backend, ref string) (string, error) {
	if b == nil {
		return "", errNoSecretsBackend
	}
	v, err := b.Resolve(ctx, ref)
	switch {
	case errors.Is(err, secrets.ErrNotFound):
		return "", secrets.ErrNotFound
	case err != nil:
		return "", fmt.Errorf("resolve secret: %w", err)
	}
	return v, nil
}
