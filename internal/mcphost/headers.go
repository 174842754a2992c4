package mcphost

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/capstanhq/capstan/internal/secrets"
)

// Interim: secret_headers are resolved here, once per connection, and set on
// every request to the server's URL by headerTransport. When the fetch
// accessor injects secrets at egress with send_to bindings (security.md
// section 4), replace templates, resolveHeaders and headerTransport by a
// request for injection, so this package never holds the values.

// templatePart is a literal text or, when ref is set, a {{ref}} placeholder.
type templatePart struct {
	text string
	ref  string
}

// parseTemplate splits a header template such as "Bearer {{providers/x/token}}"
// into literals and placeholders. A "{{" without "}}" and an empty
// placeholder are errors.
func parseTemplate(tmpl string) ([]templatePart, error) {
	var parts []templatePart
	for rest := tmpl; rest != ""; {
		i := strings.Index(rest, "{{")
		if i < 0 {
			parts = append(parts, templatePart{text: rest})
			break
		}
		if i > 0 {
			parts = append(parts, templatePart{text: rest[:i]})
		}
		end := strings.Index(rest[i:], "}}")
		if end < 0 {
			return nil, fmt.Errorf("unterminated {{ in template %q", tmpl)
		}
		ref := strings.TrimSpace(rest[i+2 : i+end])
		if ref == "" {
			return nil, fmt.Errorf("empty {{}} in template %q", tmpl)
		}
		parts = append(parts, templatePart{ref: ref})
		rest = rest[i+end+2:]
	}
	return parts, nil
}

// resolveHeaders resolves every template of h through b. It returns the
// headers and the secret values it used, for redaction. Errors name the
// header, never a ref's value.
func resolveHeaders(ctx context.Context, b secrets.Backend, h map[string]string) (http.Header, []string, error) {
	out := make(http.Header, len(h))
	var values []string
	for name, tmpl := range h {
		parts, err := parseTemplate(tmpl)
		if err != nil {
			return nil, nil, fmt.Errorf("secret_headers.%s: %w", name, err)
		}
		var v strings.Builder
		for _, p := range parts {
			if p.ref == "" {
				v.WriteString(p.text)
				continue
			}
			s, err := resolveSecret(ctx, b, p.ref)
			if err != nil {
				return nil, nil, fmt.Errorf("secret_headers.%s: %w", name, err)
			}
			values = append(values, s)
			v.WriteString(s)
		}
		out.Set(name, v.String())
	}
	return out, values, nil
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

// headerTransport sets the resolved secret headers on every request.
type headerTransport struct {
	next    http.RoundTripper
	headers http.Header
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.headers {
			r.Header[k] = v
		}
	}
	return t.next.RoundTrip(r)
}
