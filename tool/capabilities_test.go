package tool_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/tool"
)

func TestCapabilitiesValidateSecretsRaw(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		secrets []string
		raw     []string
		err     string
	}{
		{name: "exact", secrets: []string{"a/b"}, raw: []string{"a/b"}},
		{name: "below a prefix", secrets: []string{"a/*"}, raw: []string{"a/b", "a/b/*", "a/*"}},
		{name: "under star", secrets: []string{"*"}, raw: []string{"*", "x/y"}},
		{name: "one of several", secrets: []string{"x/y", "a/*"}, raw: []string{"a/b/c"}},
		{name: "nothing raw", secrets: []string{"a/*"}},
		{name: "outside", secrets: []string{"a/*"}, raw: []string{"b/c"},
			err: `capabilities.secrets_raw entry "b/c" is not covered by capabilities.secrets`},
		{name: "the prefix itself", secrets: []string{"a/*"}, raw: []string{"a"},
			err: `capabilities.secrets_raw entry "a" is not covered by capabilities.secrets`},
		{name: "wider than the declaration", secrets: []string{"a/b"}, raw: []string{"a/*"},
			err: `capabilities.secrets_raw entry "a/*" is not covered by capabilities.secrets`},
		{name: "star under a prefix", secrets: []string{"a/*"}, raw: []string{"*"},
			err: `capabilities.secrets_raw entry "*" is not covered by capabilities.secrets`},
		{name: "sibling with the same leading bytes", secrets: []string{"a/*"}, raw: []string{"ab/c"},
			err: `capabilities.secrets_raw entry "ab/c" is not covered by capabilities.secrets`},
		{name: "raw without secrets", raw: []string{"a/b"},
			err: `capabilities.secrets_raw entry "a/b" is not covered by capabilities.secrets`},
		{name: "empty entry", secrets: []string{"a/*"}, raw: []string{""},
			err: "capabilities.secrets_raw must not contain an empty ref"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := tool.Capabilities{Secrets: tt.secrets, SecretsRaw: tt.raw}
			err := c.Validate()
			if tt.err == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.err)
		})
	}
	require.False(t, tool.Capabilities{SecretsRaw: []string{"a"}}.IsZero())
}

func TestCapabilitiesJSONShowsSecretsRaw(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(tool.Capabilities{Secrets: []string{"p/*"}, SecretsRaw: []string{"p/token"}})
	require.NoError(t, err)
	require.JSONEq(t, `{"secrets":["p/*"],"secrets_raw":["p/token"]}`, string(b))
	b, err = json.Marshal(tool.Capabilities{Secrets: []string{"p/*"}})
	require.NoError(t, err)
	require.JSONEq(t, `{"secrets":["p/*"]}`, string(b), "absent when the tool reads no raw value")
	var c tool.Capabilities
	require.NoError(t, json.Unmarshal([]byte(`{"secrets":["p/*"],"secrets_raw":["p/x"]}`), &c))
	require.Equal(t, []string{"p/x"}, c.SecretsRaw)
}

func TestSecretHeaderError(t *testing.T) {
	t.Parallel()
	err := &tool.SecretHeaderError{Header: "Authorization", Err: tool.ErrSecretValueInvalid}
	require.EqualError(t, err, `secret header "Authorization": the secret's value cannot be sent in an HTTP header: it contains a line break, NUL or another control character`)
	require.ErrorIs(t, err, tool.ErrSecretValueInvalid)
	d := tool.Deny(tool.ErrSecretDestination, "this secret may not be sent to evil.example")
	code, ok := tool.DenialCode(d)
	require.True(t, ok)
	require.Equal(t, "SECRET_DESTINATION", code)
	code, ok = tool.DenialCode(errorString("SECRET_DESTINATION: this secret may not be sent to x"))
	require.True(t, ok, "a denial that crossed a process boundary as text")
	require.Equal(t, "SECRET_DESTINATION", code)
}

type errorString string

func (e errorString) Error() string { return string(e) }
