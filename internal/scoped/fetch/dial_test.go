package fetch

import (
	"context"
	"net"
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

// TestDNSRebindingToLoopback: the resolver answers a public address first
// and loopback after that, while the URL's port is an internal loopback
// service. The first fetch reaches the "public" server; every later
// connection is refused, and the internal service is never reached.
func TestDNSRebindingToLoopback(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t)
	secret, hits := secretServer(t)
	t.Cleanup(func() { require.Zero(t, hits.Load(), "the internal service was never reached") }) // after every subtest
	tests := []struct {
		name   string
		answer func(n int64) []string // the n-th lookup's answer, from 1
	}{
		{name: "public then loopback", answer: func(n int64) []string {
			if n == 1 {
				return []string{"8.8.8.8"}
			}
			return []string{"127.0.0.1"}
		}},
		{name: "public then IPv6 loopback", answer: func(n int64) []string {
			if n == 1 {
				return []string{"8.8.8.8"}
			}
			return []string{"::1"}
		}},
		{name: "public then mapped loopback", answer: func(n int64) []string {
			if n == 1 {
				return []string{"8.8.8.8"}
			}
			return []string{"::ffff:127.0.0.1"}
		}},
		{name: "public then public and loopback", answer: func(n int64) []string {
			if n == 1 {
				return []string{"8.8.8.8"}
			}
			return []string{"8.8.8.8", "127.0.0.1"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			e := newEnv(t, envOpts{
				declared: []string{"rebind.test:*"},
				policy:   capability.NetworkPolicy{Allow: []string{"*:*"}},
				cfg: Config{LookupIP: func(context.Context, string) ([]netip.Addr, error) {
					var out []netip.Addr
					for _, s := range tt.answer(n.Add(1)) {
						out = append(out, netip.MustParseAddr(s))
					}
					return out, nil
				}},
				dialTo: srv.Listener.Addr().String(),
			})
			url := "http://rebind.test:" + secret + "/echo"
			resp, err := e.fetch(t, tool.Request{URL: url})
			require.NoError(t, err)
			require.Equal(t, 201, resp.StatusCode, "the public answer reaches the public server")
			for i := range 5 {
				_, err = e.fetch(t, tool.Request{URL: url})
				requireDenied(t, e, err, "rebind.test:"+secret+" resolves to a private or reserved address", i+1)
			}
			_, err = e.fetch(t, tool.Request{URL: to("http://rebind.test:"+secret, "/echo")})
			requireDenied(t, e, err, "rebind.test:"+secret+" resolves to a private or reserved address", 6)
			require.Equal(t, []string{"8.8.8.8:" + secret}, e.dialledAddrs(), "only the public address was ever dialled")
		})
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		addr string
		want addrClass
	}{
		{"public IPv4", "8.8.8.8", addrPublic},
		{"public IPv4 2", "1.1.1.1", addrPublic},
		{"public IPv4 3", "93.184.216.34", addrPublic},
		{"this network", "0.0.0.0", addrReserved},
		{"this network range", "0.1.2.3", addrReserved},
		{"RFC 1918 10/8", "10.0.0.1", addrReserved},
		{"RFC 1918 172.16/12 start", "172.16.0.1", addrReserved},
		{"RFC 1918 172.16/12 end", "172.31.255.255", addrReserved},
		{"just past 172.16/12", "172.32.0.1", addrPublic},
		{"RFC 1918 192.168/16", "192.168.1.1", addrReserved},
		{"loopback", "127.0.0.1", addrReserved},
		{"loopback range end", "127.255.255.254", addrReserved},
		{"link-local", "169.254.1.1", addrReserved},
		{"CGNAT start", "100.64.0.1", addrReserved},
		{"CGNAT end", "100.127.255.255", addrReserved},
		{"just past CGNAT", "100.128.0.1", addrPublic},
		{"IETF protocol assignments", "192.0.0.8", addrReserved},
		{"TEST-NET-1", "192.0.2.1", addrReserved},
		{"AS112", "192.31.196.1", addrReserved},
		{"6to4 relay anycast", "192.88.99.1", addrReserved},
		{"benchmarking", "198.18.0.1", addrReserved},
		{"TEST-NET-2", "198.51.100.1", addrReserved},
		{"TEST-NET-3", "203.0.113.1", addrReserved},
		{"multicast", "224.0.0.1", addrReserved},
		{"multicast SSDP", "239.255.255.250", addrReserved},
		{"reserved class E", "240.0.0.1", addrReserved},
		{"broadcast", "255.255.255.255", addrReserved},
		{"AWS metadata", "169.254.169.254", addrMetadata},
		{"ECS credentials", "169.254.170.2", addrMetadata},
		{"EKS pod identity", "169.254.170.23", addrMetadata},
		{"Alibaba metadata", "100.100.100.200", addrMetadata},
		{"public IPv6", "2606:4700::1111", addrPublic},
		{"public IPv6 2", "2001:4860:4860::8888", addrPublic},
		{"unspecified IPv6", "::", addrReserved},
		{"loopback IPv6", "::1", addrReserved},
		{"IPv4-compatible private", "::10.0.0.1", addrReserved},
		{"IPv4-compatible public", "::8.8.8.8", addrReserved},
		{"IPv4-compatible metadata", "::169.254.169.254", addrMetadata},
		{"IPv4-mapped public", "::ffff:8.8.8.8", addrPublic},
		{"IPv4-mapped loopback", "::ffff:127.0.0.1", addrReserved},
		{"IPv4-mapped metadata", "::ffff:169.254.169.254", addrMetadata},
		{"NAT64 public is refused as a whole", "64:ff9b::8.8.8.8", addrReserved},
		{"NAT64 private", "64:ff9b::10.0.0.1", addrReserved},
		{"NAT64 loopback", "64:ff9b::7f00:1", addrReserved},
		{"NAT64 metadata", "64:ff9b::a9fe:a9fe", addrMetadata},
		{"NAT64 local-use", "64:ff9b:1::1", addrReserved},
		{"NAT64 local-use metadata", "64:ff9b:1::a9fe:a9fe", addrMetadata},
		{"6to4 public", "2002:808:808::1", addrReserved},
		{"6to4 loopback", "2002:7f00:1::", addrReserved},
		{"6to4 metadata", "2002:a9fe:a9fe::1", addrMetadata},
		{"Teredo", "2001:0:4136:e378:8000:63bf:3fff:fdd2", addrReserved},
		{"IETF assignments", "2001::1", addrReserved},
		{"documentation", "2001:db8::1", addrReserved},
		{"documentation 3fff", "3fff::1", addrReserved},
		{"AS112 IPv6", "2620:4f:8000::1", addrReserved},
		{"ULA", "fc00::1", addrReserved},
		{"ULA fd", "fd12:3456::1", addrReserved},
		{"link-local IPv6", "fe80::1", addrReserved},
		{"link-local IPv6 with zone", "fe80::1%eth0", addrReserved},
		{"public IPv6 with zone", "2606:4700::1111%eth0", addrPublic},
		{"site-local", "fec0::1", addrReserved},
		{"multicast IPv6", "ff02::1", addrReserved},
		{"discard", "100::1", addrReserved},
		{"SRv6 SIDs", "5f00::1", addrReserved},
		{"AWS IPv6 metadata", "fd00:ec2::254", addrMetadata},
		{"EKS IPv6 pod identity", "fd00:ec2::23", addrMetadata},
		{"GCP IPv6 metadata", "fd20:ce::254", addrMetadata},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, classify(netip.MustParseAddr(tt.addr)), tt.addr)
		})
	}
	require.Equal(t, addrReserved, classify(netip.Addr{}), "the zero address")
}

