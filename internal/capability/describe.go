package capability

import "slices"

// This file describes resolved grants for people (dispatcher explain): each
// method answers "what does this grant allow" from the grant the worker
// resolves, never from the personality alone, so that the description and
// the enforcement cannot drift apart.

// Hosts returns the host patterns, as written, that a request must match to
// pass the grant (before the deny list, see Denied): the personality's
// allow list when the tool declared "*", else the tool's declared patterns
// that one allow entry covers (ValidateTool refuses a declared pattern that
// none covers, so after validation that is every declared pattern). It
// returns nil for a nil grant and an empty, non-nil slice for a grant that
// allows no host at all (Empty).
func (g *NetworkGrant) Hosts() []string {
	if g == nil {
		return nil
	}
	out := []string{}
	if g.Empty() {
		return out
	}
	if g.declaredAll {
		return appendUnique(out, patternStrings(g.allow)...)
	}
	for _, d := range g.declared {
		if g.allow.Covers(d, false) {
			out = appendUnique(out, d.String())
		}
	}
	return out
}

// Denied returns the personality's deny list, as written: patterns refused
// even when Hosts allows them (a pattern without a port denies every port).
// nil when there are none.
func (g *NetworkGrant) Denied() []string {
	if g == nil || len(g.deny) == 0 {
		return nil
	}
	return patternStrings(g.deny)
}

func patternStrings(l HostList) []string {
	out := make([]string, len(l))
	for i, p := range l {
		out[i] = p.String()
	}
	return out
}

// IntersectRefPatterns returns the secret pattern that matches exactly the
// refs both a and b match (patterns as in RefMatch: "*", "p/*" or a ref):
// the narrower of the two when one covers the other; ok is false when no
// ref matches both (or either pattern is malformed). Two patterns are
// always nested or disjoint, so the answer is exact.
func IntersectRefPatterns(a, b string) (string, bool) {
	if ValidateRefPattern(a) != nil || ValidateRefPattern(b) != nil {
		return "", false
	}
	switch {
	case refPatternCovers(a, b):
		return b, true
	case refPatternCovers(b, a):
		return a, true
	}
	return "", false
}

// Refs returns the secret patterns whose refs the grant lets the tool use
// (Check): each declared pattern intersected with the ceiling's patterns
// when there is a ceiling (IntersectRefPatterns), in declaration order,
// without duplicates. Malformed declared patterns match nothing and are
// left out. It returns nil for a nil grant and an empty, non-nil slice when
// no ref passes.
func (g *RefGrant) Refs() []string {
	if g == nil {
		return nil
	}
	out := []string{}
	for _, d := range g.Declared {
		if ValidateRefPattern(d) != nil {
			continue
		}
		if g.Ceiling == nil {
			out = appendUnique(out, d)
			continue
		}
		for _, c := range g.Ceiling.Allow {
			if x, ok := IntersectRefPatterns(d, c); ok {
				out = appendUnique(out, x)
			}
		}
	}
	return out
}

// RawRefs returns the patterns, among Refs, whose value the tool may read
// itself (CheckRaw: the tool's secrets_raw); nil for a nil grant, empty
// when the tool may read no value (it can only have secrets injected).
func (g *RefGrant) RawRefs() []string {
	if g == nil {
		return nil
	}
	return intersectAll(g.Refs(), g.Raw)
}

// SendTo returns where the grant's refs may be sent over HTTP
// (CheckDestination): for each send_to binding whose pattern meets a
// pattern of Refs, the intersection of the two patterns mapped to the
// binding's host patterns as written (the hosts of several bindings that
// give one pattern add up). A ref no key matches is sent nowhere. The
// hosts must still pass the network grant. nil when no ref may be sent
// anywhere.
func (g *RefGrant) SendTo() map[string][]string {
	if g == nil {
		return nil
	}
	out := map[string][]string{}
	refs := g.Refs()
	for _, b := range g.Destinations.bindings {
		if len(b.hosts) == 0 {
			continue
		}
		for _, r := range refs {
			if x, ok := IntersectRefPatterns(r, b.ref); ok {
				out[x] = appendUnique(out[x], patternStrings(b.hosts)...)
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// intersectAll intersects every pattern of a with every pattern of b.
func intersectAll(a, b []string) []string {
	out := []string{}
	for _, x := range a {
		for _, y := range b {
			if z, ok := IntersectRefPatterns(x, y); ok {
				out = appendUnique(out, z)
			}
		}
	}
	return out
}

// Binaries returns the binary entries the grant allows (Check): each
// declared entry intersected with the ceiling's entries when there is a
// ceiling ("*" meets any entry in that entry; two names meet only when
// equal), in declaration order, without duplicates. It returns nil for a
// nil grant and an empty, non-nil slice when no binary passes.
func (g *BinaryGrant) Binaries() []string {
	if g == nil {
		return nil
	}
	out := []string{}
	for _, d := range g.Declared {
		if d == "" {
			continue
		}
		if g.Ceiling == nil {
			out = appendUnique(out, d)
			continue
		}
		for _, c := range g.Ceiling.Allow {
			switch {
			case c == "":
			case c == "*" || c == d:
				out = appendUnique(out, d)
			case d == "*":
				out = appendUnique(out, c)
			}
		}
	}
	return out
}

// appendUnique appends each of vs not already in s.
func appendUnique(s []string, vs ...string) []string {
	for _, v := range vs {
		if !slices.Contains(s, v) {
			s = append(s, v)
		}
	}
	return s
}
