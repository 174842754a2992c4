// Package secrets is the scoped secrets accessor: it gives a tool the secret
// refs its resolved grant allows and nothing else, and remembers every value
// it handed out so the worker can redact them.
//
// It has two faces. The tool's (Accessor.Secret, tool.Secrets) returns raw
// values only of refs the tool declared under secrets_raw. The fetch
// accessor's (Injection) resolves every declared ref for injection into an
// HTTP request at egress, after the caller checked where it goes; the tool
// never gets that face.
package secrets

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/tool"
)

// ErrNoBackend is returned when the accessor was built without a backend. The
// worker refuses such calls before they run (fail closed), so a tool sees it
// only through a wiring mistake.
var ErrNoBackend = errors.New("secrets backend is not configured")

// Accessor implements tool.Secrets for one call. It is safe for concurrent use.
type Accessor struct {
	grant   *capability.RefGrant
	backend secrets.Backend
	onDeny  func(error)

	mu       sync.Mutex
	resolved []string
	seen     map[string]struct{}
	byRef    map[string]string // every ref resolved so far → its value
}

var _ tool.Secrets = (*Accessor)(nil)

// New returns the secrets accessor of one call: g is the call's resolved
// grant (nil allows nothing), b the configured backend, and onDeny, when not
// nil, is called with every denial before it is returned (for audit and
// metrics).
func New(g *capability.RefGrant, b secrets.Backend, onDeny func(error)) *Accessor {
	return &Accessor{grant: g, backend: b, onDeny: onDeny, seen: make(map[string]struct{}), byRef: make(map[string]string)}
}

// Secret returns the raw value of ref, for a tool that declared it under
// secrets_raw. Errors, none of which contains the ref or a value:
//
//   - a ref the grant does not allow (also a ref with an empty, "." or ".."
//     segment, and every ref under a nil grant): a *tool.DenialError matching
//     tool.ErrSecretNotDeclared, "SECRET_NOT_DECLARED: requested secret is not
//     permitted for this tool";
//   - a ref the grant allows for injection only (declared under secrets but
//     not secrets_raw): the same kind, "SECRET_NOT_DECLARED: requested secret
//     may only be sent by the fetch accessor; the tool must declare it under
//     secrets_raw to read its value";
//   - a ref without a value: secrets.ErrNotFound, "secret not found";
//   - any other backend error (secrets.ErrUnavailable, the context's error),
//     wrapped so errors.Is still matches it.
//
// Every value returned is remembered for Resolved.
func (a *Accessor) Secret(ctx context.Context, ref string) (string, error) {
	if err := a.grant.CheckRaw(ref); err != nil {
		if a.onDeny != nil {
			a.onDeny(err)
		}
		return "", err
	}
	return a.resolve(ctx, ref)
}

// resolve returns the value of an already checked ref and remembers it.
func (a *Accessor) resolve(ctx context.Context, ref string) (string, error) {
	if a.backend == nil {
		return "", ErrNoBackend
	}
	v, err := a.backend.Resolve(ctx, ref)
	switch {
	case errors.Is(err, secrets.ErrNotFound):
		// A fresh sentinel, never the backend's error, which might name the ref.
		return "", secrets.ErrNotFound
	case err != nil:
		return "", fmt.Errorf("resolve secret: %w", err)
	}
	a.remember(ref, v)
	return v, nil
}

func (a *Accessor) remember(ref, v string) {
	if v == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.byRef[ref] = v
	if _, ok := a.seen[v]; ok {
		return
	}
	a.seen[v] = struct{}{}
	a.resolved = append(a.resolved, v)
}

// Resolved returns every distinct non-empty value Secret has returned so far
// in this call, in the order first returned, as a new slice. The worker
// redacts them from the tool's result, errors, progress, logs and spans.
func (a *Accessor) Resolved() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.resolved...)
}

// Injection is the fetch accessor's face of an Accessor: it checks and
// resolves refs for secret headers that the fetch accessor sets at egress.
// It shares the Accessor's grant, backend and record of resolved values, so
// injected values are redacted like raw ones. It reports no denial to the
// Accessor's onDeny: the fetch accessor reports the denials it returns.
type Injection struct{ a *Accessor }

// NewInjection returns the injection face of a (nil when a is nil). It is a
// function, not a method, so that a tool holding the Accessor as a
// tool.Secrets cannot reach it.
func NewInjection(a *Accessor) *Injection {
	if a == nil {
		return nil
	}
	return &Injection{a: a}
}

// CheckDestination returns nil when the call may send ref to e: the grant
// allows ref (SECRET_NOT_DECLARED otherwise, as Secret words it) and the
// personality's secrets.send_to binds it to e ("SECRET_DESTINATION: this
// secret may not be sent to <host>" otherwise). It resolves nothing.
func (i *Injection) CheckDestination(ref string, e capability.Endpoint) error {
	return i.a.grant.CheckDestination(ref, e)
}

// Resolve returns the value of ref for injection, checking it against the
// grant again (not the destination, which the caller checks for each
// request) and remembering the value for Resolved. Its errors are Secret's.
func (i *Injection) Resolve(ctx context.Context, ref string) (string, error) {
	if err := i.a.grant.Check(ref); err != nil {
		return "", err
	}
	return i.a.resolve(ctx, ref)
}

// MinCarriedLen is the shortest resolved value CheckCarried looks for:
// shorter ones would match ordinary text by chance.
const MinCarriedLen = 8

// CheckCarried returns nil unless a value this call resolved (read raw by
// the tool, or injected), of at least MinCarriedLen bytes, appears
// literally in one of parts (the URL, header values and body of a request
// to e) while its ref is not bound to e by secrets.send_to; then it
// returns that ref's denial, "SECRET_DESTINATION: this secret may not be
// sent to <host>". It lets the fetch accessor hold a tool that declared a
// ref under secrets_raw to the same destinations as injection. Encoded
// forms of a value (base64, hex, ...) are not looked for.
func (i *Injection) CheckCarried(e capability.Endpoint, parts ...string) error {
	i.a.mu.Lock()
	defer i.a.mu.Unlock()
	for ref, v := range i.a.byRef {
		if len(v) < MinCarriedLen || !containsAny(parts, v) {
			continue
		}
		if err := i.a.grant.CheckDestination(ref, e); err != nil {
			return err
		}
	}
	return nil
}

func containsAny(parts []string, v string) bool {
	for _, p := range parts {
		if strings.Contains(p, v) {
			return true
		}
	}
	return false
}
