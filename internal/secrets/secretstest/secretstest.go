// Package secretstest is the conformance suite every secrets backend must
// pass (env, file and vault alike), so that a tool sees the same behaviour
// whichever backend a worker is configured with.
package secretstest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/stretchr/testify/require"
)

// Seed is what a backend under test must serve: refs of one, two and
// several segments, refs sharing a path (one Vault secret with two fields),
// values with spaces, symbols, newlines and non-ASCII text. The empty value
// must read as not found.
var Seed = map[string]string{
	"providers/github/token":   "ghp-conformance-0123456789",
	"providers/github/app_key": "-----BEGIN KEY-----\nline two ünïcödé\n-----END KEY-----",
	"db/primary/password":      "p@ss w0rd/with:symbols&=?#%",
	"deep/a/b/c/field":         "deep-value-42",
	"single_segment_ref":       "top-level-value",
	"db/primary/empty":         "",
}

// Missing are refs that have no value in Seed: an absent field of an
// existing path, an absent path, an absent single segment, and refs a
// backend must refuse without looking (empty, "." and ".." segments).
var Missing = []string{
	"providers/github/absent",
	"providers/gitlab/token",
	"absent_single",
	"deep/a/b/field",
	"",
	"a//b",
	"providers/../db/primary/password",
	"./providers/github/token",
	"providers/github/token/",
}

// Factory returns a backend that serves exactly seed (it may be called once
// per Run).
type Factory func(t *testing.T, seed map[string]string) secrets.Backend

// Run checks a backend against the contract of secrets.Backend.
func Run(t *testing.T, newBackend Factory) {
	b := newBackend(t, Seed)
	ctx := t.Context()

	t.Run("resolves every seeded ref", func(t *testing.T) {
		for ref, want := range Seed {
			if want == "" {
				continue
			}
			got, err := b.Resolve(ctx, ref)
			require.NoError(t, err, ref)
			require.Equal(t, want, got, ref)
		}
	})

	t.Run("an empty value is not found, never an empty secret", func(t *testing.T) {
		got, err := b.Resolve(ctx, "db/primary/empty")
		require.ErrorIs(t, err, secrets.ErrNotFound)
		require.Empty(t, got)
	})

	t.Run("missing and malformed refs are not found", func(t *testing.T) {
		for _, ref := range Missing {
			got, err := b.Resolve(ctx, ref)
			require.ErrorIs(t, err, secrets.ErrNotFound, "ref %q", ref)
			require.Empty(t, got, "ref %q", ref)
			requireClean(t, err, ref)
		}
	})

	t.Run("a done context returns its error and no value", func(t *testing.T) {
		done, cancel := context.WithCancel(ctx)
		cancel()
		got, err := b.Resolve(done, "providers/github/token")
		require.Error(t, err)
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, got)
		requireClean(t, err, "providers/github/token")
	})

	t.Run("concurrent use", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			wg.Go(func() {
				for j := range 20 {
					ref := []string{"providers/github/token", "db/primary/password", "providers/gitlab/token"}[(i+j)%3]
					got, err := b.Resolve(ctx, ref)
					want, seeded := Seed[ref]
					switch {
					case seeded && (err != nil || got != want):
						errs <- fmt.Errorf("Resolve(%s) = %q, %v", ref, got, err)
						return
					case !seeded && !errors.Is(err, secrets.ErrNotFound):
						errs <- fmt.Errorf("Resolve(%s) = %v, want not found", ref, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// requireClean fails when err's message holds ref (when non-trivial) or any
// seeded value.
func requireClean(t *testing.T, err error, ref string) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	if len(ref) > 3 {
		require.NotContains(t, msg, ref, "an error must not name the ref")
	}
	for _, v := range Seed {
		if v != "" {
			require.False(t, strings.Contains(msg, v), "an error must not hold a secret value: %q", msg)
		}
	}
}
