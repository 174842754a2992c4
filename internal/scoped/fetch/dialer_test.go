package fetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// errTestDial is what the test dial hook answers: a target that gets it
// passed every check.
var errTestDial = errors.New("test: dial reached")

// TestDialerMatchesFetch runs each target through Dialer.Dial and through a
// fetcher on the same grant: both refuse it with the same message, or both
// reach the dial.
func TestDialerMatchesFetch(t *testing.T) {
	t.Parallel()
	policy := capability.NetworkPolicy{
		Allow: []string{"*:*"},
		Deny:  []string{"blocked.test", "10.9.0.0/16"},
	}
	private := policy
	private.AllowPrivateURLs = true
	declared := []string{"plain.test", "alt.test:8443", "any.test:*", "blocked.test:*", "meta.test", "internal.test",
		"rebind.test", "10.0.0.0/8:*", "127.0.0.1:*", "169.254.169.254", "metadata.google.internal", "[::1]:*"}
	hosts := map[string][]string{
		"plain.test":    {"8.8.8.8"},
		"alt.test":      {"8.8.8.8"},
		"any.test":      {"8.8.4.4", "2606:4700::1111"},
		"blocked.test":  {"8.8.8.8"},
		"meta.test":     {"169.254.169.254"},
		"internal.test": {"10.1.2.3"},
		"rebind.test":   {"8.8.8.8", "127.0.0.1"},
	}
	tests := []struct {
		name    string
		private bool
		scheme  string
		host    string
		port    int
		want    string // "" = reaches the dial
	}{
		{name: "default https port", scheme: "https", host: "plain.test", port: 443},
		{name: "default port by zero", scheme: "https", host: "plain.test"},
		{name: "default http port", scheme: "http", host: "Plain.Test.", port: 80},
		{name: "http on 443 is not default", scheme: "http", host: "plain.test", port: 443, want: "plain.test:443 is not in the declared allowedHosts"},
		{name: "other port", scheme: "https", host: "plain.test", port: 8443, want: "plain.test:8443 is not in the declared allowedHosts"},
		{name: "exact port", scheme: "http", host: "alt.test", port: 8443},
		{name: "exact port only", scheme: "https", host: "alt.test", port: 443, want: "alt.test is not in the declared allowedHosts"},
		{name: "any port", scheme: "http", host: "any.test", port: 5432},
		{name: "not declared", scheme: "https", host: "other.test", want: "other.test is not in the declared allowedHosts"},
		{name: "deny list wins", scheme: "https", host: "blocked.test", port: 8443, want: "blocked.test:8443 is on the deny list"},
		{name: "metadata by lookup", private: true, scheme: "http", host: "meta.test", want: "meta.test is a cloud metadata address"},
		{name: "metadata literal", private: true, scheme: "http", host: "169.254.169.254", want: "169.254.169.254 is a cloud metadata address"},
		{name: "metadata name", private: true, scheme: "http", host: "metadata.google.internal", want: "metadata.google.internal is a cloud metadata address"},
		{name: "private by lookup", scheme: "https", host: "internal.test", want: "internal.test resolves to a private or reserved address"},
		{name: "private allowed", private: true, scheme: "https", host: "internal.test"},
		{name: "one private answer", scheme: "https", host: "rebind.test", want: "rebind.test resolves to a private or reserved address"},
		{name: "private literal", scheme: "http", host: "10.1.2.3", port: 8080, want: "10.1.2.3:8080 resolves to a private or reserved address"},
		{name: "private literal on the deny list", private: true, scheme: "http", host: "10.9.1.1", want: "10.9.1.1 is on the deny list"},
		{name: "IPv6 loopback in brackets", private: true, scheme: "http", host: "[::1]", port: 8080},
		{name: "IPv6 loopback refused", scheme: "http", host: "::1", port: 8080, want: "[::1]:8080 resolves to a private or reserved address"},
		{name: "ambiguous IPv4 name", scheme: "http", host: "127.1", want: `invalid URL: invalid host name "127.1": the last label must not be a number`},
		{name: "zone", private: true, scheme: "http", host: "fe80::1%eth0", want: `invalid URL: invalid host "fe80::1%eth0": IPv6 zones are not allowed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := policy
			if tt.private {
				p = private
			}
			g, err := capability.NewNetworkGrant(declared, p)
			require.NoError(t, err)
			cfg := Config{LookupIP: func(_ context.Context, host string) ([]netip.Addr, error) {
				var out []netip.Addr
				for _, s := range hosts[host] {
					out = append(out, netip.MustParseAddr(s))
				}
				if len(out) == 0 {
					return nil, fmt.Errorf("no such host %q", host)
				}
				return out, nil
			}}
			var mu sync.Mutex
			var denied []error
			d := NewDialer(g, cfg, func(err error) {
				mu.Lock()
				defer mu.Unlock()
				denied = append(denied, err)
			})
			d.dial = func(context.Context, string, string) (net.Conn, error) { return nil, errTestDial }

			conn, dialErr := d.Dial(t.Context(), tt.scheme, tt.host, tt.port)
			require.Nil(t, conn)

			f := New(g, cfg, nil).(*fetcher)
			f.dialer.dial = d.dial
			u := tt.scheme + "://" + tt.host
			if tt.port != 0 {
				h := tt.host
				if ip, err := netip.ParseAddr(h); err == nil && ip.Is6() {
					h = "[" + h + "]"
				}
				u = tt.scheme + "://" + h + ":" + strconv.Itoa(tt.port)
			}
			_, fetchErr := f.Fetch(t.Context(), tool.Request{URL: u + "/"})

			if tt.want == "" {
				require.ErrorIs(t, dialErr, errTestDial)
				require.ErrorIs(t, fetchErr, errTestDial)
				require.Empty(t, denied)
				return
			}
			require.EqualError(t, dialErr, "HOST_NOT_ALLOWED: "+tt.want)
			var den *tool.DenialError
			require.ErrorAs(t, dialErr, &den)
			require.ErrorIs(t, dialErr, tool.ErrHostNotAllowed)
			require.Len(t, denied, 1, "onDeny once per denial")
			require.Same(t, den, denied[0])
			if tt.name != "zone" { // a URL cannot carry this host as Dial gets it
				require.EqualError(t, fetchErr, dialErr.Error(), "the fetcher refuses it alike")
			}
		})
	}
}

// TestDialerConnects dials a loopback listener through the real socket
// path: allowed with allow_private_urls, refused by the control hook
// without it even when the lookup is skipped.
func TestDialerConnects(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	port := l.Addr().(*net.TCPAddr).Port
	lookup := func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}

	g, err := capability.NewNetworkGrant([]string{"local.test:*"}, capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true})
	require.NoError(t, err)
	conn, err := NewDialer(g, Config{LookupIP: lookup}, nil).Dial(t.Context(), "http", "local.test", port)
	require.NoError(t, err)
	defer conn.Close()
	a, err := l.Accept()
	require.NoError(t, err)
	defer a.Close()
	require.Equal(t, conn.LocalAddr().String(), a.RemoteAddr().String())

	g, err = capability.NewNetworkGrant([]string{"local.test:*"}, capability.NetworkPolicy{Allow: []string{"*:*"}})
	require.NoError(t, err)
	_, err = NewDialer(g, Config{LookupIP: lookup}, nil).Dial(t.Context(), "http", "local.test", port)
	require.EqualError(t, err, "HOST_NOT_ALLOWED: local.test:"+strconv.Itoa(port)+" resolves to a private or reserved address")
}

// TestDialerFailures: failures that are not denials are returned as they
// are and never reported.
func TestDialerFailures(t *testing.T) {
	t.Parallel()
	g, err := capability.NewNetworkGrant([]string{"*:*"}, capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true})
	require.NoError(t, err)
	reported := 0
	noHost := errors.New("no such host")
	d := NewDialer(g, Config{LookupIP: func(context.Context, string) ([]netip.Addr, error) { return nil, noHost }}, func(error) { reported++ })

	_, err = d.Dial(t.Context(), "https", "missing.test", 0)
	require.ErrorIs(t, err, noHost)
	require.EqualError(t, err, "resolve missing.test: no such host")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = d.Dial(ctx, "http", "127.0.0.1", 1)
	require.ErrorIs(t, err, context.Canceled)
	_, isDenial := tool.DenialCode(err)
	require.False(t, isDenial)

	_, err = d.Dial(t.Context(), "ftp", "127.0.0.1", 21)
	require.EqualError(t, err, `HOST_NOT_ALLOWED: scheme "ftp" is not allowed (only http and https)`)
	require.Equal(t, 1, reported)

	require.Panics(t, func() { NewDialer(g, Config{Timeout: -1}, nil) })
}
