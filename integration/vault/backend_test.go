package vault_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/internal/secrets/secretstest"
	"github.com/hashicorp/vault/api"
	"github.com/stretchr/testify/require"
)

// newBackend returns a vault backend for tv with cfg's login, logging into
// logs.
func newBackend(t *testing.T, tv *testVault, cfg secrets.VaultConfig, logs *syncBuffer) *secrets.Vault {
	t.Helper()
	cfg.Addr = tv.front.URL()
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	v, err := secrets.NewVault(cfg)
	require.NoError(t, err)
	return v
}

// runBackground runs v.Run until the test ends.
func runBackground(t *testing.T, v *secrets.Vault) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); v.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func seededValues() []string {
	var out []string
	for _, v := range secretstest.Seed {
		out = append(out, v)
	}
	return out
}

func TestConformanceToken(t *testing.T) {
	t.Parallel()
	tv := startVault(t)
	logs := &syncBuffer{}
	secretstest.Run(t, func(t *testing.T, seed map[string]string) secrets.Backend {
		tv.seed(t, "capstan", seed)
		return newBackend(t, tv, secrets.VaultConfig{Token: tv.token(t, "1h", "capstan")}, logs)
	})
	requireNoSecret(t, logs.String(), seededValues()...)
}

func TestConformanceAppRole(t *testing.T) {
	t.Parallel()
	tv := startVault(t)
	logs := &syncBuffer{}
	secretstest.Run(t, func(t *testing.T, seed map[string]string) secrets.Backend {
		tv.seed(t, "team/agents", seed)
		roleID, secretID := tv.appRole(t, "conformance", "", "", "capstan")
		v := newBackend(t, tv, secrets.VaultConfig{RoleID: roleID, SecretID: secretID, Mount: "/secret/", Prefix: "team/agents"}, logs)
		runBackground(t, v)
		return v
	})
	requireNoSecret(t, logs.String(), seededValues()...)
	requireNoSecret(t, logs.String(), "hvs.") // no token either
}

func TestConformanceNoPrefix(t *testing.T) {
	t.Parallel()
	tv := startVault(t)
	seed := map[string]string{"providers/github/token": "no-prefix-value"}
	tv.seed(t, "", seed)
	v := newBackend(t, tv, secrets.VaultConfig{Token: tv.token(t, "1h", "capstan"), Prefix: "-"}, &syncBuffer{})
	got, err := v.Resolve(t.Context(), "providers/github/token")
	require.NoError(t, err)
	require.Equal(t, "no-prefix-value", got)
	_, err = v.Resolve(t.Context(), "single")
	require.ErrorIs(t, err, secrets.ErrNotFound, "without a prefix a one-segment ref has no path")
}

func TestDeletedAndOddSecrets(t *testing.T) {
	t.Parallel()
	tv := startVault(t)
	v := newBackend(t, tv, secrets.VaultConfig{Token: tv.token(t, "1h", "capstan")}, &syncBuffer{})
	ctx := t.Context()
	kv := tv.root.KVv2("secret")

	tv.put(t, "capstan/svc", map[string]any{"key": "v1-value"})
	got, err := v.Resolve(ctx, "svc/key")
	require.NoError(t, err)
	require.Equal(t, "v1-value", got)

	tv.put(t, "capstan/svc", map[string]any{"key": "v2-value"})
	got, err = v.Resolve(ctx, "svc/key")
	require.NoError(t, err)
	require.Equal(t, "v2-value", got, "the latest version is read")

	// A soft-deleted latest version is gone, not an empty value.
	require.NoError(t, kv.Delete(ctx, "capstan/svc"))
	got, err = v.Resolve(ctx, "svc/key")
	require.ErrorIs(t, err, secrets.ErrNotFound)
	require.Empty(t, got)

	require.NoError(t, kv.Undelete(ctx, "capstan/svc", []int{2}))
	got, err = v.Resolve(ctx, "svc/key")
	require.NoError(t, err)
	require.Equal(t, "v2-value", got, "undeleted, it is back")

	require.NoError(t, kv.Destroy(ctx, "capstan/svc", []int{2}))
	_, err = v.Resolve(ctx, "svc/key")
	require.ErrorIs(t, err, secrets.ErrNotFound, "a destroyed version is not found")

	tv.put(t, "capstan/svc", map[string]any{"key": "v3-value"})
	require.NoError(t, kv.DeleteMetadata(ctx, "capstan/svc"))
	_, err = v.Resolve(ctx, "svc/key")
	require.ErrorIs(t, err, secrets.ErrNotFound, "a secret whose metadata is deleted is not found")

	tv.put(t, "capstan/odd", map[string]any{"number": 42, "flag": true, "nested": map[string]any{"a": "b"}, "empty": ""})
	for field, kind := range map[string]string{"number": "number", "flag": "boolean", "nested": "object"} {
		_, err = v.Resolve(ctx, "odd/"+field)
		require.ErrorIs(t, err, secrets.ErrNotFound, field)
		require.EqualError(t, err, fmt.Sprintf("secret not found: the secret's field holds a %s, not a string", kind))
	}
	_, err = v.Resolve(ctx, "odd/empty")
	require.ErrorIs(t, err, secrets.ErrNotFound, "an empty field is not a secret")
}

