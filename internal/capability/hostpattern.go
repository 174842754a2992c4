package capability

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

type patternKind int

const (
	kindAnyHost patternKind = iota + 1 // "*"
	kindName                           // "example.com"
	kindSuffix                         // "*.example.com"
	kindPrefix                         // "10.1.2.3", "10.1.2.0/24", "[::1]"
)

// HostPattern is one parsed host pattern of a network allow list, deny list or
// tool declaration. Build it with ParseHostPattern.
type HostPattern struct {
	raw     string
	kind    patternKind
	name    string       // kindName: the name; kindSuffix: the parent name
	prefix  netip.Prefix // kindPrefix: single IPs are /32 or /128
	port    int          // 0 = no port given
	anyPort bool         // ":*"
}

// ParseHostPattern parses a host pattern:
//
//	"*"              any host on the scheme's default port
//	"*:*"            any host, any port
//	"example.com"    that name
//	"*.example.com"  names with at least one more label (never example.com itself)
//	"10.1.2.3"       an IP literal; "[::1]" in brackets for IPv6 with a port
//	"10.1.2.0/24"    a CIDR range; "fd00::/8" or "[fd00::/8]:8080" for IPv6
//	"<host>:8443"    that port only; "<host>:*" any port
//
// Names are normalised as NormalizeHost does. Without a port, an allow entry
// means the scheme's default port and a deny entry every port.
func ParseHostPattern(s string) (HostPattern, error) {
	p := HostPattern{raw: s}
	host, port, hasPort, err := splitPatternPort(s)
	if err != nil {
		return HostPattern{}, fmt.Errorf("invalid host pattern %q: %w", s, err)
	}
	switch {
	case !hasPort:
	case port == "*":
		p.anyPort = true
	default:
		n, err := parsePort(port)
		if err != nil {
			return HostPattern{}, fmt.Errorf("invalid host pattern %q: %w", s, err)
		}
		p.port = n
	}
	if err := p.parseHost(host); err != nil {
		return HostPattern{}, fmt.Errorf("invalid host pattern %q: %w", s, err)
	}
	return p, nil
}

// splitPatternPort separates "host:port". A bare IPv6 address or prefix (two
// colons or more, no brackets) has no port; brackets are removed.
func splitPatternPort(s string) (host, port string, hasPort bool, err error) {
	if s == "" {
		return "", "", false, errors.New("empty pattern")
	}
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false, errors.New("unbalanced bracket")
		}
		host, rest := s[1:end], s[end+1:]
		if !strings.Contains(host, ":") {
			return "", "", false, errors.New("brackets need an IPv6 address")
		}
		if rest == "" {
			return host, "", false, nil
		}
		if !strings.HasPrefix(rest, ":") {
			return "", "", false, errors.New("unexpected text after ']'")
		}
		return host, rest[1:], true, nil
	}
	if strings.Count(s, ":") == 1 {
		host, port, _ := strings.Cut(s, ":")
		return host, port, true, nil
	}
	return s, "", false, nil
}

func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("port %q must be a number from 1 to 65535", s)
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %q must be a number from 1 to 65535", s)
	}
	return n, nil
}

func (p *HostPattern) parseHost(host string) error {
	switch {
	case host == "*":
		p.kind = kindAnyHost
		return nil
	case strings.HasPrefix(host, "*."):
		parent := host[2:]
		if strings.Contains(parent, "*") {
			return errors.New(`"*" is allowed only as the whole host or a leading "*." label`)
		}
		h, err := parseHost(parent)
		if err != nil {
			return err
		}
		if h.isIP() {
			return errors.New(`"*." must be followed by a host name, not an IP address`)
		}
		p.kind, p.name = kindSuffix, h.name
		return nil
	case strings.Contains(host, "*"):
		return errors.New(`"*" is allowed only as the whole host or a leading "*." label`)
	case strings.Contains(host, "/"):
		prefix, err := netip.ParsePrefix(host)
		if err != nil {
			return err
		}
		if prefix.Addr().Is4In6() {
			return errors.New("IPv4-mapped IPv6 prefixes are not supported; use the IPv4 form")
		}
		p.kind, p.prefix = kindPrefix, prefix.Masked()
		return nil
	}
	h, err := parseHost(host)
	if err != nil {
		return err
	}
	if h.isIP() {
		p.kind, p.prefix = kindPrefix, netip.PrefixFrom(h.ip, h.ip.BitLen())
		return nil
	}
	p.kind, p.name = kindName, h.name
	return nil
}

