package secrets_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/secrets"
	backend "github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

const deniedMsg = "SECRET_NOT_DECLARED: requested secret is not permitted for this tool"

// mapBackend resolves from a map; refs listed in fail return err instead.
type mapBackend struct {
	values map[string]string
	fail   map[string]error
}

func (m mapBackend) Resolve(ctx context.Context, ref string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err, ok := m.fail[ref]; ok {
		return "", err
	}
	v, ok := m.values[ref]
	if !ok {
		// A careless backend that names the ref: the accessor must not pass it on.
		return "", fmt.Errorf("no value at %s: %w", ref, backend.ErrNotFound)
	}
	return v, nil
}

// distinctive strings the tests search error messages for.
const (
	distinctRef   = "zz-distinctive-ref-7f3a/token"
	distinctValue = "qq-distinctive-value-91c2"
)

var testBackend = mapBackend{values: map[string]string{
	"providers/github/token":   "ghp_1",
	"providers/github/app/key": "ghkey_2",
	"providers/gitlab/token":   "glpat_3",
	"db/pass":                  "pw_4",
	"providers/github":         "ghroot_5",
	distinctRef:                distinctValue,
	"dup/a":                    "same",
	"dup/b":                    "same",
	"empty":                    "",
}}

// raw returns a copy of g whose tool may read every declared ref itself
// (secrets_raw = secrets), the grant of a tool that needs raw values.
func raw(g *capability.RefGrant) *capability.RefGrant {
	if g == nil {
		return nil
	}
	c := *g
	c.Raw = g.Declared
	return &c
}

func TestSecretGrant(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		grant *capability.RefGrant
		ref   string
		want  string // "" means denied
	}{
		{"exact match", &capability.RefGrant{Declared: []string{"db/pass"}}, "db/pass", "pw_4"},
		{"exact does not cover children", &capability.RefGrant{Declared: []string{"db"}}, "db/pass", ""},
		{"prefix star covers a child", &capability.RefGrant{Declared: []string{"providers/github/*"}}, "providers/github/token", "ghp_1"},
		{"prefix star covers a grandchild", &capability.RefGrant{Declared: []string{"providers/github/*"}}, "providers/github/app/key", "ghkey_2"},
		{"prefix star never covers the prefix itself", &capability.RefGrant{Declared: []string{"providers/github/*"}}, "providers/github", ""},
		{"prefix star is per segment", &capability.RefGrant{Declared: []string{"providers/git/*"}}, "providers/github/token", ""},
		{"sibling prefix denied", &capability.RefGrant{Declared: []string{"providers/github/*"}}, "providers/gitlab/token", ""},
		{"star covers all", &capability.RefGrant{Declared: []string{"*"}}, "db/pass", "pw_4"},
		{"ceiling allows", &capability.RefGrant{Declared: []string{"providers/*"}, Ceiling: &capability.Ceiling{Allow: []string{"providers/github/*"}}}, "providers/github/token", "ghp_1"},
		{"ceiling caps the declaration", &capability.RefGrant{Declared: []string{"providers/*"}, Ceiling: &capability.Ceiling{Allow: []string{"providers/github/*"}}}, "providers/gitlab/token", ""},
		{"empty ceiling allows nothing", &capability.RefGrant{Declared: []string{"*"}, Ceiling: &capability.Ceiling{}}, "db/pass", ""},
		{"ceiling cannot widen the declaration", &capability.RefGrant{Declared: []string{"db/pass"}, Ceiling: &capability.Ceiling{Allow: []string{"*"}}}, "providers/github/token", ""},
		{"nil grant denies", nil, "db/pass", ""},
		{"empty declaration denies", &capability.RefGrant{}, "db/pass", ""},
		{"dot-dot segment refused under star", &capability.RefGrant{Declared: []string{"*"}}, "providers/../db/pass", ""},
		{"dot-dot escaping a prefix refused", &capability.RefGrant{Declared: []string{"providers/*"}}, "providers/../db/pass", ""},
		{"dot segment refused", &capability.RefGrant{Declared: []string{"*"}}, "db/./pass", ""},
		{"empty segment refused", &capability.RefGrant{Declared: []string{"*"}}, "db//pass", ""},
		{"leading slash refused", &capability.RefGrant{Declared: []string{"*"}}, "/db/pass", ""},
		{"trailing slash refused", &capability.RefGrant{Declared: []string{"providers/*"}}, "providers/", ""},
		{"empty ref refused", &capability.RefGrant{Declared: []string{"*"}}, "", ""},
		{"star ref refused", &capability.RefGrant{Declared: []string{"*"}}, "*", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var denials []error
			a := secrets.New(raw(tc.grant), testBackend, func(err error) { denials = append(denials, err) })
			v, err := a.Secret(context.Background(), tc.ref)
			if tc.want == "" {
				require.Error(t, err)
				require.EqualError(t, err, deniedMsg)
				require.ErrorIs(t, err, tool.ErrSecretNotDeclared)
				var d *tool.DenialError
				require.ErrorAs(t, err, &d)
				code, ok := tool.DenialCode(err)
				require.True(t, ok)
				require.Equal(t, "SECRET_NOT_DECLARED", code)
				require.Empty(t, v)
				require.Len(t, denials, 1)
				require.Same(t, err, denials[0])
				require.Empty(t, a.Resolved(), "nothing resolved on denial")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, v)
			require.Empty(t, denials)
			require.Equal(t, []string{tc.want}, a.Resolved())
		})
	}
}

