package fetch

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// FuzzFetchURL feeds arbitrary URLs to a fetcher that allows every host
// name on every port, denies every IP literal, and whose names all resolve
// to 127.0.0.1 with private URLs refused: nothing may ever be dialled, and
// every error is a denial or a wrapped non-denial.
func FuzzFetchURL(f *testing.F) {
	for _, s := range []string{
		"http://example.com/",
		"https://EXAMPLE.com.:443/a?b=c#d",
		"http://127.0.0.1/",
		"http://[::1]:8080/",
		"http://[::ffff:127.0.0.1]/",
		"http://[fe80::1%25eth0]/",
		"http://0x7f000001/",
		"http://2130706433/",
		"http://127.1/",
		"http://localhost/",
		"http://metadata.google.internal/",
		"http://169.254.169.254/latest/meta-data/",
		"http://user:pw@example.com/",
		"ftp://example.com/",
		"file:///etc/passwd",
		"http://example.com:0/",
		"http://example.com:65536/",
		"http://exa mple.com/",
		"http://bücher.de/",
		"http://xn--bcher-kva.de/",
		"http://evil.com\\@good.com/",
		"http://good.com#@evil.com/",
		"http://%65xample.com/",
		"//example.com/",
		"http:example.com",
		"",
	} {
		f.Add(s)
	}

	g, err := capability.NewNetworkGrant([]string{"*"}, capability.NetworkPolicy{
		Allow: []string{"*:*"},
		Deny:  []string{"0.0.0.0/0", "::/0"},
	})
	require.NoError(f, err)
	var denials, dials atomic.Int64
	fe := New(g, Config{
		Timeout: 5 * time.Second,
		LookupIP: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
	}, func(error) { denials.Add(1) }).(*fetcher)
	fe.dial = func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		return nil, errors.New("fuzz: dial attempted")
	}

	f.Fuzz(func(t *testing.T, rawURL string) {
		before := denials.Load()
		resp, err := fe.Fetch(t.Context(), tool.Request{URL: rawURL, Header: map[string][]string{"Authorization": {"s3cr3t"}}})
		require.Nil(t, resp)
		require.Error(t, err)
		require.Zero(t, dials.Load(), "dialled for %q", rawURL)
		var d *tool.DenialError
		if errors.As(err, &d) {
			require.ErrorIs(t, err, tool.ErrHostNotAllowed)
			require.Equal(t, "HOST_NOT_ALLOWED: "+d.Detail, err.Error())
			require.Equal(t, before+1, denials.Load(), "onDeny once per denial")
		} else {
			require.True(t, strings.HasPrefix(err.Error(), "fetch "), "non-denial %q is wrapped", err)
			require.Equal(t, before, denials.Load())
		}
		require.NotContains(t, err.Error(), "s3cr3t")
	})
}
