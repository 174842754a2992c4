package secrets_test

import (
	"context"
	"testing"

	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/stretchr/testify/require"
)

func TestEnvName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, prefix, ref, want string
	}{
		{"spec example", "CAPSTAN_SECRET_", "providers/github/token", "CAPSTAN_SECRET_PROVIDERS_GITHUB_TOKEN"},
		{"dots and dashes", "CAPSTAN_SECRET_", "db.main/pass-word", "CAPSTAN_SECRET_DB_MAIN_PASS_WORD"},
		{"digits and upper case kept", "CAPSTAN_SECRET_", "S3/Key2", "CAPSTAN_SECRET_S3_KEY2"},
		{"underscore stays underscore", "CAPSTAN_SECRET_", "a_b", "CAPSTAN_SECRET_A_B"},
		{"one underscore per non-ASCII character", "CAPSTAN_SECRET_", "clé/ß", "CAPSTAN_SECRET_CL___"},
		{"long s is not folded to S", "X_", "ſ", "X__"},
		{"space and colon", "P_", "a b:c", "P_A_B_C"},
		{"custom prefix", "MY_", "a/b", "MY_A_B"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, secrets.EnvName(tc.prefix, tc.ref))
		})
	}
}

func TestEnvBackend(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"CAPSTAN_SECRET_PROVIDERS_GITHUB_TOKEN": "ghp_value",
		"CAPSTAN_SECRET_EMPTY":                  "",
		"PATH":                                  "/usr/bin",
		"OTHER_A_B":                             "other",
	}
	getenv := func(k string) string { return env[k] }
	ctx := context.Background()

	tests := []struct {
		name, prefix, ref, want string
		wantErr                 error
	}{
		{"mapped ref", "CAPSTAN_SECRET_", "providers/github/token", "ghp_value", nil},
		{"same name from another spelling", "CAPSTAN_SECRET_", "Providers.GitHub-Token", "ghp_value", nil},
		{"unset", "CAPSTAN_SECRET_", "providers/gitlab/token", "", secrets.ErrNotFound},
		{"empty is not found", "CAPSTAN_SECRET_", "empty", "", secrets.ErrNotFound},
		{"empty ref", "CAPSTAN_SECRET_", "", "", secrets.ErrNotFound},
		{"empty prefix means the default, never PATH", "", "path", "", secrets.ErrNotFound},
		{"empty prefix default still resolves", "", "providers/github/token", "ghp_value", nil},
		{"custom prefix", "OTHER_", "a/b", "other", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := secrets.NewEnv(tc.prefix, getenv).Resolve(ctx, tc.ref)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.Equal(t, "secret not found", err.Error())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, v)
		})
	}
}

func TestEnvBackendHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := secrets.NewEnv("", func(string) string { return "v" }).Resolve(ctx, "a")
	require.ErrorIs(t, err, context.Canceled)
}