// acceptNext dials l with a plain dialer and returns the remote address of
// the first connection l accepts: when an earlier dial had connected, that
// connection is first in the accept queue and its address differs.
func acceptNext(t *testing.T, l net.Listener) (probe, accepted string) {
	t.Helper()
	c, err := (&net.Dialer{}).DialContext(t.Context(), "tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	a, err := l.Accept()
	require.NoError(t, err)
	defer a.Close()
	return c.LocalAddr().String(), a.RemoteAddr().String()
}

// TestDialControlRefusesBeforeConnect calls the fetcher's own dialer (its
// control hook) directly, skipping every earlier check, on a loopback
// listener: without AllowPrivateURLs the socket never connects.
func TestDialControlRefusesBeforeConnect(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	_, port, err := net.SplitHostPort(l.Addr().String())
	require.NoError(t, err)
	everything := capability.NetworkPolicy{Allow: []string{"*:*"}}

	t.Run("refused by IP", func(t *testing.T) {
		g, err := capability.NewNetworkGrant([]string{"*"}, everything)
		require.NoError(t, err)
		f := New(g, Config{}, nil).(*fetcher)
		conn, err := f.dialer.dial(t.Context(), "tcp", l.Addr().String())
		require.Nil(t, conn)
		require.ErrorIs(t, err, tool.ErrHostNotAllowed)
		require.ErrorContains(t, err, "HOST_NOT_ALLOWED: 127.0.0.1:"+port+" resolves to a private or reserved address")
		probe, accepted := acceptNext(t, l)
		require.Equal(t, probe, accepted, "the refused dial never connected")
	})
	t.Run("refused by name", func(t *testing.T) {
		g, err := capability.NewNetworkGrant([]string{"*"}, everything)
		require.NoError(t, err)
		f := New(g, Config{}, nil).(*fetcher)
		e, err := capability.ParseEndpoint("https", "Internal.Test", 0)
		require.NoError(t, err)
		ctx := context.WithValue(t.Context(), endpointKey{}, e)
		_, err = f.dialer.dial(ctx, "tcp", l.Addr().String())
		require.ErrorContains(t, err, "HOST_NOT_ALLOWED: internal.test resolves to a private or reserved address")
		probe, accepted := acceptNext(t, l)
		require.Equal(t, probe, accepted)
	})
	t.Run("private allowed", func(t *testing.T) {
		g, err := capability.NewNetworkGrant([]string{"*"}, capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true})
		require.NoError(t, err)
		f := New(g, Config{}, nil).(*fetcher)
		conn, err := f.dialer.dial(t.Context(), "tcp", l.Addr().String())
		require.NoError(t, err)
		defer conn.Close()
		a, err := l.Accept()
		require.NoError(t, err)
		defer a.Close()
		require.Equal(t, conn.LocalAddr().String(), a.RemoteAddr().String())
	})
}

