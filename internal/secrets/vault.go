package secrets

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vault "github.com/hashicorp/vault/api"
)

// Defaults of VaultConfig.
const (
	DefaultVaultAddr         = "https://127.0.0.1:8200"
	DefaultVaultMount        = "secret"
	DefaultVaultPrefix       = "capstan"
	DefaultVaultAppRoleMount = "approle"
	DefaultVaultTimeout      = 10 * time.Second
)

// ErrDenied reports that the backend refused the worker's own credentials
// (Vault answered 403: a revoked or too narrow policy, or a token that
// expired and cannot be renewed). It is a verdict on the worker's
// configuration, not on the ref, and its message names neither a ref nor a
// value.
var ErrDenied = errors.New("secrets backend denied access")

// VaultConfig configures the Vault backend. It is built from explicit values
// (the worker binary reads VAULT_ADDR, VAULT_TOKEN, VAULT_ROLE_ID,
// VAULT_SECRET_ID, VAULT_CACERT, VAULT_NAMESPACE, CAPSTAN_VAULT_MOUNT and
// CAPSTAN_VAULT_PREFIX); the Vault client library's own environment
// variables (VAULT_SKIP_VERIFY, VAULT_HEADERS, VAULT_AGENT_ADDR, ...) are
// never consulted, so TLS verification cannot be turned off from the
// environment.
type VaultConfig struct {
	// Addr is Vault's address; default DefaultVaultAddr.
	Addr string
	// Token authenticates with a token. Exactly one of Token and RoleID
	// must be set.
	Token string
	// RoleID and SecretID log in with AppRole at AppRoleMount.
	RoleID, SecretID string
	// AppRoleMount is the AppRole auth mount; default "approle".
	AppRoleMount string
	// CACert is a PEM file of CA certificates that verify Vault's TLS
	// certificate; empty uses the system roots. Verification is always on.
	CACert string
	// Namespace is the Vault Enterprise namespace; empty for none.
	Namespace string
	// Mount is the KV v2 mount; default "secret".
	Mount string
	// Prefix is prepended to every ref's path; default "capstan". Set it to
	// "-" for no prefix (then a ref needs at least two segments).
	Prefix string
	// Timeout bounds one request to Vault, retries included; default 10s.
	Timeout time.Duration
	// Logger receives login and renewal events (never a token or a
	// value); default slog.Default().
	Logger *slog.Logger
}

