package capability

import (
	"fmt"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

// Ceiling is a personality's optional allow list for secrets or processes
// ({allow: [...]}). A nil *Ceiling means no ceiling: the tool's declaration
// stands; a non-nil Ceiling with an empty Allow allows nothing.
type Ceiling struct {
	Allow []string
}

// clone returns a deep copy of c (nil stays nil).
func (c *Ceiling) clone() *Ceiling {
	if c == nil {
		return nil
	}
	return &Ceiling{Allow: slices.Clone(c.Allow)}
}

// ValidRef reports whether ref is a usable secret ref: non-empty segments
// separated by "/", none of them "." or "..", and no "*", "{" or "}" (the
// braces delimit refs in secret header templates, see ParseSecretTemplate).
func ValidRef(ref string) bool {
	if ref == "" || strings.ContainsAny(ref, "*{}") {
		return false
	}
	for seg := range strings.SplitSeq(ref, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// ValidateRefPattern checks a secret pattern: "*", a valid ref, or a valid
// ref followed by "/*".
func ValidateRefPattern(pattern string) error {
	if pattern == "*" || ValidRef(pattern) {
		return nil
	}
	if p, ok := strings.CutSuffix(pattern, "/*"); ok && ValidRef(p) {
		return nil
	}
	return fmt.Errorf("invalid secret pattern %q: want a ref like a/b, a prefix like a/* or *", pattern)
}

// RefMatch reports whether a secret pattern matches ref. The ref must be
// valid (see ValidRef), even under "*". A pattern "p/*" matches refs with
// strictly more segments whose leading segments equal p; "*" matches every
// valid ref; any other valid pattern matches only itself. Malformed patterns
// match nothing.
func RefMatch(pattern, ref string) bool {
	if !ValidRef(ref) {
		return false
	}
	if pattern == "*" {
		return true
	}
	if p, ok := strings.CutSuffix(pattern, "/*"); ok {
		return ValidRef(p) && strings.HasPrefix(ref, p+"/")
	}
	return ValidRef(pattern) && pattern == ref
}

// RefGrant is the resolved secret reach of one call: the tool's declared
// patterns, intersected with the personality's ceiling when there is one,
// the subset the tool may read raw, and the hosts each ref may be sent to. A
// nil *RefGrant allows nothing.
type RefGrant struct {
	// Declared are the tool's secrets patterns: the refs it may use at all.
	Declared []string
	// Raw are the tool's secrets_raw patterns: the refs (among Declared)
	// whose value it may read itself. Other refs can only be injected into
	// HTTP requests by the fetch accessor.
	Raw     []string
	Ceiling *Ceiling
	// Destinations are the personality's secrets.send_to bindings; the zero
	// value sends no secret anywhere.
	Destinations SecretDestinations
}

// Denial details of secrets: none echoes the ref.
const (
	secretDeniedDetail  = "requested secret is not permitted for this tool"
	secretNotRawDetail  = "requested secret may only be sent by the fetch accessor; the tool must declare it under secrets_raw to read its value"
	secretDestinationOn = "this secret may not be sent to "
)

// Check returns nil when ref matches a declared pattern and, when a ceiling
// is present, a ceiling pattern; otherwise tool.Deny(tool.ErrSecretNotDeclared,
// "requested secret is not permitted for this tool"), which never echoes the
// ref. It is the check for injection: a ref that passes may be sent by the
// fetch accessor to a bound host (CheckDestination).
func (g *RefGrant) Check(ref string) error {
	if g == nil || !refAllowed(g.Declared, ref) || (g.Ceiling != nil && !refAllowed(g.Ceiling.Allow, ref)) {
		return tool.Deny(tool.ErrSecretNotDeclared, secretDeniedDetail)
	}
	return nil
}

// CheckRaw returns nil when the tool may read ref's value itself: ref passes
// Check and matches a Raw pattern. A ref that passes Check only is refused
// with tool.Deny(tool.ErrSecretNotDeclared, "requested secret may only be
// sent by the fetch accessor; the tool must declare it under secrets_raw to
// read its value").
func (g *RefGrant) CheckRaw(ref string) error {
	if err := g.Check(ref); err != nil {
		return err
	}
	if !refAllowed(g.Raw, ref) {
		return tool.Deny(tool.ErrSecretNotDeclared, secretNotRawDetail)
	}
	return nil
}

// CheckDestination returns nil when ref may be sent to e: ref passes Check
// and the grant's Destinations bind it to e. Otherwise it returns Check's
// denial, or tool.Deny(tool.ErrSecretDestination, "this secret may not be
// sent to <host>") with <host> as Endpoint.String shows it.
func (g *RefGrant) CheckDestination(ref string, e Endpoint) error {
	if err := g.Check(ref); err != nil {
		return err
	}
	if !g.Destinations.Allows(ref, e) {
		return tool.Deny(tool.ErrSecretDestination, secretDestinationOn+e.String())
	}
	return nil
}

func refAllowed(patterns []string, ref string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return RefMatch(p, ref) })
}

// BinaryMatch reports whether an allowed-binaries entry allows binary: "*"
// allows any non-empty binary; a bare name allows that bare name only; a
// binary containing "/" is allowed only by an identical entry.
func BinaryMatch(entry, binary string) bool {
	if binary == "" {
		return false
	}
	return entry == "*" || entry == binary
}

// BinaryGrant is the resolved process reach of one call: the tool's declared
// binaries, intersected with the personality's ceiling when there is one. A
// nil *BinaryGrant allows nothing. Bare names are resolved to absolute paths
// on the trusted PATH by the runner, not here.
type BinaryGrant struct {
	Declared []string
	Ceiling  *Ceiling
	// Limits are the per-call ceilings of the children (the personality's
	// process.limits); zero fields take their defaults (WithDefaults).
	Limits ProcessLimits
}

// Check returns nil when binary is allowed by the declaration and, when a
// ceiling is present, by the ceiling; otherwise tool.Deny(tool.ErrBinaryNotAllowed,
// "<binary> is not in the declared allowedBinaries").
func (g *BinaryGrant) Check(binary string) error {
	if g == nil || !binaryAllowed(g.Declared, binary) || (g.Ceiling != nil && !binaryAllowed(g.Ceiling.Allow, binary)) {
		return tool.Deny(tool.ErrBinaryNotAllowed, binary+" is not in the declared allowedBinaries")
	}
	return nil
}

func binaryAllowed(entries []string, binary string) bool {
	return slices.ContainsFunc(entries, func(e string) bool { return BinaryMatch(e, binary) })
}

// validateBinaryEntry checks one non-empty allowed-binaries entry: "*", a
// bare name or a path (matched exactly), without control characters.
func validateBinaryEntry(e string) error {
	if strings.ContainsAny(e, "\x00\n\r") {
		return fmt.Errorf("binary %q contains a control character", e)
	}
	return nil
}