// TestControlHook calls the control hook on addresses that are never
// dialled: it is the last word on metadata, private addresses and networks.
func TestControlHook(t *testing.T) {
	t.Parallel()
	everything := capability.NetworkPolicy{Allow: []string{"*:*"}}
	private := capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true}
	tests := []struct {
		name    string
		policy  capability.NetworkPolicy
		network string
		addr    string
		want    string // "" = allowed
	}{
		{"public", everything, "tcp4", "8.8.8.8:443", ""},
		{"public IPv6", everything, "tcp6", "[2606:4700::1111]:80", ""},
		{"loopback", everything, "tcp4", "127.0.0.1:80", "127.0.0.1 resolves to a private or reserved address"},
		{"loopback allowed", private, "tcp4", "127.0.0.1:80", ""},
		{"mapped loopback", everything, "tcp6", "[::ffff:127.0.0.1]:80", "127.0.0.1 resolves to a private or reserved address"},
		{"metadata", everything, "tcp4", "169.254.169.254:80", "169.254.169.254 is a cloud metadata address"},
		{"metadata with private allowed", private, "tcp4", "169.254.169.254:80", "169.254.169.254 is a cloud metadata address"},
		{"NAT64 metadata with private allowed", private, "tcp6", "[64:ff9b::a9fe:a9fe]:80", "[64:ff9b::a9fe:a9fe] is a cloud metadata address"},
		{"6to4 metadata with private allowed", private, "tcp6", "[2002:a9fe:a9fe::]:80", "[2002:a9fe:a9fe::] is a cloud metadata address"},
		{"link-local with zone", everything, "tcp6", "[fe80::1%eth0]:80", "[fe80::1] resolves to a private or reserved address"},
		{"port shown when not default", everything, "tcp4", "10.0.0.1:8080", "10.0.0.1:8080 resolves to a private or reserved address"},
		{"not TCP", everything, "udp4", "8.8.8.8:53", "invalid URL: prohibited network type: udp4 is not a permitted network type (tcp4, tcp6)"},
		{"not an address", everything, "tcp4", "example.com:80", "invalid URL: cannot dial example.com:80"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := capability.NewNetworkGrant([]string{"*"}, tt.policy)
			require.NoError(t, err)
			f := New(g, Config{}, nil).(*fetcher)
			err = f.dialer.control(t.Context(), tt.network, tt.addr, nil)
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, "HOST_NOT_ALLOWED: "+tt.want)
			require.ErrorIs(t, err, tool.ErrHostNotAllowed)
		})
	}
}