func TestAppRoleRenewsThenLogsInAgain(t *testing.T) {
	t.Parallel()
	tv := startVault(t)
	tv.put(t, "capstan/renew", map[string]any{"token": "renewal-secret-value"})
	// Tokens live 2s and can be renewed up to 6s after login.
	roleID, secretID := tv.appRole(t, "short", "2s", "6s", "capstan")
	logs := &syncBuffer{}
	v := newBackend(t, tv, secrets.VaultConfig{RoleID: roleID, SecretID: secretID}, logs)
	runBackground(t, v)

	// Read continuously: every read must succeed while the watcher renews
	// the token and, when its max TTL ends, Run logs in again.
	deadline := time.Now().Add(45 * time.Second)
	reads := 0
	for v.Logins() < 2 || tv.front.Count("PUT", "/v1/auth/token/renew-self") < 1 {
		require.False(t, time.Now().After(deadline), "no renewal and re-login within 45s (logins %d, renewals %d)",
			v.Logins(), tv.front.Count("PUT", "/v1/auth/token/renew-self"))
		got, err := v.Resolve(t.Context(), "renew/token")
		require.NoError(t, err, "read %d", reads)
		require.Equal(t, "renewal-secret-value", got)
		reads++
		time.Sleep(100 * time.Millisecond)
	}
	require.GreaterOrEqual(t, tv.front.Count("PUT", "/v1/auth/token/renew-self"), 1, "the token was renewed")
	require.GreaterOrEqual(t, v.Logins(), uint64(2), "a new login after renewal ended")
	require.Less(t, int(v.Logins()), reads, "reads reuse the token; they do not log in each time")
	// Whichever sees the end first logs in again: the watcher when renewal
	// ends, or a read that finds the token expired.
	relogged := strings.Contains(logs.String(), "vault token renewal ended; logging in again") ||
		strings.Contains(logs.String(), "vault refused the token; logging in again")
	require.True(t, relogged, "the new login says why:\n%s", logs.String())
	requireNoSecret(t, logs.String(), "renewal-secret-value", secretID)
}

func TestExpiredTokenLogsInAgainWithoutRun(t *testing.T) {
	t.Parallel()
	tv := startVault(t)
	tv.put(t, "capstan/exp", map[string]any{"token": "expiry-secret-value"})
	// Not renewable past 1s: the token expires between reads.
	roleID, secretID := tv.appRole(t, "expiring", "1s", "1s", "capstan")
	v := newBackend(t, tv, secrets.VaultConfig{RoleID: roleID, SecretID: secretID}, &syncBuffer{})

	eventually(t, 30*time.Second, func() error {
		got, err := v.Resolve(t.Context(), "exp/token")
		require.NoError(t, err, "an expired token is replaced by a fresh login inside the read")
		require.Equal(t, "expiry-secret-value", got)
		if v.Logins() < 2 {
			return errNotYet
		}
		return nil
	})
}

