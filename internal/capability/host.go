package capability

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// Default ports of the two schemes a fetcher may use.
const (
	defaultHTTPPort  = 80
	defaultHTTPSPort = 443
	maxNameLen       = 253
	maxLabelLen      = 63
)

// hostKey is a normalised host: exactly one of name (lower-case ASCII, no
// trailing dot) and ip (unmapped, no zone) is set.
type hostKey struct {
	name string
	ip   netip.Addr
}

func (h hostKey) isIP() bool { return h.ip.IsValid() }

// display is the host as shown in messages: IPv6 in brackets.
func (h hostKey) display() string {
	if !h.isIP() {
		return h.name
	}
	if h.ip.Is6() {
		return "[" + h.ip.String() + "]"
	}
	return h.ip.String()
}

// NormalizeHost returns the canonical form of a host name or IP literal, as
// every matcher of this package compares it: a name is lower-cased, loses one
// trailing dot and is converted to ASCII with the IDNA Lookup profile; an IP
// literal (IPv6 with or without brackets) is returned in its canonical text
// form without brackets, IPv4-mapped IPv6 addresses as IPv4. Invalid names,
// IPv6 zones and names whose last label looks like a number (an ambiguous
// IPv4 spelling such as 127.1 or 0x7f.1) are refused.
func NormalizeHost(host string) (string, error) {
	h, err := parseHost(host)
	if err != nil {
		return "", err
	}
	if h.isIP() {
		return h.ip.String(), nil
	}
	return h.name, nil
}

func parseHost(s string) (hostKey, error) {
	if s == "" {
		return hostKey{}, errors.New("empty host")
	}
	if strings.HasPrefix(s, "[") {
		if !strings.HasSuffix(s, "]") {
			return hostKey{}, fmt.Errorf("invalid host %q: unbalanced bracket", s)
		}
		ip, err := parseIP(s[1 : len(s)-1])
		if err != nil || !ip.Is6() || ip.Is4In6() {
			return hostKey{}, fmt.Errorf("invalid host %q: brackets need an IPv6 address", s)
		}
		return hostKey{ip: ip.Unmap()}, nil
	}
	if ip, err := parseIP(s); err == nil {
		return hostKey{ip: ip.Unmap()}, nil
	} else if strings.Contains(s, ":") {
		return hostKey{}, fmt.Errorf("invalid host %q: %w", s, err)
	}
	name, err := normalizeName(s)
	if err != nil {
		return hostKey{}, err
	}
	return hostKey{name: name}, nil
}

func parseIP(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, err
	}
	if ip.Zone() != "" {
		return netip.Addr{}, errors.New("IPv6 zones are not allowed")
	}
	return ip, nil
}

// normalizeName lower-cases s, removes one trailing dot, converts it to ASCII
// and checks the DNS shape of the result.
func normalizeName(s string) (string, error) {
	name := strings.TrimSuffix(strings.ToLower(s), ".")
	ascii, err := idna.Lookup.ToASCII(name)
	if err != nil {
		return "", fmt.Errorf("invalid host name %q: %w", s, err)
	}
	if ascii == "" || len(ascii) > maxNameLen {
		return "", fmt.Errorf("invalid host name %q: length must be 1 to %d", s, maxNameLen)
	}
	labels := strings.Split(ascii, ".")
	for _, l := range labels {
		if l == "" || len(l) > maxLabelLen {
			return "", fmt.Errorf("invalid host name %q: each label must be 1 to %d characters", s, maxLabelLen)
		}
	}
	if numericLabel(labels[len(labels)-1]) {
		return "", fmt.Errorf("invalid host name %q: the last label must not be a number", s)
	}
	return ascii, nil
}

// numericLabel reports whether l reads as an IPv4 number part (decimal, or
// hexadecimal with a 0x prefix), which URL parsers would take for an address.
func numericLabel(l string) bool {
	digits := l
	isHex := false
	if strings.HasPrefix(l, "0x") {
		digits, isHex = l[2:], true
	}
	for _, c := range digits {
		switch {
		case c >= '0' && c <= '9':
		case isHex && c >= 'a' && c <= 'f':
		default:
			return false
		}
	}
	return isHex || digits != ""
}

// DefaultPort returns the default port of scheme ("http" 80, "https" 443), or
// 0 for any other scheme.
func DefaultPort(scheme string) int {
	switch scheme {
	case "http":
		return defaultHTTPPort
	case "https":
		return defaultHTTPSPort
	}
	return 0
}

// Endpoint is a normalised request target: an http or https scheme, a host
// normalised by NormalizeHost and a port. Build it with ParseEndpoint.
type Endpoint struct {
	scheme string
	host   hostKey
	port   int
}

// ParseEndpoint normalises a request target. scheme must be http or https
// (any letter case); host is a name or an IP literal (IPv6 with or without
// brackets); port 0 means the scheme's default port.
func ParseEndpoint(scheme, host string, port int) (Endpoint, error) {
	scheme = strings.ToLower(scheme)
	def := DefaultPort(scheme)
	if def == 0 {
		return Endpoint{}, fmt.Errorf("scheme %q is not allowed (only http and https)", scheme)
	}
	if port == 0 {
		port = def
	}
	if port < 0 || port > 65535 {
		return Endpoint{}, fmt.Errorf("invalid port %d", port)
	}
	h, err := parseHost(host)
	if err != nil {
		return Endpoint{}, err
	}
	return Endpoint{scheme: scheme, host: h, port: port}, nil
}

// Scheme returns "http" or "https".
func (e Endpoint) Scheme() string { return e.scheme }

// Host returns the normalised host (an IPv6 address without brackets).
func (e Endpoint) Host() string {
	if e.host.isIP() {
		return e.host.ip.String()
	}
	return e.host.name
}

// Port returns the port, never 0 for an endpoint built by ParseEndpoint.
func (e Endpoint) Port() int { return e.port }

// IP returns the address of an IP-literal endpoint.
func (e Endpoint) IP() (netip.Addr, bool) { return e.host.ip, e.host.isIP() }

// String returns the host as shown in denial messages: lower-case ASCII, IPv6
// in brackets, ":port" appended when the port is not the scheme's default.
func (e Endpoint) String() string {
	s := e.host.display()
	if e.port != DefaultPort(e.scheme) {
		s += ":" + strconv.Itoa(e.port)
	}
	return s
}

// isDefaultPort reports whether the endpoint uses its scheme's default port.
func (e Endpoint) isDefaultPort() bool { return e.port == DefaultPort(e.scheme) }
