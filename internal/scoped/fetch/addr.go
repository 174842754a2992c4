package fetch

import "net/netip"

// addrClass is what the dial-time check makes of an address; a higher class
// is worse.
type addrClass int

const (
	addrPublic   addrClass = iota // globally reachable unicast
	addrReserved                  // private, loopback, link-local, CGNAT, multicast, unspecified or otherwise special
	addrMetadata                  // a cloud-metadata endpoint: refused even with AllowPrivateURLs
)

// metadataAddrs are the cloud instance-metadata and credential endpoints.
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("169.254.169.254"): true, // AWS, GCP, Azure, OCI, DigitalOcean, ...
	netip.MustParseAddr("169.254.170.2"):   true, // AWS ECS task credentials
	netip.MustParseAddr("169.254.170.23"):  true, // AWS EKS Pod Identity
	netip.MustParseAddr("100.100.100.200"): true, // Alibaba Cloud
	netip.MustParseAddr("fd00:ec2::254"):   true, // AWS IMDS over IPv6
	netip.MustParseAddr("fd00:ec2::23"):    true, // AWS EKS Pod Identity over IPv6
	netip.MustParseAddr("fd20:ce::254"):    true, // GCP metadata over IPv6
}

// metadataNames are cloud-metadata host names, refused before any lookup.
var metadataNames = map[string]bool{
	"metadata.google.internal": true,
}

// reserved4 are the IPv4 ranges that are not globally reachable unicast
// (IANA special-purpose registry).
var reserved4 = prefixes(
	"0.0.0.0/8",       // "this network", unspecified
	"10.0.0.0/8",      // RFC 1918
	"100.64.0.0/10",   // CGNAT
	"127.0.0.0/8",     // loopback
	"169.254.0.0/16",  // link-local
	"172.16.0.0/12",   // RFC 1918
	"192.0.0.0/24",    // IETF protocol assignments
	"192.0.2.0/24",    // TEST-NET-1
	"192.88.99.0/24",  // 6to4 relay anycast
	"192.168.0.0/16",  // RFC 1918
	"198.18.0.0/15",   // benchmarking
	"198.51.100.0/24", // TEST-NET-2
	"203.0.113.0/24",  // TEST-NET-3
	"224.0.0.0/4",     // multicast
	"240.0.0.0/4",     // reserved, broadcast
)

var (
	// global6 is IPv6 global unicast; everything outside it (loopback,
	// unspecified, ULA fc00::/7, link-local fe80::/10, multicast ff00::/8,
	// discard 100::/64, SRv6 5f00::/16, ...) is reserved, apart from the
	// IPv4-embedding ranges below.
	global6 = netip.MustParsePrefix("2000::/3")
	// reservedGlobal6 are the special ranges inside 2000::/3.
	reservedGlobal6 = prefixes(
		"2001::/23",     // IETF protocol assignments, Teredo, benchmarking, ORCHID
		"2001:db8::/32", // documentation
		"3fff::/20",     // documentation
	)
	nat64     = netip.MustParsePrefix("64:ff9b::/96") // well-known NAT64: IPv4 in the last 32 bits
	v4compat  = netip.MustParsePrefix("::/96")        // deprecated IPv4-compatible: last 32 bits
	sixToFour = netip.MustParsePrefix("2002::/16")    // 6to4: IPv4 in bits 16 to 47
)

// classify returns the class of a. An address that embeds an IPv4 address
// (NAT64, 6to4, IPv4-compatible, IPv4-mapped) is at least as bad as the
// embedded address; 6to4 and IPv4-compatible addresses are reserved anyway.
func classify(a netip.Addr) addrClass {
	a = unmap(a)
	switch {
	case !a.IsValid():
		return addrReserved
	case metadataAddrs[a]:
		return addrMetadata
	case a.Is4():
		for _, p := range reserved4 {
			if p.Contains(a) {
				return addrReserved
			}
		}
		return addrPublic
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return classify(netip.AddrFrom4([4]byte(b[12:16])))
	case v4compat.Contains(a):
		return max(addrReserved, classify(netip.AddrFrom4([4]byte(b[12:16]))))
	case sixToFour.Contains(a):
		return max(addrReserved, classify(netip.AddrFrom4([4]byte(b[2:6]))))
	case !global6.Contains(a):
		return addrReserved
	}
	for _, p := range reservedGlobal6 {
		if p.Contains(a) {
			return addrReserved
		}
	}
	return addrPublic
}

// unmap drops a zone (prefixes never contain a zoned address) and turns an
// IPv4-mapped IPv6 address into IPv4.
func unmap(a netip.Addr) netip.Addr { return a.WithZone("").Unmap() }

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}
