package secrets_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/internal/secrets/secretstest"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// The vault backend runs the same suite against a real Vault server in the
// integration/vault module.

func TestConformanceEnv(t *testing.T) {
	t.Parallel()
	secretstest.Run(t, func(t *testing.T, seed map[string]string) secrets.Backend {
		return secrets.NewEnv("", seededEnv(seed))
	})
}

func TestConformanceFile(t *testing.T) {
	t.Parallel()
	secretstest.Run(t, func(t *testing.T, seed map[string]string) secrets.Backend {
		data, err := yaml.Marshal(seed)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "secrets.yaml")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		b, err := secrets.NewFile(path)
		require.NoError(t, err)
		return b
	})
}

func TestConformanceCache(t *testing.T) {
	t.Parallel()
	secretstest.Run(t, func(t *testing.T, seed map[string]string) secrets.Backend {
		return secrets.NewCache(secrets.NewEnv("", seededEnv(seed)), 0, nil)
	})
}

// seededEnv is a getenv holding seed under the default prefix, and a
// variable outside the prefix that must never be reachable.
func seededEnv(seed map[string]string) func(string) string {
	env := make(map[string]string, len(seed)+1)
	for ref, v := range seed {
		env[secrets.EnvName("CAPSTAN_SECRET_", ref)] = v
	}
	env["VAULT_TOKEN"] = "hvs.never-served"
	return func(k string) string { return env[k] }
}