func TestRevokedPolicyIsAClearError(t *testing.T) {
	t.Parallel()
	tv := startVault(t)
	tv.put(t, "capstan/rev", map[string]any{"token": "revoked-secret-value"})
	require.NoError(t, tv.root.Sys().PutPolicy("revocable", `path "secret/data/capstan/*" { capabilities = ["read"] }`))
	const want = "secrets backend denied access: Vault answered 403 permission denied (the worker's token is invalid or expired, or its policy does not allow reading this secret)"

	t.Run("token", func(t *testing.T) {
		v := newBackend(t, tv, secrets.VaultConfig{Token: tv.token(t, "1h", "revocable")}, &syncBuffer{})
		_, err := v.Resolve(t.Context(), "rev/token")
		require.NoError(t, err)
		require.NoError(t, tv.root.Sys().PutPolicy("revocable", `path "secret/data/elsewhere/*" { capabilities = ["read"] }`))
		t.Cleanup(func() {
			require.NoError(t, tv.root.Sys().PutPolicy("revocable", `path "secret/data/capstan/*" { capabilities = ["read"] }`))
		})
		got, err := v.Resolve(t.Context(), "rev/token")
		require.ErrorIs(t, err, secrets.ErrDenied)
		require.NotErrorIs(t, err, secrets.ErrUnavailable, "a refusal is not an outage")
		require.EqualError(t, err, want)
		require.Empty(t, got)
		require.NoError(t, v.Health(t.Context()), "the token itself is still valid")
	})

	t.Run("approle logs in once more, then reports the refusal", func(t *testing.T) {
		roleID, secretID := tv.appRole(t, "revocable", "", "", "revocable")
		v := newBackend(t, tv, secrets.VaultConfig{RoleID: roleID, SecretID: secretID}, &syncBuffer{})
		_, err := v.Resolve(t.Context(), "rev/token")
		require.NoError(t, err)
		require.Equal(t, uint64(1), v.Logins())
		require.NoError(t, tv.root.Sys().PutPolicy("revocable", `path "secret/data/elsewhere/*" { capabilities = ["read"] }`))
		_, err = v.Resolve(t.Context(), "rev/token")
		require.EqualError(t, err, want)
		require.Equal(t, uint64(2), v.Logins(), "a refused read logs in again once before giving up")
	})

	t.Run("revoked token", func(t *testing.T) {
		tok := tv.token(t, "1h", "capstan")
		v := newBackend(t, tv, secrets.VaultConfig{Token: tok}, &syncBuffer{})
		require.NoError(t, tv.root.Auth().Token().RevokeTree(tok))
		_, err := v.Resolve(t.Context(), "rev/token")
		require.EqualError(t, err, want)
		require.EqualError(t, v.Health(t.Context()), want, "/readyz shows the refused token")
	})
}

func TestBadAppRoleCredentialsAreAnOutage(t *testing.T) {
	t.Parallel()
	tv := startVault(t)
	roleID, _ := tv.appRole(t, "badcreds", "", "", "capstan")
	v := newBackend(t, tv, secrets.VaultConfig{RoleID: roleID, SecretID: "not-the-secret-id"}, &syncBuffer{})
	_, err := v.Resolve(t.Context(), "any/ref")
	require.ErrorIs(t, err, secrets.ErrUnavailable, "a worker that cannot log in hands calls back")
	require.ErrorContains(t, err, "secrets backend unavailable: vault AppRole login failed: Vault answered 400")
	require.NotContains(t, err.Error(), "not-the-secret-id")
	require.ErrorIs(t, v.Health(t.Context()), secrets.ErrUnavailable, "and is not ready")
}

func TestUnreachableAndSealed(t *testing.T) {
	t.Parallel()
	tv := startVault(t)
	tv.put(t, "capstan/net", map[string]any{"token": "net-secret-value"})
	roleID, secretID := tv.appRole(t, "net", "", "", "capstan")
	v := newBackend(t, tv, secrets.VaultConfig{RoleID: roleID, SecretID: secretID}, &syncBuffer{})
	ctx := t.Context()
	_, err := v.Resolve(ctx, "net/token")
	require.NoError(t, err)
	require.NoError(t, v.Health(ctx))

	tv.front.Down()
	got, err := v.Resolve(ctx, "net/token")
	require.ErrorIs(t, err, secrets.ErrUnavailable)
	require.ErrorContains(t, err, "secrets backend unavailable: vault unreachable: dial tcp "+tv.front.addr)
	require.NotContains(t, err.Error(), "net/token")
	require.NotContains(t, err.Error(), "secret/data")
	require.Empty(t, got)
	require.ErrorIs(t, v.Health(ctx), secrets.ErrUnavailable)

	tv.front.Up()
	got, err = v.Resolve(ctx, "net/token")
	require.NoError(t, err, "back as soon as Vault is")
	require.Equal(t, "net-secret-value", got)
	require.NoError(t, v.Health(ctx))

	// A sealed Vault is an outage too.
	require.NoError(t, tv.core.Seal(tv.root.Token()))
	_, err = v.Resolve(ctx, "net/token")
	require.ErrorIs(t, err, secrets.ErrUnavailable)
	require.EqualError(t, v.Health(ctx), "secrets backend unavailable: vault is sealed or not initialised")
}