// String returns the pattern as written.
func (p HostPattern) String() string { return p.raw }

// Match reports whether the pattern, as an allow entry, matches e: the host
// matches and the port is the pattern's port, any port for ":*", or the
// scheme's default port when the pattern has none.
func (p HostPattern) Match(e Endpoint) bool {
	return p.matchHost(e.host) && p.matchPort(e, false)
}

// MatchDeny reports whether the pattern, as a deny entry, matches e. It
// differs from Match only in that a pattern without a port matches every port.
func (p HostPattern) MatchDeny(e Endpoint) bool {
	return p.matchHost(e.host) && p.matchPort(e, true)
}

func (p HostPattern) matchHost(h hostKey) bool {
	switch p.kind {
	case kindAnyHost:
		return h.isIP() || h.name != ""
	case kindName:
		return !h.isIP() && h.name != "" && h.name == p.name
	case kindSuffix:
		return !h.isIP() && len(h.name) > len(p.name)+1 && strings.HasSuffix(h.name, "."+p.name)
	case kindPrefix:
		return h.isIP() && p.prefix.Contains(h.ip)
	}
	return false
}

func (p HostPattern) matchPort(e Endpoint, deny bool) bool {
	switch {
	case p.anyPort:
		return true
	case p.port != 0:
		return e.port == p.port
	case deny:
		return true
	}
	return e.isDefaultPort()
}

// Covers reports whether every endpoint that q matches as an allow entry is
// matched by p (as an allow entry, or as a deny entry when deny is true). It
// is how registration-time validation decides that a declared host lies
// inside a personality's list. A pattern covers only what a single other
// pattern covers; a union of narrower entries is not combined.
func (p HostPattern) Covers(q HostPattern, deny bool) bool {
	return p.coversHost(q) && p.coversPort(q, deny)
}

func (p HostPattern) coversHost(q HostPattern) bool {
	switch {
	case p.kind == kindAnyHost:
		return q.kind != 0
	case q.kind == kindAnyHost:
		return false
	case p.kind == kindName:
		return q.kind == kindName && q.name == p.name
	case p.kind == kindSuffix:
		switch q.kind {
		case kindName:
			return strings.HasSuffix(q.name, "."+p.name)
		case kindSuffix:
			return q.name == p.name || strings.HasSuffix(q.name, "."+p.name)
		}
		return false
	case p.kind == kindPrefix:
		return q.kind == kindPrefix && q.prefix.Addr().Is4() == p.prefix.Addr().Is4() &&
			q.prefix.Bits() >= p.prefix.Bits() && p.prefix.Contains(q.prefix.Addr())
	}
	return false
}

func (p HostPattern) coversPort(q HostPattern, deny bool) bool {
	switch {
	case p.anyPort:
		return true
	case p.port != 0:
		return q.port == p.port
	case deny:
		return true
	}
	return q.port == 0 && !q.anyPort
}

// HostList is a parsed list of host patterns.
type HostList []HostPattern

// ParseHostList parses every pattern; the error joins one error per
// malformed pattern.
func ParseHostList(patterns []string) (HostList, error) {
	list := make(HostList, 0, len(patterns))
	var errs []error
	for _, s := range patterns {
		p, err := ParseHostPattern(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		list = append(list, p)
	}
	return list, errors.Join(errs...)
}

// Allows reports whether an entry of the list, read as an allow entry,
// matches e.
func (l HostList) Allows(e Endpoint) bool {
	for _, p := range l {
		if p.Match(e) {
			return true
		}
	}
	return false
}

// Denies reports whether an entry of the list, read as a deny entry, matches e.
func (l HostList) Denies(e Endpoint) bool {
	for _, p := range l {
		if p.MatchDeny(e) {
			return true
		}
	}
	return false
}

// Covers reports whether one entry of the list covers q (see HostPattern.Covers).
func (l HostList) Covers(q HostPattern, deny bool) bool {
	for _, p := range l {
		if p.Covers(q, deny) {
			return true
		}
	}
	return false
}
