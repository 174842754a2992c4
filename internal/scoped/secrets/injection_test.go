package secrets_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/secrets"
	backend "github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/tool"
)

const notRawMsg = "SECRET_NOT_DECLARED: requested secret may only be sent by the fetch accessor; " +
	"the tool must declare it under secrets_raw to read its value"

func TestSecretReturnsRawValuesOnlyForSecretsRaw(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  []string
		ref  string
		want string // a value, or the exact error
	}{
		{"declared raw", []string{"providers/github/token"}, "providers/github/token", "ghp_1"},
		{"raw prefix", []string{"providers/github/*"}, "providers/github/app/key", "ghkey_2"},
		{"injection only", nil, "providers/github/token", notRawMsg},
		{"raw covers another ref", []string{"providers/github/app/*"}, "providers/github/token", notRawMsg},
		{"raw outside the declaration widens nothing", []string{"db/pass"}, "db/pass", deniedMsg},
		{"undeclared", []string{"*"}, "providers/gitlab/token", deniedMsg},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var denials []error
			g := &capability.RefGrant{Declared: []string{"providers/github/*"}, Raw: tc.raw}
			a := secrets.New(g, testBackend, func(err error) { denials = append(denials, err) })
			v, err := a.Secret(context.Background(), tc.ref)
			if tc.want == deniedMsg || tc.want == notRawMsg {
				require.EqualError(t, err, tc.want)
				require.ErrorIs(t, err, tool.ErrSecretNotDeclared)
				require.Empty(t, v)
				require.Len(t, denials, 1)
				require.Empty(t, a.Resolved(), "a refused ref is never resolved")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, v)
		})
	}
}

func TestInjection(t *testing.T) {
	t.Parallel()
	dest, err := capability.NewSecretDestinations(map[string][]string{
		"providers/github/*": {"api.github.com"},
		"db/pass":            {"db.example.com:5433"},
	})
	require.NoError(t, err)
	var denials []error
	g := &capability.RefGrant{Declared: []string{"providers/*", "db/pass"}, Destinations: dest}
	a := secrets.New(g, testBackend, func(err error) { denials = append(denials, err) })
	inj := secrets.NewInjection(a)
	github, err := capability.ParseEndpoint("https", "api.github.com", 0)
	require.NoError(t, err)
	evil, err := capability.ParseEndpoint("https", "evil.example", 0)
	require.NoError(t, err)

	require.NoError(t, inj.CheckDestination("providers/github/token", github))
	err = inj.CheckDestination("providers/github/token", evil)
	require.EqualError(t, err, "SECRET_DESTINATION: this secret may not be sent to evil.example")
	require.ErrorIs(t, err, tool.ErrSecretDestination)
	err = inj.CheckDestination("providers/gitlab/token", github)
	require.EqualError(t, err, "SECRET_DESTINATION: this secret may not be sent to api.github.com",
		"declared but bound nowhere: fail closed")
	require.EqualError(t, inj.CheckDestination("other/x", github), deniedMsg, "the declaration is checked first")
	require.Empty(t, a.Resolved(), "checking resolves nothing")

	v, err := inj.Resolve(context.Background(), "providers/github/token")
	require.NoError(t, err)
	require.Equal(t, "ghp_1", v)
	require.Equal(t, []string{"ghp_1"}, a.Resolved(), "injected values are redacted like raw ones")
	_, err = inj.Resolve(context.Background(), "other/x")
	require.EqualError(t, err, deniedMsg)
	_, err = inj.Resolve(context.Background(), "providers/none")
	require.ErrorIs(t, err, backend.ErrNotFound)
	require.Empty(t, denials, "the fetch accessor, not the injection face, reports its denials")

	_, err = a.Secret(context.Background(), "providers/github/token")
	require.EqualError(t, err, notRawMsg, "the tool's face still returns no raw value")

	require.Nil(t, secrets.NewInjection(nil))
}

func TestCheckCarried(t *testing.T) {
	t.Parallel()
	dest, err := capability.NewSecretDestinations(map[string][]string{"providers/github/*": {"api.github.com"}})
	require.NoError(t, err)
	b := mapBackend{values: map[string]string{
		"providers/github/token": "ghp_long_value_1",
		"providers/gitlab/token": "glpat_long_value_2",
		"providers/short":        "short",
	}}
	g := &capability.RefGrant{Declared: []string{"providers/*"}, Raw: []string{"providers/*"}, Destinations: dest}
	a := secrets.New(g, b, nil)
	inj := secrets.NewInjection(a)
	github, err := capability.ParseEndpoint("https", "api.github.com", 0)
	require.NoError(t, err)
	evil, err := capability.ParseEndpoint("https", "evil.example", 0)
	require.NoError(t, err)
	ctx := context.Background()

	require.NoError(t, inj.CheckCarried(evil, "ghp_long_value_1"), "nothing resolved yet: nothing to look for")
	for _, ref := range []string{"providers/github/token", "providers/gitlab/token", "providers/short"} {
		_, err := a.Secret(ctx, ref)
		require.NoError(t, err)
	}
	require.NoError(t, inj.CheckCarried(github, "https://api.github.com/?t=ghp_long_value_1"), "bound host")
	err = inj.CheckCarried(evil, "a", "Bearer ghp_long_value_1")
	require.EqualError(t, err, "SECRET_DESTINATION: this secret may not be sent to evil.example")
	require.ErrorIs(t, err, tool.ErrSecretDestination)
	require.ErrorIs(t, inj.CheckCarried(github, "x glpat_long_value_2 y"), tool.ErrSecretDestination, "a ref bound nowhere")
	require.NoError(t, inj.CheckCarried(evil, "short", "nothing secret here"), "values under 8 bytes are not looked for")
	require.NoError(t, inj.CheckCarried(evil))
}
