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
		"http://allowed.com@evil.com/",
		"http://allowed.com%40evil.com/",
		"http://allo\u00adwed.com/",
		"http://allowed\u3002com/",
		"http://allowed.com%E3%80%82evil.com/",
		"http://\u0430llowed.com/",
		"http://0177.0.0.1/",
		"http://0x7f.1/",
		"http://0.0.0.0/",
		"http://[::]/",
		"http://[::ffff:7f00:1]/",
		"http://[64:ff9b::a9fe:a9fe]/",
		"http://[2002:a9fe:a9fe::]/",
		"http://[::a9fe:a9fe]/",
		"http://example.com:*/",
		"gopher://example.com/",
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
	fe.dialer.dial = func(context.Context, string, string) (net.Conn, error) {
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

// FuzzClassify checks the address policy on arbitrary addresses against
// the standard library's own predicates: nothing loopback, private,
// link-local, multicast or unspecified is ever public, no IPv6 form that
// embeds an IPv4 address is public, an embedded metadata address is
// metadata, and neither the zone nor IPv4 mapping changes the class.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		"8.8.8.8", "127.0.0.1", "169.254.169.254", "100.100.100.200", "0.0.0.0", "10.1.2.3",
		"::", "::1", "::ffff:127.0.0.1", "::a9fe:a9fe", "64:ff9b::a9fe:a9fe", "64:ff9b:1::a9fe:a9fe",
		"2002:a9fe:a9fe::", "2001::1", "fe80::1", "fd00:ec2::254", "2606:4700::1111", "ff02::1",
	} {
		a := netip.MustParseAddr(s)
		f.Add(a.AsSlice())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, ok := netip.AddrFromSlice(b)
		if !ok {
			t.Skip("not 4 or 16 bytes")
		}
		c := classify(a)
		u := a.Unmap()
		if c == addrPublic {
			require.False(t, u.IsLoopback() || u.IsPrivate() || u.IsLinkLocalUnicast() || u.IsLinkLocalMulticast() ||
				u.IsInterfaceLocalMulticast() || u.IsMulticast() || u.IsUnspecified(), "%s is public", a)
			require.True(t, u.Is4() || netip.MustParsePrefix("2000::/3").Contains(u), "%s is public", a)
			_, embeds := embeddedIPv4(u)
			require.False(t, embeds, "%s embeds an IPv4 address and is public", a)
		}
		if v4, ok := embeddedIPv4(u); ok && metadataAddrs[v4] {
			require.Equal(t, addrMetadata, c, "%s embeds %s", a, v4)
		}
		if metadataAddrs[u] {
			require.Equal(t, addrMetadata, c, "%s", a)
		}
		if u.Is4() {
			require.Equal(t, c, classify(netip.AddrFrom16(u.As16())), "%s and its IPv4-mapped form", a)
		} else {
			require.Equal(t, c, classify(u.WithZone("eth0")), "%s with a zone", a)
		}
	})
}
