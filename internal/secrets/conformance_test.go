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
		env := make(map[string]string, len(seed))
		for ref, v := range seed {
			env[secrets.EnvName("CAPSTAN_SECRET_", ref)] = v
		}
		// Variables outside the prefix are never reachable.
		env["VAULT_TOKEN"] = "hvs.never-served"
		return secrets.NewEnv("", func(k string) string { return env[k] })
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
		env := make(map[string]string, len(seed))
		for ref, v := range seed {
			env[secrets.EnvName("CAPSTAN_SECRET_", ref)] = v
		}
		return secrets.NewCache(secrets.NewEnv("", func(k string) string { return env[k] }), 0, nil)
	})
}
