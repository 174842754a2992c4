package egress

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
)

// TestCurl runs curl, a client the proxy did not grow up with, through the
// proxy announced the way the child will see it: http_proxy and
// https_proxy in its environment.
func TestCurl(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed")
	}
	_, _, plainPort, securePort := echoServers(t)
	p := startProxy(t, proxyOpts{
		declared: []string{"allowed.test:" + plainPort, "allowed.test:" + securePort},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
	})
	proxy := "http://" + p.addr
	tests := []struct {
		name     string
		args     []string
		wantOut  string // exact stdout, or a substring when contains is set
		contains bool
		wantFail bool   // curl exits non-zero
		wantErr  string // substring of stderr
		denials  int    // refusals reported so far
	}{
		{
			name:     "http allowed",
			args:     []string{"-d", "hello", "-H", "X-Custom: v", "http://allowed.test:" + plainPort + "/echo"},
			wantOut:  `"Body":"hello"`,
			contains: true,
		},
		{
			name:    "http refused",
			args:    []string{"http://other.test/x"},
			wantOut: `Capstan egress: host "other.test" is not in personality network allow list`,
			denials: 1,
		},
		{
			name:     "https allowed through CONNECT",
			args:     []string{"-k", "https://allowed.test:" + securePort + "/echo"},
			wantOut:  `"TLS":true`,
			contains: true,
			denials:  1,
		},
		{
			name:     "https refused",
			args:     []string{"-k", "https://other.test/"},
			wantFail: true, // "CONNECT tunnel failed, response 403"
			wantErr:  "403",
			denials:  2,
		},
	}
	for _, tt := range tests {
		// In order: the refusal count is the proxy's.
		ctx, cancel := context.WithTimeout(t.Context(), waitFor)
		// -q first: no ~/.curlrc; -sS: no progress, errors shown.
		cmd := exec.CommandContext(ctx, curl, append([]string{"-q", "-sS", "--max-time", "5"}, tt.args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "http_proxy=" + proxy, "https_proxy=" + proxy}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			require.NoError(t, err, tt.name)
		}
		require.Equal(t, tt.wantFail, err != nil, "%s: %v, stderr %s", tt.name, err, stderr.String())
		if tt.contains {
			require.Contains(t, stdout.String(), tt.wantOut, tt.name)
		} else {
			require.Equal(t, tt.wantOut, stdout.String(), tt.name)
		}
		require.True(t, strings.Contains(stderr.String(), tt.wantErr), "%s: stderr %q", tt.name, stderr.String())
		require.Len(t, p.deniedErrs(), tt.denials, tt.name)
	}
}
