package fetch

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"github.com/capstanhq/capstan/internal/capability"
)

// dialContext is the transport's only way out. For every connection it
// checks the target against the grant again, resolves a name with
// Config.LookupIP, refuses the connection when any address is forbidden and
// then dials the checked addresses themselves, never the name, so a second
// resolution (DNS rebinding) cannot change where the connection goes. The
// dialer's control hook checks each socket address once more before it
// connects.
func (f *fetcher) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	// The transport detaches the dial from the request's cancellation;
	// bound it here.
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()

	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, deny("invalid URL: " + err.Error())
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, deny("invalid URL: invalid port " + strconv.Quote(portText))
	}
	e, err := capability.ParseEndpoint(schemeFrom(ctx, port), host, port)
	if err != nil {
		return nil, deny("invalid URL: " + err.Error())
	}
	if err := f.grant.CheckEndpoint(e); err != nil {
		return nil, err
	}
	if err := f.screenStatic(e); err != nil {
		return nil, err
	}

	addrs, err := f.resolve(ctx, e)
	if err != nil {
		return nil, err
	}
	ctx = context.WithValue(ctx, endpointKey{}, e)
	var first error
	for _, a := range addrs {
		conn, err := f.dial(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
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
func (f *fetcher) resolve(ctx context.Context, e capability.Endpoint) ([]netip.Addr, error) {
	if ip, ok := e.IP(); ok {
		return []netip.Addr{ip}, nil
	}
	addrs, err := f.cfg.LookupIP(ctx, e.Host())
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", e, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %s: no addresses", e)
	}
	if err := f.screenAddrs(e, addrs); err != nil {
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
func (f *fetcher) screenStatic(e capability.Endpoint) error {
	if ip, ok := e.IP(); ok {
		return f.screenAddrs(e, []netip.Addr{ip})
	}
	if metadataNames[e.Host()] {
		return deny(e.String() + " is a cloud metadata address")
	}
	return nil
}