func (c VaultConfig) withDefaults() VaultConfig {
	c.Addr = cmp.Or(c.Addr, DefaultVaultAddr)
	c.AppRoleMount = strings.Trim(cmp.Or(c.AppRoleMount, DefaultVaultAppRoleMount), "/")
	c.Mount = strings.Trim(cmp.Or(c.Mount, DefaultVaultMount), "/")
	c.Prefix = strings.Trim(cmp.Or(c.Prefix, DefaultVaultPrefix), "/")
	if c.Prefix == "-" {
		c.Prefix = ""
	}
	c.Timeout = cmp.Or(c.Timeout, DefaultVaultTimeout)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c VaultConfig) validate() error {
	var errs []error
	switch {
	case c.Token != "" && c.RoleID != "":
		errs = append(errs, errors.New("VaultConfig.Token and VaultConfig.RoleID are both set: choose token or AppRole login"))
	case c.Token == "" && c.RoleID == "":
		errs = append(errs, errors.New("VaultConfig.Token or VaultConfig.RoleID (with VaultConfig.SecretID) must be set"))
	case c.RoleID != "" && c.SecretID == "":
		errs = append(errs, errors.New("VaultConfig.SecretID must be set with VaultConfig.RoleID"))
	}
	if c.Mount == "" {
		errs = append(errs, errors.New("VaultConfig.Mount must not be empty"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("vault timeout must not be negative, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}

// Vault is a Backend that reads KV v2 secrets: ref "a/b/c" is field "c" of
// the secret at "<mount>/data/<prefix>/a/b". It logs in with a token or with
// AppRole, keeps the token renewed while Run runs and logs in again when
// renewal ends (AppRole). It is safe for concurrent use.
//
// Errors: a missing path, a missing field, a deleted or destroyed version and
// an empty or non-string value are ErrNotFound; Vault unreachable, sealed or
// an AppRole login failing are ErrUnavailable (the worker hands the call
// back); a 403 after a fresh login is ErrDenied. No error names a ref, a path
// or a value.
type Vault struct {
	cfg    VaultConfig
	client *vault.Client
	log    *slog.Logger

	loginMu  sync.Mutex // one login at a time
	mu       sync.Mutex
	auth     *vault.Secret // the current login, nil before one (AppRole) or after renewal ended
	loginErr error         // the last login failure, cleared by a success
	relogin  chan struct{} // poked when a read saw 403, so Run renews its watcher

	logins atomic.Uint64
}

var _ Backend = (*Vault)(nil)

// NewVault returns a Vault backend for cfg. It makes no request: a Vault that
// is down at start makes calls wait for it (handed back) and /readyz red,
// not the worker fail. Invalid configuration is an error naming the variable.
func NewVault(cfg VaultConfig) (*Vault, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	vc := &vault.Config{
		Address: cfg.Addr,
		HttpClient: &http.Client{
			Transport: tr,
			// The Vault client follows Vault's own redirects itself.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		Timeout:      cfg.Timeout,
		MaxRetries:   1,
		MinRetryWait: 100 * time.Millisecond,
		MaxRetryWait: 500 * time.Millisecond,
	}
	if err := vc.ConfigureTLS(&vault.TLSConfig{CACert: cfg.CACert}); err != nil {
		return nil, fmt.Errorf("VaultConfig.CACert: %w", err)
	}
	client, err := vault.NewClient(vc)
	if err != nil {
		return nil, fmt.Errorf("VaultConfig.Addr: %w", err)
	}
	// vault.NewClient reads VAULT_TOKEN, VAULT_NAMESPACE and VAULT_HEADERS
	// from the process environment; only the explicit configuration counts.
	client.SetHeaders(http.Header{vault.RequestHeaderName: {"true"}})
	client.ClearToken()
	if cfg.Namespace != "" {
		client.SetNamespace(cfg.Namespace)
	}
	v := &Vault{cfg: cfg, client: client, log: cfg.Logger, relogin: make(chan struct{}, 1)}
	if cfg.Token != "" {
		client.SetToken(cfg.Token)
		v.auth = &vault.Secret{Auth: &vault.SecretAuth{ClientToken: cfg.Token}}
	}
	return v, nil
}

// Logins returns how many AppRole logins succeeded since the backend was made.
func (v *Vault) Logins() uint64 { return v.logins.Load() }

// Resolve reads ref from Vault (see Vault for the errors).
func (v *Vault) Resolve(ctx context.Context, ref string) (string, error) {
	path, field, ok := v.split(ref)
	if !ok {
		return "", ErrNotFound
	}
	val, used, err := v.read(ctx, path, field)
	if errors.Is(err, ErrDenied) && v.cfg.RoleID != "" {
		// The token may have been revoked or expired between renewals: log
		// in again once, and tell Run to watch the new token.
		v.log.InfoContext(ctx, "vault refused the token; logging in again")
		v.askRelogin(used)
		val, _, err = v.read(ctx, path, field)
	}
	return val, err
}

// split maps ref to its KV v2 path (below the mount's data/) and field.
func (v *Vault) split(ref string) (path, field string, ok bool) {
	segs := strings.Split(ref, "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return "", "", false
		}
	}
	field = segs[len(segs)-1]
	parts := append([]string(nil), segs[:len(segs)-1]...)
	if v.cfg.Prefix != "" {
		parts = append([]string{v.cfg.Prefix}, parts...)
	}
	if len(parts) == 0 {
		return "", "", false
	}
	return strings.Join(parts, "/"), field, true
}

// read returns the value of field of the secret at path, and the login it
// used.
func (v *Vault) read(ctx context.Context, path, field string) (string, *vault.Secret, error) {
	auth, err := v.ensureLogin(ctx)
	if err != nil {
		return "", nil, err
	}
	s, err := v.client.KVv2(v.cfg.Mount).Get(ctx, path)
	switch {
	case errors.Is(err, vault.ErrSecretNotFound):
		return "", auth, ErrNotFound
	case err != nil:
		return "", auth, v.classify(ctx, err)
	}
	raw, ok := s.Data[field]
	if !ok || raw == nil {
		return "", auth, ErrNotFound
	}
	str, ok := raw.(string)
	if !ok {
		return "", auth, fmt.Errorf("%w: the secret's field holds a %s, not a string", ErrNotFound, jsonKind(raw))
	}
	if str == "" {
		return "", auth, ErrNotFound
	}
	return str, auth, nil
}

// classify turns a Vault client error into one of the backend's kinds,
// keeping only what names no path: the status code, Vault's own error
// strings for a 403, or the network error.
func (v *Vault) classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var re *vault.ResponseError
	if errors.As(err, &re) {
		switch {
		case re.StatusCode == http.StatusForbidden:
			return fmt.Errorf("%w: Vault answered 403 permission denied (the worker's token is invalid or expired, or its policy does not allow reading this secret)", ErrDenied)
		case re.StatusCode == http.StatusServiceUnavailable:
			return fmt.Errorf("%w: Vault answered 503 (sealed or in standby)", ErrUnavailable)
		default:
			return fmt.Errorf("%w: Vault answered %d", ErrUnavailable, re.StatusCode)
		}
	}
	return fmt.Errorf("%w: %s", ErrUnavailable, netReason(err))
}

// netReason describes a transport error without the request's URL (which
// holds the secret's path).
func netReason(err error) string {
	var op *net.OpError
	if errors.As(err, &op) {
		return "vault unreachable: " + op.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "vault did not answer in time"
	}
	var tlsErr *tls.CertificateVerificationError
	if errors.As(err, &tlsErr) {
		return "vault's TLS certificate is not trusted (set VAULT_CACERT)"
	}
	return "vault request failed"
}

func jsonKind(x any) string {
	switch x.(type) {
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "list"
	default:
		return "number"
	}
}

// Health reports whether Vault answers, is unsealed, and accepts the worker's
// token (or the last AppRole login failed). Its errors name no secret.
func (v *Vault) Health(ctx context.Context) error {
	h, err := v.client.Sys().HealthWithContext(ctx)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrUnavailable, netReason(err))
	}
	if !h.Initialized || h.Sealed {
		return fmt.Errorf("%w: vault is sealed or not initialised", ErrUnavailable)
	}
	v.mu.Lock()
	lerr, auth := v.loginErr, v.auth
	v.mu.Unlock()
	if lerr != nil {
		return lerr
	}
	if auth == nil {
		return nil // no login yet; the next call logs in
	}
	if _, err := v.client.Auth().Token().LookupSelfWithContext(ctx); err != nil {
		err = v.classify(ctx, err)
		if errors.Is(err, ErrDenied) {
			v.askRelogin(auth)
		}
		return err
	}
	return nil
}
