package egress

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplitAuthority(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in       string
		def      int
		host     string
		port     int
		errorMsg string
	}{
		{in: "example.com:443", host: "example.com", port: 443},
		{in: "example.com", def: 80, host: "example.com", port: 80},
		{in: "example.com:", def: 80, host: "example.com", port: 80},
		{in: "example.com", errorMsg: "missing port"},
		{in: "example.com:", errorMsg: "missing port"},
		{in: "[::1]:8080", host: "::1", port: 8080},
		{in: "[::1]", def: 80, host: "::1", port: 80},
		{in: "[fe80::1%25eth0]:80", host: "fe80::1%25eth0", port: 80},
		{in: "127.0.0.1:1", host: "127.0.0.1", port: 1},
		{in: "h:65535", host: "h", port: 65535},
		{in: "h:65536", errorMsg: "port must be a number from 1 to 65535"},
		{in: "h:0", errorMsg: "port must be a number from 1 to 65535"},
		{in: "h:00080", host: "h", port: 80},
		{in: "h:000080", errorMsg: "port must be a number from 1 to 65535"},
		{in: "h:+80", errorMsg: "port must be a number from 1 to 65535"},
		{in: "h:8 0", errorMsg: "port must be a number from 1 to 65535"},
		{in: "h:*", errorMsg: "port must be a number from 1 to 65535"},
		{in: ":443", errorMsg: "missing host"},
		{in: "", def: 80, errorMsg: "missing host"},
		{in: "[]:443", errorMsg: "unbalanced or misplaced brackets"},
		{in: "[::1:443", errorMsg: "unbalanced or misplaced brackets"},
		{in: "[example.com]:443", errorMsg: "unbalanced or misplaced brackets"},
		{in: "[::1]]:443", errorMsg: "unexpected text after ']'"},
		{in: "[::1]x:443", errorMsg: "unexpected text after ']'"},
		{in: "a[::1]:443", errorMsg: "unbalanced or misplaced brackets"},
		{in: "::1:443", errorMsg: "an IPv6 address needs brackets"},
		{in: "a:b:c", errorMsg: "an IPv6 address needs brackets"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			host, port, err := splitAuthority(tt.in, tt.def)
			if tt.errorMsg != "" {
				require.EqualError(t, err, tt.errorMsg)
				require.Empty(t, host)
				require.Zero(t, port)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.host, host)
			require.Equal(t, tt.port, port)
		})
	}
}

// FuzzSplitAuthority: splitAuthority never panics, returns a non-empty host
// and a port from 1 to 65535 or an error that does not quote its input,
// and agrees with net.SplitHostPort whenever the input has a port.
func FuzzSplitAuthority(f *testing.F) {
	for _, s := range []string{
		"example.com:443", "example.com", "[::1]:80", "[::1]", "::1:80", "[fe80::1%25eth0]:443",
		"h:", ":1", "[]:1", "[[::1]]:1", "h:65536", "h:00001", "a]b:1", "\x00:1", "ß.de:80",
	} {
		f.Add(s, 0)
		f.Add(s, 80)
	}
	f.Fuzz(func(t *testing.T, s string, def int) {
		if def != 0 && def != 80 && def != 443 {
			def = 80
		}
		host, port, err := splitAuthority(s, def)
		if err != nil {
			require.Empty(t, host)
			require.Zero(t, port)
			if len(s) > 3 {
				require.NotContains(t, err.Error(), s)
			}
			return
		}
		require.NotEmpty(t, host)
		require.GreaterOrEqual(t, port, 1)
		require.LessOrEqual(t, port, 65535)
		require.NotContains(t, host, "[")
		require.NotContains(t, host, "]")
		// Written back with its port, it splits the same way again, and as
		// the standard library splits it.
		joined := net.JoinHostPort(host, strconv.Itoa(port))
		h2, p2, err := splitAuthority(joined, 0)
		require.NoError(t, err, joined)
		require.Equal(t, host, h2)
		require.Equal(t, port, p2)
		if i := strings.LastIndexByte(s, ':'); i >= 0 && i < len(s)-1 && !strings.HasSuffix(s, "]") {
			sh, sp, err := net.SplitHostPort(s)
			require.NoError(t, err, s)
			require.Equal(t, host, sh)
			n, err := strconv.Atoi(sp)
			require.NoError(t, err)
			require.Equal(t, port, n)
		}
	})
}
