package fetch

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// rebinding answers the first lookup with a public address and every later
// one with a private address, as a rebinding DNS server does.
func rebinding() func(context.Context, string) ([]netip.Addr, error) {
	var n atomic.Int64
	return func(context.Context, string) ([]netip.Addr, error) {
		if n.Add(1) == 1 {
			return []netip.Addr{netip.MustParseAddr("8.8.8.8")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
	}
}

func TestDNSRebindingAcrossRequests(t *testing.T) {
	t.Parallel()
	srv, port := newServer(t)
	e := newEnv(t, envOpts{
		declared: []string{"rebind.test:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}},
		cfg:      Config{LookupIP: rebinding()},
		dialTo:   srv.Listener.Addr().String(), // the "public" address is served on loopback
	})
	url := "http://rebind.test:" + port + "/echo"
	resp, err := e.fetch(t, tool.Request{URL: url})
	require.NoError(t, err)
	require.Equal(t, 201, resp.StatusCode)
	require.Equal(t, []string{"8.8.8.8:" + port}, e.dialledAddrs(), "the checked address is dialled")

	_, err = e.fetch(t, tool.Request{URL: url})
	requireDenied(t, e, err, "rebind.test:"+port+" resolves to a private or reserved address", 1)
	require.Equal(t, int64(1), e.dials.Load(), "the rebound address is never dialled")
}

func TestDNSRebindingWithinRedirectChain(t *testing.T) {
	t.Parallel()
	srv, port := newServer(t)
	e := newEnv(t, envOpts{
		declared: []string{"rebind.test:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}},
		cfg:      Config{LookupIP: rebinding()},
		dialTo:   srv.Listener.Addr().String(),
	})
	_, err := e.fetch(t, tool.Request{URL: to("http://rebind.test:"+port, "/echo")})
	requireDenied(t, e, err, "rebind.test:"+port+" resolves to a private or reserved address", 1)
	require.Equal(t, int64(1), e.dials.Load())
	require.Equal(t, int64(2), e.lookups.Load(), "each connection resolves again")
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := map[string]addrClass{
		"8.8.8.8":                addrPublic,
		"1.1.1.1":                addrPublic,
		"93.184.216.34":          addrPublic,
		"0.0.0.0":                addrReserved,
		"10.0.0.1":               addrReserved,
		"172.16.0.1":             addrReserved,
		"172.31.255.255":         addrReserved,
		"172.32.0.1":             addrPublic,
		"192.168.1.1":            addrReserved,
		"127.0.0.1":              addrReserved,
		"127.255.255.254":        addrReserved,
		"169.254.1.1":            addrReserved,
		"100.64.0.1":             addrReserved,
		"100.127.255.255":        addrReserved,
		"100.128.0.1":            addrPublic,
		"192.0.0.8":              addrReserved,
		"192.0.2.1":              addrReserved,
		"198.18.0.1":             addrReserved,
		"198.51.100.1":           addrReserved,
		"203.0.113.1":            addrReserved,
		"224.0.0.1":              addrReserved,
		"239.255.255.250":        addrReserved,
		"240.0.0.1":              addrReserved,
		"255.255.255.255":        addrReserved,
		"169.254.169.254":        addrMetadata,
		"169.254.170.2":          addrMetadata,
		"169.254.170.23":         addrMetadata,
		"100.100.100.200":        addrMetadata,
		"2606:4700::1111":        addrPublic,
		"2001:4860:4860::8888":   addrPublic,
		"::":                     addrReserved,
		"::1":                    addrReserved,
		"::10.0.0.1":             addrReserved,
		"::8.8.8.8":              addrReserved,
		"::169.254.169.254":      addrMetadata,
		"::ffff:8.8.8.8":         addrPublic,
		"::ffff:127.0.0.1":       addrReserved,
		"::ffff:169.254.169.254": addrMetadata,
		"64:ff9b::8.8.8.8":       addrPublic,
		"64:ff9b::10.0.0.1":      addrReserved,
		"64:ff9b::a9fe:a9fe":     addrMetadata,
		"64:ff9b:1::1":           addrReserved,
		"2002:808:808::1":        addrReserved,
		"2002:a9fe:a9fe::1":      addrMetadata,
		"2001::1":                addrReserved,
		"2001:db8::1":            addrReserved,
		"3fff::1":                addrReserved,
		"fc00::1":                addrReserved,
		"fd12:3456::1":           addrReserved,
		"fe80::1":                addrReserved,
		"fe80::1%eth0":           addrReserved,
		"fec0::1":                addrReserved,
		"ff02::1":                addrReserved,
		"100::1":                 addrReserved,
		"5f00::1":                addrReserved,
		"fd00:ec2::254":          addrMetadata,
		"fd00:ec2::23":           addrMetadata,
		"fd20:ce::254":           addrMetadata,
	}
	for s, want := range tests {
		require.Equal(t, want, classify(netip.MustParseAddr(s)), s)
	}
	require.Equal(t, addrReserved, classify(netip.Addr{}), "the zero address")
}