func TestSecretErrorsNeverEchoRefOrValue(t *testing.T) {
	t.Parallel()
	down := fmt.Errorf("vault unreachable: %w", backend.ErrUnavailable)
	b := mapBackend{
		values: map[string]string{distinctRef: distinctValue},
		fail:   map[string]error{"zz-distinctive-ref-7f3a/down": down},
	}
	tests := []struct {
		name    string
		grant   *capability.RefGrant
		ref     string
		wantIs  error
		wantMsg string
	}{
		{"denied", &capability.RefGrant{Declared: []string{"other/*"}}, distinctRef, tool.ErrSecretNotDeclared, deniedMsg},
		{"denied with dot-dot", &capability.RefGrant{Declared: []string{"*"}}, distinctRef + "/..", tool.ErrSecretNotDeclared, deniedMsg},
		{"nil grant", nil, distinctRef, tool.ErrSecretNotDeclared, deniedMsg},
		{"not found", &capability.RefGrant{Declared: []string{"zz-distinctive-ref-7f3a/*"}}, "zz-distinctive-ref-7f3a/missing", backend.ErrNotFound, "secret not found"},
		{"unavailable", &capability.RefGrant{Declared: []string{"zz-distinctive-ref-7f3a/*"}}, "zz-distinctive-ref-7f3a/down", backend.ErrUnavailable, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := secrets.New(raw(tc.grant), b, nil)
			_, err := a.Secret(context.Background(), tc.ref)
			require.ErrorIs(t, err, tc.wantIs)
			if tc.wantMsg != "" {
				require.EqualError(t, err, tc.wantMsg)
			}
			require.NotContains(t, err.Error(), "zz-distinctive")
			require.NotContains(t, err.Error(), distinctValue)
			require.Empty(t, a.Resolved())
		})
	}
}

func TestSecretUnavailableIsWrapped(t *testing.T) {
	t.Parallel()
	down := fmt.Errorf("vault: connection refused: %w", backend.ErrUnavailable)
	a := secrets.New(&capability.RefGrant{Declared: []string{"*"}, Raw: []string{"*"}}, mapBackend{fail: map[string]error{"a/b": down}}, nil)
	_, err := a.Secret(context.Background(), "a/b")
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.ErrorIs(t, err, down)
	require.NotErrorIs(t, err, backend.ErrNotFound)
	require.NotErrorIs(t, err, tool.ErrSecretNotDeclared)
}

func TestSecretContextError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a := secrets.New(&capability.RefGrant{Declared: []string{"*"}, Raw: []string{"*"}}, testBackend, nil)
	_, err := a.Secret(ctx, "db/pass")
	require.ErrorIs(t, err, context.Canceled)
}

func TestSecretWithoutBackend(t *testing.T) {
	t.Parallel()
	a := secrets.New(&capability.RefGrant{Declared: []string{"*"}, Raw: []string{"*"}}, nil, nil)
	_, err := a.Secret(context.Background(), "db/pass")
	require.ErrorIs(t, err, secrets.ErrNoBackend)
	// The grant is still checked first.
	a = secrets.New(nil, nil, nil)
	_, err = a.Secret(context.Background(), "db/pass")
	require.ErrorIs(t, err, tool.ErrSecretNotDeclared)
}

func TestResolvedCollectsDistinctValues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := secrets.New(&capability.RefGrant{Declared: []string{"providers/*", "dup/*", "db/pass", "empty"}, Raw: []string{"providers/*", "dup/*", "db/pass", "empty"}}, testBackend, nil)
	require.Empty(t, a.Resolved())
	for _, ref := range []string{"providers/github/token", "db/pass", "dup/a", "dup/b", "providers/github/token", "empty"} {
		_, err := a.Secret(ctx, ref)
		require.NoError(t, err, ref)
	}
	_, err := a.Secret(ctx, "secret/not/granted")
	require.Error(t, err)
	_, err = a.Secret(ctx, "providers/none")
	require.ErrorIs(t, err, backend.ErrNotFound)

	got := a.Resolved()
	require.Equal(t, []string{"ghp_1", "pw_4", "same"}, got, "distinct, non-empty, in order")
	got[0] = "mutated"
	require.Equal(t, "ghp_1", a.Resolved()[0], "Resolved returns a copy")
}

func TestSecretWorksWithRealBackends(t *testing.T) {
	t.Parallel()
	env := backend.NewEnv("CAPSTAN_SECRET_", func(k string) string {
		if k == "CAPSTAN_SECRET_PROVIDERS_GITHUB_TOKEN" {
			return "ghp_env"
		}
		return ""
	})
	a := secrets.New(&capability.RefGrant{Declared: []string{"providers/github/*"}, Raw: []string{"providers/github/*"}}, backend.NewCache(env, 0, nil), nil)
	v, err := a.Secret(context.Background(), "providers/github/token")
	require.NoError(t, err)
	require.Equal(t, "ghp_env", v)
	_, err = a.Secret(context.Background(), "providers/github/other")
	require.EqualError(t, err, "secret not found")
}

func TestSecretConcurrentUse(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	denials := 0
	a := secrets.New(&capability.RefGrant{Declared: []string{"providers/*"}, Raw: []string{"providers/*"}}, testBackend, func(error) {
		mu.Lock()
		denials++
		mu.Unlock()
	})
	refs := []string{"providers/github/token", "providers/gitlab/token", "db/pass"}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for j := range 50 {
				ref := refs[(i+j)%len(refs)]
				_, err := a.Secret(context.Background(), ref)
				if (ref == "db/pass") != errors.Is(err, tool.ErrSecretNotDeclared) {
					t.Errorf("Secret(%s): %v", ref, err)
				}
			}
		})
	}
	wg.Wait()
	require.ElementsMatch(t, []string{"ghp_1", "glpat_3"}, a.Resolved())
	mu.Lock()
	defer mu.Unlock()
	require.Positive(t, denials)
}
