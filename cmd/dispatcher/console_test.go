package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConsoleUsageErrors: the console refuses to start, before it
// connects, with a message naming what is wrong.
func TestConsoleUsageErrors(t *testing.T) {
	t.Parallel()
	badTokens := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(badTokens, []byte("tokens:\n- {token: short, role: admin}\n"), 0o600))
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"public address without a token", nil, []string{"console", "--addr", "0.0.0.0:0"},
			"capstan: console: --addr 0.0.0.0:0 is not a loopback address: without a token the console serves this machine only; set CAPSTAN_CONSOLE_TOKEN (or --tokens) to serve it beyond"},
		{"short operator token", map[string]string{envConsoleToken: "short"}, []string{"console"},
			"capstan: console: CAPSTAN_CONSOLE_TOKEN: token must be at least 16 characters"},
		{"viewer token with a space", map[string]string{envConsoleViewerToken: "a viewer token with spaces"}, []string{"console"},
			"capstan: console: CAPSTAN_CONSOLE_VIEWER_TOKEN: token must not hold spaces or control characters"},
		{"bad tokens file", nil, []string{"console", "--tokens", badTokens},
			"tokens[0]: token must be at least 16 characters; tokens[0]: role must be viewer, operator or approver, got \"admin\""},
		{"missing tokens file", nil, []string{"console", "--tokens", filepath.Join(t.TempDir(), "none.yaml")}, "console tokens file: open "},
		{"unexpected argument", nil, []string{"console", "extra"}, `capstan: console: unexpected argument "extra"`},
		{"address in use or invalid", nil, []string{"console", "--addr", "127.0.0.1:99999"}, "capstan: console: listen tcp: address 99999: invalid port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runT(t, tc.env, "", tc.args...)
			require.Equal(t, exitUsage, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.NotContains(t, stderr, "local mode", "refused before connecting")
		})
	}
}
