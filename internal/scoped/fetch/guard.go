package fetch

import (
	"context"
	"errors"
	"net/netip"
	"syscall"

	"code.dny.dev/ssrf"

	"github.com/capstanhq/capstan/internal/capability"
)

// The address policy of the dial-time check has two parts.
//
// Private and reserved addresses are whatever code.dny.dev/ssrf refuses:
// every IPv4 prefix of the IANA special-purpose registry (this network,
// RFC 1918, CGNAT, loopback, link-local, documentation, benchmarking,
// AS112, 6to4 relay, multicast, reserved and broadcast), every IPv6 address
// outside global unicast 2000::/3 (unspecified, loopback, IPv4-mapped and
// IPv4-compatible forms, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, discard,
// ULA, link-local, site-local, multicast) and the special ranges inside it
// (Teredo and the other IETF assignments, 6to4 2002::/16, documentation,
// AS112). The library generates its tables from the IANA registries, so
// they follow the registries without hand edits here. NAT64 is refused as a
// whole (the library's default): a DNS64 network needs allow_private_urls.
//
// Cloud-metadata addresses are ours: the library has no such notion, and
// they must be refused even when the grant allows private addresses, with a
// message of their own. metadataAddrs is the small documented set below; an
// IPv6 address that embeds one of them (see embeddedIPv4) counts as well.

// addrClass is what the dial-time check makes of an address; a higher class
// is worse.
type addrClass int

const (
	addrPublic   addrClass = iota // globally reachable unicast
	addrReserved                  // private or reserved: refused unless AllowPrivateURLs
	addrMetadata                  // a cloud-metadata endpoint: always refused
)

// reservedGuard is the private-or-reserved test. Ports are the grant's
// business, not the guard's.
var reservedGuard = ssrf.New(ssrf.WithAnyPort())

// metadataAddrs are the cloud instance-metadata and credential endpoints.
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("169.254.169.254"): true, // AWS, GCP, Azure, OCI, DigitalOcean, OpenStack, ...
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

// IPv6 ranges that carry an IPv4 address, and where.
var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052: last 32 bits
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215: last 32 bits with a /96 inside it
	v4compat   = netip.MustParsePrefix("::/96")          // deprecated IPv4-compatible: last 32 bits
	sixToFour  = netip.MustParsePrefix("2002::/16")      // RFC 3056: bits 16 to 47
)

// classify returns the class of a. The zone is ignored and an IPv4-mapped
// address is judged as the IPv4 address it maps.
func classify(a netip.Addr) addrClass {
	a = a.WithZone("").Unmap()
	switch {
	case !a.IsValid():
		// The guard treats the zero Addr as an IPv4 address outside every
		// prefix, that is as public: refuse it here.
		return addrReserved
	case isMetadata(a):
		return addrMetadata
	case reservedGuard.SafeAddr(a) != nil:
		return addrReserved
	}
	return addrPublic
}

// isMetadata reports whether a (unmapped, no zone) is a cloud-metadata
// address or an IPv6 address embedding one.
func isMetadata(a netip.Addr) bool {
	if metadataAddrs[a] {
		return true
	}
	v4, ok := embeddedIPv4(a)
	return ok && metadataAddrs[v4]
}

// embeddedIPv4 returns the IPv4 address carried by a NAT64, IPv4-compatible
// or 6to4 address.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case nat64.Contains(a), nat64Local.Contains(a), v4compat.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

// screenAddrs refuses e when one of its addresses is a cloud-metadata
// address (always; this detail wins) or private or reserved (unless the
// grant allows private URLs).
func (d *Dialer) screenAddrs(e capability.Endpoint, addrs []netip.Addr) error {
	worst := addrPublic
	for _, a := range addrs {
		worst = max(worst, classify(a))
	}
	switch {
	case worst == addrMetadata:
		return deny(e.String() + " is a cloud metadata address")
	case worst == addrReserved && !d.allowPrivate():
		return deny(e.String() + " resolves to a private or reserved address")
	}
	return nil
}

func (d *Dialer) allowPrivate() bool { return d.grant != nil && d.grant.AllowPrivateURLs }

// endpointKey carries the endpoint being dialled to control.
type endpointKey struct{}

// control is the net.Dialer's ControlContext: the last check, on the socket
// address itself, after the socket is created and before it connects. The
// addresses dialled were screened already; this makes the policy hold for
// every connection the Dialer opens even if a path that skips the
// screening is added later. Unless the grant allows private URLs, the
// guard's own Safe runs too (it also admits only tcp4 and tcp6).
func (d *Dialer) control(ctx context.Context, network, address string, c syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return deny("invalid URL: cannot dial " + address)
	}
	e, ok := ctx.Value(endpointKey{}).(capability.Endpoint)
	if !ok {
		if e, err = capability.ParseEndpoint(schemeFrom(ctx, int(ap.Port())), ap.Addr().WithZone("").String(), int(ap.Port())); err != nil {
			return deny("invalid URL: " + err.Error())
		}
	}
	if err := d.screenAddrs(e, []netip.Addr{ap.Addr()}); err != nil {
		return err
	}
	if d.allowPrivate() {
		return nil
	}
	switch err := reservedGuard.Safe(network, ap.String(), c); {
	case errors.Is(err, ssrf.ErrProhibitedIP):
		return deny(e.String() + " resolves to a private or reserved address")
	case err != nil:
		return deny("invalid URL: " + err.Error())
	}
	return nil
}
