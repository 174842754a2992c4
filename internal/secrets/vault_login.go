package secrets

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	vault "github.com/hashicorp/vault/api"
)

// The Vault backend's login and token lifetime: AppRole login shared by
// concurrent readers, renewal with a lifetime watcher, and a new login when
// renewal ends or Vault refuses the token.

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
