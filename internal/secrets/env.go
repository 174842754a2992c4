package secrets

import (
	"cmp"
	"context"
	"os"
	"strings"
)

// DefaultEnvPrefix is the default of CAPSTAN_SECRETS_ENV_PREFIX.
const DefaultEnvPrefix = "CAPSTAN_SECRET_"

// envBackend reads secrets from environment variables.
type envBackend struct {
	prefix string
	getenv func(string) string
}

// NewEnv returns a Backend that reads ref from the environment variable
// EnvName(prefix, ref) through getenv (nil means os.Getenv). An empty prefix
// means DefaultEnvPrefix, so a ref can never name one of the worker's own
// variables such as PATH. A variable that is unset or empty is ErrNotFound.
func NewEnv(prefix string, getenv func(string) string) Backend {
	if getenv == nil {
		getenv = os.Getenv
	}
	return &envBackend{prefix: cmp.Or(prefix, DefaultEnvPrefix), getenv: getenv}
}

// Resolve returns the value of the variable for ref, or ErrNotFound.
func (e *envBackend) Resolve(ctx context.Context, ref string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if ref == "" {
		return "", ErrNotFound
	}
	v := e.getenv(EnvName(e.prefix, ref))
	if v == "" {
		return "", ErrNotFound
	}
	return v, nil
}

// EnvName returns the environment variable that holds ref: prefix followed by
// ref upper-cased, with every character other than A–Z and 0–9 replaced by
// "_" (one "_" per character, also for a multi-byte or invalid UTF-8 one).
// "providers/github/token" with prefix "CAPSTAN_SECRET_" is
// "CAPSTAN_SECRET_PROVIDERS_GITHUB_TOKEN". Distinct refs may share a name
// ("a/b" and "a.b"); both then read the same variable.
func EnvName(prefix, ref string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(ref))
	b.WriteString(prefix)
	for _, r := range ref {
		switch {
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}
