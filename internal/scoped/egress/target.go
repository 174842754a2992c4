package egress

import (
	"errors"
	"strings"
)

// Errors of splitAuthority; none quotes the input.
var (
	errNoHost        = errors.New("missing host")
	errNoPort        = errors.New("missing port")
	errBadPort       = errors.New("port must be a number from 1 to 65535")
	errBadBrackets   = errors.New("unbalanced or misplaced brackets")
	errBareIPv6      = errors.New("an IPv6 address needs brackets")
	errAfterBrackets = errors.New("unexpected text after ']'")
)

// splitAuthority splits a request target's authority "host[:port]" (the
// whole target of CONNECT, the host part of an absolute-form URL). An IPv6
// host is in brackets, which are removed. A missing or empty port is
// defaultPort, an error when defaultPort is 0 (CONNECT needs one). The host
// is returned as written: the Dialer normalises and checks it.
func splitAuthority(s string, defaultPort int) (host string, port int, err error) {
	portText, hasPort := "", false
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, errBadBrackets
		}
		host = s[1:end]
		if !strings.Contains(host, ":") || strings.ContainsAny(host, "[]") {
			return "", 0, errBadBrackets
		}
		switch rest := s[end+1:]; {
		case rest == "":
		case rest[0] == ':':
			portText, hasPort = rest[1:], true
		default:
			return "", 0, errAfterBrackets
		}
	case strings.ContainsAny(s, "[]"):
		return "", 0, errBadBrackets
	default:
		switch strings.Count(s, ":") {
		case 0:
			host = s
		case 1:
			host, portText, _ = strings.Cut(s, ":")
			hasPort = true
		default:
			return "", 0, errBareIPv6
		}
	}
	if host == "" {
		return "", 0, errNoHost
	}
	if !hasPort || portText == "" {
		if defaultPort == 0 {
			return "", 0, errNoPort
		}
		return host, defaultPort, nil
	}
	port, err = parsePort(portText)
	if err != nil {
		return "", 0, err
	}
	return host, port, nil
}

// parsePort reads a decimal port from 1 to 65535 (ASCII digits only, no
// sign, at most 5 digits).
func parsePort(s string) (int, error) {
	if len(s) == 0 || len(s) > 5 {
		return 0, errBadPort
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, errBadPort
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > 65535 {
		return 0, errBadPort
	}
	return n, nil
}
