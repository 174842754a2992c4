package fetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// Dialer opens TCP connections under one call's capability.NetworkGrant with
// exactly the checks the fetch accessor's transport applies to each of its
// connections (the accessor dials through one): the grant's allow and deny
// lists (NetworkGrant.CheckEndpoint), cloud-metadata names and addresses,
// the address of an IP literal, DNS resolution through Config.LookupIP with
// every answer screened for private and reserved addresses (unless the grant
// has AllowPrivateURLs), and the control hook that checks the socket address
// once more before it connects. The checked addresses are dialled, never the
// name, so a second resolution (DNS rebinding) cannot change where the
// connection goes. A Dialer is safe for concurrent use.
type Dialer struct {
	grant  *capability.NetworkGrant // nil allows nothing
	cfg    Config
	onDeny func(error)

	// dial connects to an already checked "ip:port"; a field so tests can
	// count dials and send them to a loopback server.
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewDialer returns a Dialer that allows exactly the grant g (nil allows
// nothing). Of cfg it uses Timeout (the bound of one Dial, resolution
// included) and LookupIP; cfg is copied and defaulted, and NewDialer panics
// when cfg.Validate fails, which is a programmer error. onDeny, when not nil,
// is called once with every denial Dial returns (for the audit record); it
// must not block.
func NewDialer(g *capability.NetworkGrant, cfg Config, onDeny func(error)) *Dialer {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	d := &Dialer{grant: g, cfg: cfg.withDefaults(), onDeny: onDeny}
	nd := &net.Dialer{Timeout: d.cfg.Timeout, ControlContext: d.control}
	d.dial = nd.DialContext
	return d
}

// Dial connects to host and port over TCP for a request of scheme ("http" or
// "https", any letter case). The scheme decides only which port is the
// default one for the grant's port rule and how the host is named in
// messages: a pattern without a port allows 80 for http and 443 for https.
// host is a name or an IP literal (IPv6 with or without brackets); port 0
// means the scheme's default port.
//
// A target the grant does not allow is refused before any connection with a
// *tool.DenialError of kind tool.ErrHostNotAllowed, the same one the fetch
// accessor returns for it ("HOST_NOT_ALLOWED: <detail>", details as in
// capabilities.md), and onDeny is called once with it. Any other failure
// (resolution, connection refused, timeout, ctx done) is returned as is and
// is not a denial. The dial is bounded by Config.Timeout and by ctx.
func (d *Dialer) Dial(ctx context.Context, scheme, host string, port int) (net.Conn, error) {
	conn, err := d.connect(ctx, "tcp", scheme, host, port)
	if err != nil {
		var den *tool.DenialError
		if errors.As(err, &den) && d.onDeny != nil {
			d.onDeny(den)
		}
		return nil, err
	}
	return conn, nil
}

// dialContext is the fetch transport's only way out: it dials addr for the
// request being sent (whose scheme checkedTransport put in ctx) with the
// Dialer's checks. Denials are reported by Fetch, not here.
func (f *fetcher) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, deny("invalid URL: " + err.Error())
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, deny("invalid URL: invalid port " + strconv.Quote(portText))
	}
	return f.dialer.connect(ctx, network, schemeFrom(ctx, port), host, port)
}

// connect runs every check on scheme://host:port and dials the checked
// addresses in turn, returning the first connection or the first error.
func (d *Dialer) connect(ctx context.Context, network, scheme, host string, port int) (net.Conn, error) {
	// The fetch transport detaches the dial from the request's
	// cancellation; bound it here.
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()

	if s := strings.ToLower(scheme); capability.DefaultPort(s) == 0 {
		return nil, deny(fmt.Sprintf("scheme %q is not allowed (only http and https)", s))
	}
	e, err := capability.ParseEndpoint(scheme, host, port)
	if err != nil {
		return nil, deny("invalid URL: " + err.Error())
	}
	if err := d.grant.CheckEndpoint(e); err != nil {
		return nil, err
	}
	if err := d.screenStatic(e); err != nil {
		return nil, err
	}

	addrs, err := d.resolve(ctx, e)
	if err != nil {
		return nil, err
	}
	ctx = context.WithValue(ctx, endpointKey{}, e)
	var first error
	for _, a := range addrs {
		conn, err := d.dial(ctx, network, netip.AddrPortFrom(a, uint16(e.Port())).String())
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// resolve returns the checked addresses of e: its IP literal, or every
// address its name resolves to, all of which must pass screenAddrs.
func (d *Dialer) resolve(ctx context.Context, e capability.Endpoint) ([]netip.Addr, error) {
	if ip, ok := e.IP(); ok {
		return []netip.Addr{ip}, nil
	}
	addrs, err := d.cfg.LookupIP(ctx, e.Host())
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", e, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", e)
	}
	if err := d.screenAddrs(e, addrs); err != nil {
		return nil, err
	}
	out := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		out[i] = a.Unmap() // keeps the zone a link-local address needs
	}
	return out, nil
}

// screenStatic refuses what is known without DNS: an IP literal's address
// and the cloud-metadata names.
func (d *Dialer) screenStatic(e capability.Endpoint) error {
	if ip, ok := e.IP(); ok {
		return d.screenAddrs(e, []netip.Addr{ip})
	}
	if metadataNames[e.Host()] {
		return deny(e.String() + " is a cloud metadata address")
	}
	return nil
}
