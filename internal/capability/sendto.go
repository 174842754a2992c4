package capability

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// SecretDestinations binds secret refs to the hosts that may receive them
// over HTTP: a personality's secrets.send_to, a mapping from a secret
// pattern (the syntax of secrets.allow: "a/b", "a/*" or "*") to host patterns
// (the syntax and matcher of safety.network.allow: a pattern without a port
// means the scheme's default port). Build it with NewSecretDestinations.
//
// A ref may be sent to an endpoint when some entry whose pattern matches the
// ref (RefMatch) lists a host pattern that matches the endpoint
// (HostPattern.Match); the entries of several matching patterns add up. A
// ref that no entry matches is sent nowhere. The zero value binds nothing.
type SecretDestinations struct {
	bindings []secretBinding
}

type secretBinding struct {
	ref   string
	hosts HostList
}

// NewSecretDestinations parses send_to (secret pattern → host patterns). A
// nil or empty map binds nothing. Malformed secret or host patterns are an
// error that joins one error per problem, naming the pattern.
func NewSecretDestinations(sendTo map[string][]string) (SecretDestinations, error) {
	var d SecretDestinations
	var errs []error
	for _, ref := range slices.Sorted(maps.Keys(sendTo)) {
		if err := ValidateRefPattern(ref); err != nil {
			errs = append(errs, fmt.Errorf("secrets.send_to: %w", err))
			continue
		}
		hosts, err := ParseHostList(sendTo[ref])
		if err != nil {
			errs = append(errs, fmt.Errorf("secrets.send_to %q: %w", ref, err))
			continue
		}
		d.bindings = append(d.bindings, secretBinding{ref: ref, hosts: hosts})
	}
	if err := errors.Join(errs...); err != nil {
		return SecretDestinations{}, err
	}
	return d, nil
}

// Allows reports whether ref may be sent to e (see SecretDestinations). An
// invalid ref (ValidRef) is sent nowhere.
func (d SecretDestinations) Allows(ref string, e Endpoint) bool {
	for _, b := range d.bindings {
		if RefMatch(b.ref, ref) && b.hosts.Allows(e) {
			return true
		}
	}
	return false
}

// Empty reports whether d binds no ref to any host.
func (d SecretDestinations) Empty() bool {
	for _, b := range d.bindings {
		if len(b.hosts) > 0 {
			return false
		}
	}
	return true
}

// Bindings returns the bindings as written (secret pattern → host
// patterns), for display (dispatcher explain); nil when there are none.
func (d SecretDestinations) Bindings() map[string][]string {
	if len(d.bindings) == 0 {
		return nil
	}
	out := make(map[string][]string, len(d.bindings))
	for _, b := range d.bindings {
		hosts := make([]string, len(b.hosts))
		for i, h := range b.hosts {
			hosts[i] = h.String()
		}
		out[b.ref] = hosts
	}
	return out
}