// Not parallel: it sets the Vault library's environment variables, which the
// backend must ignore.
func TestTLSVerificationStaysOn(t *testing.T) {
	// An HTTPS listener with a certificate no configured CA signed.
	srv := newTLSServer(t)
	t.Setenv("VAULT_SKIP_VERIFY", "true") // the library's variables are never read
	t.Setenv("VAULT_CACERT", srv.caFile)
	v, err := secrets.NewVault(secrets.VaultConfig{Addr: srv.URL, Token: "t", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_, err = v.Resolve(context.Background(), "a/b")
	require.ErrorIs(t, err, secrets.ErrUnavailable)
	require.ErrorContains(t, err, "vault's TLS certificate is not trusted (set VAULT_CACERT)")

	v, err = secrets.NewVault(secrets.VaultConfig{Addr: srv.URL, Token: "t", CACert: srv.caFile, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	_, err = v.Resolve(context.Background(), "a/b")
	require.ErrorIs(t, err, secrets.ErrNotFound, "with the CA given, the server is trusted (it answers 404)")
}

// TestDeployPolicy sets Vault up as deploy/vault/setup.sh does (the policy
// file, the role's TTLs, a custom role id and secret id) and checks that the
// worker's backend can log in, read the sample secret, renew and pass its
// health check with exactly that policy, and nothing outside the prefix.
func TestDeployPolicy(t *testing.T) {
	t.Parallel()
	tv := startVault(t)
	policy, err := os.ReadFile(filepath.Join("..", "..", "deploy", "vault", "capstan-worker.hcl"))
	require.NoError(t, err)
	require.NoError(t, tv.root.Sys().PutPolicy("capstan-worker", string(policy)))
	_, err = tv.root.Logical().Write("auth/approle/role/capstan-worker", map[string]any{
		"token_policies": "capstan-worker", "token_ttl": "1h", "token_max_ttl": "24h", "secret_id_ttl": "0",
	})
	require.NoError(t, err)
	_, err = tv.root.Logical().Write("auth/approle/role/capstan-worker/role-id", map[string]any{"role_id": "capstan-worker-dev-role"})
	require.NoError(t, err)
	_, err = tv.root.Logical().Write("auth/approle/role/capstan-worker/custom-secret-id", map[string]any{"secret_id": "capstan-worker-dev-secret"})
	require.NoError(t, err)
	tv.put(t, "capstan/providers/github", map[string]any{"token": "ghp_example_not_a_real_token"})
	tv.put(t, "elsewhere/providers/github", map[string]any{"token": "outside-the-prefix"})

	v := newBackend(t, tv, secrets.VaultConfig{RoleID: "capstan-worker-dev-role", SecretID: "capstan-worker-dev-secret"}, &syncBuffer{})
	got, err := v.Resolve(t.Context(), "providers/github/token")
	require.NoError(t, err)
	require.Equal(t, "ghp_example_not_a_real_token", got)
	require.NoError(t, v.Health(t.Context()), "lookup-self is allowed")

	outside := newBackend(t, tv, secrets.VaultConfig{RoleID: "capstan-worker-dev-role", SecretID: "capstan-worker-dev-secret", Prefix: "elsewhere"}, &syncBuffer{})
	_, err = outside.Resolve(t.Context(), "providers/github/token")
	require.ErrorIs(t, err, secrets.ErrDenied, "the policy reads below secret/data/capstan/ only")
}

// TestFixedTokenIsRenewedUntilItsMaxTTL: a renewable VAULT_TOKEN is renewed
// by Run past its TTL; when its max TTL ends, renewal stops, the worker says
// the token cannot be replaced, and reads fail with the 403 error.
func TestFixedTokenIsRenewedUntilItsMaxTTL(t *testing.T) {
	t.Parallel()
	tv := startVault(t)
	tv.put(t, "capstan/fixed", map[string]any{"token": "fixed-token-secret-value"})
	s, err := tv.root.Auth().Token().Create(&api.TokenCreateRequest{
		Policies: []string{"capstan"}, TTL: "2s", ExplicitMaxTTL: "6s", Renewable: new(true),
	})
	require.NoError(t, err)
	logs := &syncBuffer{}
	v := newBackend(t, tv, secrets.VaultConfig{Token: s.Auth.ClientToken}, logs)
	runBackground(t, v)

	// Past the 2s TTL the token still reads, because Run renews it.
	start := time.Now()
	for time.Since(start) < 4*time.Second {
		got, err := v.Resolve(t.Context(), "fixed/token")
		require.NoError(t, err, "at %s", time.Since(start))
		require.Equal(t, "fixed-token-secret-value", got)
		time.Sleep(100 * time.Millisecond)
	}
	require.GreaterOrEqual(t, tv.front.Count("PUT", "/v1/auth/token/renew-self"), 1, "the token was renewed")

	// After the max TTL nothing can keep it alive.
	eventually(t, 30*time.Second, func() error {
		if _, err := v.Resolve(t.Context(), "fixed/token"); !errors.Is(err, secrets.ErrDenied) {
			return fmt.Errorf("read after max TTL: %v", err)
		}
		return nil
	})
	eventually(t, 30*time.Second, func() error {
		if !strings.Contains(logs.String(), "vault token renewal ended; the fixed VAULT_TOKEN cannot be replaced") {
			return errNotYet
		}
		return nil
	})
	require.Zero(t, v.Logins(), "a fixed token is never replaced by a login")
	requireNoSecret(t, logs.String(), "fixed-token-secret-value", s.Auth.ClientToken)
}
