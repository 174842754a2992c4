package secrets_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestFileBackend(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, content string
	}{
		{"json", "secrets.json", `{"providers/github/token": "ghp_json", "db/pass": "p\"w"}`},
		{"yaml", "secrets.yaml", "providers/github/token: ghp_yaml\ndb/pass: 'p\"w'\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, err := secrets.NewFile(writeFile(t, tc.file, tc.content))
			require.NoError(t, err)
			ctx := context.Background()

			v, err := b.Resolve(ctx, "providers/github/token")
			require.NoError(t, err)
			require.Equal(t, "ghp_"+tc.name, v)
			v, err = b.Resolve(ctx, "db/pass")
			require.NoError(t, err)
			require.Equal(t, `p"w`, v)

			_, err = b.Resolve(ctx, "providers/gitlab/token")
			require.ErrorIs(t, err, secrets.ErrNotFound)
			require.Equal(t, "secret not found", err.Error())
		})
	}
}

func TestFileBackendReadsOnce(t *testing.T) {
	t.Parallel()
	p := writeFile(t, "s.json", `{"a": "1"}`)
	b, err := secrets.NewFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, []byte(`{"a": "2"}`), 0o600))
	v, err := b.Resolve(context.Background(), "a")
	require.NoError(t, err)
	require.Equal(t, "1", v)
}

func TestFileBackendEmptyDocument(t *testing.T) {
	t.Parallel()
	b, err := secrets.NewFile(writeFile(t, "empty.yaml", ""))
	require.NoError(t, err)
	_, err = b.Resolve(context.Background(), "a")
	require.ErrorIs(t, err, secrets.ErrNotFound)
}

func TestFileBackendBadFile(t *testing.T) {
	t.Parallel()
	const secretValue = "s3cr3t-value-never-echoed"
	tests := []struct {
		name, content, wantSub string
	}{
		{"list", "- a\n- b\n", "want a flat map of ref to string value"},
		{"scalar", "just text\n", "want a flat map of ref to string value"},
		{"nested map", "providers:\n  github: " + secretValue + "\n", `value of "providers" is not a string`},
		{"number", `{"ok": "` + secretValue + `", "pin": 1234}`, `value of "pin" is not a string`},
		{"boolean", "flag: true\n", `value of "flag" is not a string`},
		{"null value", `{"a": null}`, `value of "a" is not a string`},
		{"syntax", `{"a": "` + secretValue + `"`, "not valid JSON or YAML"},
		{"duplicate key", "a: " + secretValue + "\na: other\n", "not valid JSON or YAML"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := writeFile(t, "bad.yaml", tc.content)
			_, err := secrets.NewFile(p)
			require.Error(t, err)
			require.Contains(t, err.Error(), "secrets file "+p+": ")
			require.Contains(t, err.Error(), tc.wantSub)
			require.NotContains(t, err.Error(), secretValue)
		})
	}
}

func TestFileBackendMissingFile(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "nope.json")
	_, err := secrets.NewFile(p)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Contains(t, err.Error(), p)
}
