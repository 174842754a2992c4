package secrets

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
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
		errs = append(errs, errors.New("VAULT_TOKEN and VAULT_ROLE_ID are both set: choose token or AppRole login"))
	case c.Token == "" && c.RoleID == "":
		errs = append(errs, errors.New("VAULT_TOKEN or VAULT_ROLE_ID (with VAULT_SECRET_ID) must be set for CAPSTAN_SECRETS_BACKEND=vault"))
	case c.RoleID != "" && c.SecretID == "":
		errs = append(errs, errors.New("VAULT_SECRET_ID must be set with VAULT_ROLE_ID"))
	}
	if c.Mount == "" {
		errs = append(errs, errors.New("CAPSTAN_VAULT_MOUNT must not be empty"))
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
		return nil, fmt.Errorf("VAULT_CACERT: %w", err)
	}
	client, err := vault.NewClient(vc)
	if err != nil {
		return nil, fmt.Errorf("VAULT_ADDR: %w", err)
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

// ensureLogin returns the current login, logging in with AppRole when there
// is none. Concurrent callers share one login.
func (v *Vault) ensureLogin(ctx context.Context) (*vault.Secret, error) {
	if s := v.current(); s != nil {
		return s, nil
	}
	v.loginMu.Lock()
	defer v.loginMu.Unlock()
	if s := v.current(); s != nil {
		return s, nil
	}
	return v.login(ctx)
}

func (v *Vault) current() *vault.Secret {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.auth
}

// dropAuth forgets the login used (nil: whatever is current), so that the
// next read logs in again; a newer login is kept, and so is a fixed token.
func (v *Vault) dropAuth(used *vault.Secret) {
	if v.cfg.RoleID == "" {
		return
	}
	v.mu.Lock()
	if used == nil || v.auth == used {
		v.auth = nil
	}
	v.mu.Unlock()
}

// login performs an AppRole login (callers hold loginMu) and installs the
// new token.
func (v *Vault) login(ctx context.Context) (*vault.Secret, error) {
	if v.cfg.RoleID == "" {
		// Token mode: the token is fixed; it is "logged in" from the start.
		return v.current(), nil
	}
	s, err := v.client.Logical().WriteWithContext(ctx, "auth/"+v.cfg.AppRoleMount+"/login", map[string]any{
		"role_id": v.cfg.RoleID, "secret_id": v.cfg.SecretID,
	})
	if err == nil && (s == nil || s.Auth == nil || s.Auth.ClientToken == "") {
		err = errors.New("vault returned no token")
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		lerr := fmt.Errorf("%w: vault AppRole login failed: %s", ErrUnavailable, loginReason(err))
		v.mu.Lock()
		v.loginErr = lerr
		v.mu.Unlock()
		return nil, lerr
	}
	v.client.SetToken(s.Auth.ClientToken)
	v.mu.Lock()
	v.auth, v.loginErr = s, nil
	v.mu.Unlock()
	v.logins.Add(1)
	v.log.InfoContext(ctx, "vault login", "method", "approle", "ttl_s", s.Auth.LeaseDuration, "renewable", s.Auth.Renewable)
	return s, nil
}

func loginReason(err error) string {
	var re *vault.ResponseError
	if errors.As(err, &re) {
		// AppRole's own messages ("invalid role or secret ID") name no secret.
		return fmt.Sprintf("Vault answered %d: %s", re.StatusCode, strings.Join(re.Errors, "; "))
	}
	return netReason(err)
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

// askRelogin drops the AppRole login that Vault refused and tells Run to
// log in again; a fixed token is kept.
func (v *Vault) askRelogin(used *vault.Secret) {
	if v.cfg.RoleID == "" {
		return
	}
	v.dropAuth(used)
	select {
	case v.relogin <- struct{}{}:
	default:
	}
}

// Run keeps the worker's Vault token alive until ctx is done: it logs in
// (AppRole, retrying with backoff and jitter), renews the token with a
// lifetime watcher, and logs in again when renewal ends or a read was
// refused. With a fixed token it renews that token while it is renewable
// and reports when renewal ends (reads then fail with ErrDenied).
func (v *Vault) Run(ctx context.Context) {
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		auth, err := v.loginForRun(ctx)
		if err != nil {
			v.log.WarnContext(ctx, "vault login failed; retrying", "error", err.Error(), "retry_in_ms", backoff.Milliseconds())
			if !sleep(ctx, jitter(backoff)) {
				return
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = 250 * time.Millisecond
		if !v.watch(ctx, auth) {
			return
		}
	}
}

func (v *Vault) loginForRun(ctx context.Context) (*vault.Secret, error) {
	v.loginMu.Lock()
	defer v.loginMu.Unlock()
	if s := v.current(); s != nil {
		return s, nil
	}
	return v.login(ctx)
}

// watch renews auth until its renewal ends or a re-login is asked for; it
// returns false when Run must stop.
func (v *Vault) watch(ctx context.Context, auth *vault.Secret) bool {
	if v.cfg.Token != "" {
		// A fixed token: learn whether it can be renewed.
		s, err := v.client.Auth().Token().LookupSelfWithContext(ctx)
		if err != nil {
			v.log.WarnContext(ctx, "vault token lookup failed", "error", v.classify(ctx, err).Error())
			return sleep(ctx, jitter(30*time.Second))
		}
		renewable, _ := s.TokenIsRenewable()
		ttl, _ := s.TokenTTL()
		if !renewable || ttl <= 0 {
			<-ctx.Done() // nothing to renew
			return false
		}
		auth = &vault.Secret{Auth: &vault.SecretAuth{ClientToken: v.cfg.Token, Renewable: true, LeaseDuration: int(ttl.Seconds())}}
	}
	if auth.Auth == nil || !auth.Auth.Renewable {
		// Not renewable: log in again shortly before it expires (a token
		// without a TTL never expires), or when a read was refused.
		var expiring <-chan time.Time
		if auth.Auth != nil && auth.Auth.LeaseDuration > 0 {
			t := time.NewTimer(time.Duration(auth.Auth.LeaseDuration) * time.Second * 9 / 10)
			defer t.Stop()
			expiring = t.C
		}
		select {
		case <-ctx.Done():
			return false
		case <-expiring:
			v.dropAuth(auth)
		case <-v.relogin:
		}
		return true
	}
	w, err := v.client.NewLifetimeWatcher(&vault.LifetimeWatcherInput{Secret: auth})
	if err != nil {
		v.log.ErrorContext(ctx, "vault token renewal cannot start", "error", err.Error())
		return sleep(ctx, jitter(30*time.Second))
	}
	go w.Start()
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-v.relogin:
			return true // Resolve already dropped the token
		case r := <-w.RenewCh():
			if r != nil && r.Secret != nil && r.Secret.Auth != nil {
				v.log.DebugContext(ctx, "vault token renewed", "ttl_s", r.Secret.Auth.LeaseDuration)
			}
		case err := <-w.DoneCh():
			if v.cfg.Token != "" {
				v.log.WarnContext(ctx, "vault token renewal ended; the fixed VAULT_TOKEN cannot be replaced", "reason", renewalReason(err))
				<-ctx.Done()
				return false
			}
			v.log.InfoContext(ctx, "vault token renewal ended; logging in again", "reason", renewalReason(err))
			v.dropAuth(auth)
			return true
		}
	}
}

func renewalReason(err error) string {
	if err == nil {
		return "maximum TTL reached"
	}
	var re *vault.ResponseError
	if errors.As(err, &re) {
		return fmt.Sprintf("Vault answered %d", re.StatusCode)
	}
	return netReason(err)
}

// jitter returns d ± 20%.
func jitter(d time.Duration) time.Duration {
	return d*8/10 + rand.N(d*4/10+1)
}

// sleep waits d or until ctx is done; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
