package capability

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

// NetworkPolicy is a personality's safety.network section.
type NetworkPolicy struct {
	// Allow lists the host patterns calls may reach; empty means none.
	Allow []string
	// Deny lists host patterns refused even when allowed; a deny entry
	// without a port denies every port.
	Deny []string
	// AllowPrivateURLs lets the dial reach private and loopback addresses
	// (never cloud-metadata addresses).
	AllowPrivateURLs bool
}

// NetworkGrant is the resolved network reach of one call: the tool's
// declared hosts intersected with the personality's allow list, minus its
// deny list. A nil *NetworkGrant allows nothing.
type NetworkGrant struct {
	declared    HostList
	declaredAll bool // declared "*": the allow list alone decides
	allow       HostList
	deny        HostList
	// AllowPrivateURLs is copied from the personality for the dial-time check.
	AllowPrivateURLs bool
}

// NewNetworkGrant builds the grant for a tool declaring the host patterns
// declared under a personality's policy. A declared entry "*" means whatever
// the allow list allows. Malformed patterns are an error.
func NewNetworkGrant(declared []string, policy NetworkPolicy) (*NetworkGrant, error) {
	g := &NetworkGrant{AllowPrivateURLs: policy.AllowPrivateURLs}
	var errs []error
	var explicit []string
	for _, h := range declared {
		if h == "*" {
			g.declaredAll = true
			continue
		}
		explicit = append(explicit, h)
	}
	var err error
	if g.declared, err = ParseHostList(explicit); err != nil {
		errs = append(errs, fmt.Errorf("network.allowed_hosts: %w", err))
	}
	if g.allow, err = ParseHostList(policy.Allow); err != nil {
		errs = append(errs, fmt.Errorf("safety.network.allow: %w", err))
	}
	if g.deny, err = ParseHostList(policy.Deny); err != nil {
		errs = append(errs, fmt.Errorf("safety.network.deny: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return g, nil
}

// Empty reports whether the grant allows no host at all: it is nil, the
// personality's allow list is empty, or the tool declared no host. (A
// declared host outside the allow list fails ValidateTool before any grant
// is resolved, so a non-empty grant allows at least one host.)
func (g *NetworkGrant) Empty() bool {
	return g == nil || len(g.allow) == 0 || (!g.declaredAll && len(g.declared) == 0)
}

// Check reports whether the grant allows a request to scheme://host:port
// (port 0 = the scheme's default). It returns nil or a *tool.DenialError of
// kind tool.ErrHostNotAllowed whose detail names the normalised host:
// "<host> is on the deny list" when a deny entry matches (deny always wins),
// else "<host> is not in the declared allowedHosts" unless both a declared
// pattern and an allow pattern match.
func (g *NetworkGrant) Check(scheme, host string, port int) error {
	if DefaultPort(strings.ToLower(scheme)) == 0 {
		return tool.Deny(tool.ErrHostNotAllowed, fmt.Sprintf("scheme %q is not allowed (only http and https)", strings.ToLower(scheme)))
	}
	e, err := ParseEndpoint(scheme, host, port)
	if err != nil {
		return tool.Deny(tool.ErrHostNotAllowed, "invalid URL: "+err.Error())
	}
	return g.CheckEndpoint(e)
}

// CheckEndpoint is Check for an already normalised endpoint.
func (g *NetworkGrant) CheckEndpoint(e Endpoint) error {
	if e.scheme == "" {
		return tool.Deny(tool.ErrHostNotAllowed, "invalid URL: missing host")
	}
	if g != nil && g.deny.Denies(e) {
		return tool.Deny(tool.ErrHostNotAllowed, e.String()+" is on the deny list")
	}
	if g == nil || !g.allow.Allows(e) || (!g.declaredAll && !g.declared.Allows(e)) {
		return tool.Deny(tool.ErrHostNotAllowed, e.String()+notAllowedSuffix)
	}
	return nil
}

// notAllowedSuffix ends the detail of CheckEndpoint's refusal of a host
// outside the grant.
const notAllowedSuffix = " is not in the declared allowedHosts"

// NotAllowedHost reports whether err is (or wraps) the refusal Check and
// CheckEndpoint return for a host outside the grant's allow lists ("<host>
// is not in the declared allowedHosts"), as opposed to a deny-list entry, an
// address refused at dial time or a malformed target, and returns the host
// as that refusal names it (Endpoint.String: lower-case ASCII, IPv6 in
// brackets, ":port" when not the scheme's default).
func NotAllowedHost(err error) (string, bool) {
	var d *tool.DenialError
	if !errors.As(err, &d) || d.Kind != tool.ErrHostNotAllowed {
		return "", false
	}
	host, ok := strings.CutSuffix(d.Detail, notAllowedSuffix)
	// A normalised host has no space; every other detail with this
	// ending (none today) would.
	if !ok || host == "" || strings.ContainsAny(host, " \t") {
		return "", false
	}
	return host, true
}

// CheckURL performs the pure pre-checks a fetcher runs on every URL (and each
// redirect hop) before matching the host: only http and https, no user info,
// a host and a valid port. It returns the lower-case scheme, the normalised
// host (IPv6 without brackets) and the port (the scheme's default when the
// URL has none). Errors are *tool.DenialError of kind tool.ErrHostNotAllowed:
// `scheme "<s>" is not allowed (only http and https)`, `URLs with user info
// are not allowed` or `invalid URL: <reason>`.
func CheckURL(rawURL string) (scheme, host string, port int, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		reason := err.Error()
		if errors.As(err, &ue) {
			reason = ue.Err.Error()
		}
		return "", "", 0, tool.Deny(tool.ErrHostNotAllowed, "invalid URL: "+reason)
	}
	scheme = strings.ToLower(u.Scheme)
	if scheme == "" {
		return "", "", 0, tool.Deny(tool.ErrHostNotAllowed, "invalid URL: missing scheme")
	}
	if DefaultPort(scheme) == 0 {
		return "", "", 0, tool.Deny(tool.ErrHostNotAllowed, fmt.Sprintf("scheme %q is not allowed (only http and https)", scheme))
	}
	if u.User != nil {
		return "", "", 0, tool.Deny(tool.ErrHostNotAllowed, "URLs with user info are not allowed")
	}
	if u.Host == "" {
		return "", "", 0, tool.Deny(tool.ErrHostNotAllowed, "invalid URL: missing host")
	}
	if p := u.Port(); p != "" {
		if port, err = parsePort(p); err != nil {
			return "", "", 0, tool.Deny(tool.ErrHostNotAllowed, "invalid URL: "+err.Error())
		}
	}
	e, err := ParseEndpoint(scheme, u.Hostname(), port)
	if err != nil {
		return "", "", 0, tool.Deny(tool.ErrHostNotAllowed, "invalid URL: "+err.Error())
	}
	return e.scheme, e.Host(), e.port, nil
}
