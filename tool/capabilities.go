package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Capabilities declares, as data, every external surface a tool touches. The
// zero value touches nothing. JSON names follow capabilities.md.
type Capabilities struct {
	Network *Network `json:"network,omitempty"`
	// Secrets lists the secret refs the tool may use; "prefix/*" grants
	// every ref below prefix/. A ref listed here only can be sent by the
	// fetch accessor (Request.SecretHeaders) to a host the personality
	// binds it to; the tool itself never sees its value.
	Secrets []string `json:"secrets,omitempty"`
	// SecretsRaw lists the refs, among those of Secrets, whose value the
	// tool reads itself through Context.Secrets (a child process's
	// environment, a signature it computes). Every entry must be covered
	// by an entry of Secrets. Leave it empty when the tool only sends
	// secrets over HTTP.
	SecretsRaw []string `json:"secrets_raw,omitempty"`
	Storage    *Storage `json:"storage,omitempty"`
	FSReach    *FSReach `json:"fs_reach,omitempty"`
	Process    *Process `json:"process,omitempty"`
}

// Network declares the hosts a tool may fetch.
type Network struct {
	// AllowedHosts are host patterns; "*" means whatever the personality allows.
	AllowedHosts []string `json:"allowed_hosts"`
}

// StorageScope is whose key-value store a tool sees.
type StorageScope string

// The three storage scopes.
const (
	ScopeToolPrivate StorageScope = "tool-private"
	ScopeSession     StorageScope = "session"
	ScopePersonality StorageScope = "personality"
)

// Storage declares a scoped key-value store.
type Storage struct {
	Scope             StorageScope `json:"scope"`
	Kind              string       `json:"kind"`
	TTLSecondsDefault int64        `json:"ttl_seconds_default,omitempty"`
}

// FSReach declares filesystem reach for reading and writing.
type FSReach struct {
	Read  *PathList `json:"read,omitempty"`
	Write *PathList `json:"write,omitempty"`
}

// PathList is either an explicit list of paths or "from-personality".
type PathList struct {
	FromPersonality bool
	Paths           []string
}

// FromPersonality is the PathList that takes the personality's list.
func FromPersonality() *PathList { return &PathList{FromPersonality: true} }

// Paths returns an explicit PathList.
func Paths(p ...string) *PathList { return &PathList{Paths: p} }

const fromPersonality = "from-personality"

// MarshalJSON writes "from-personality" or the list of paths.
func (p PathList) MarshalJSON() ([]byte, error) {
	if p.FromPersonality {
		return json.Marshal(fromPersonality)
	}
	if p.Paths == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(p.Paths)
}

// UnmarshalJSON reads "from-personality" or a list of paths.
func (p *PathList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		if s != fromPersonality {
			return fmt.Errorf("fs_reach: %q must be %q or a list of paths", s, fromPersonality)
		}
		*p = PathList{FromPersonality: true}
		return nil
	}
	var paths []string
	if err := json.Unmarshal(b, &paths); err != nil {
		return fmt.Errorf("fs_reach: must be %q or a list of paths", fromPersonality)
	}
	*p = PathList{Paths: paths}
	return nil
}

// Process declares the binaries a tool may spawn.
type Process struct {
	// AllowedBinaries are bare names resolved on the worker's trusted PATH, or
	// exact absolute paths; "*" means any (the personality's process.allow is
	// then the real ceiling).
	AllowedBinaries []string `json:"allowed_binaries"`
}

// IsZero reports whether the tool declares nothing external.
func (c Capabilities) IsZero() bool {
	return c.Network == nil && len(c.Secrets) == 0 && len(c.SecretsRaw) == 0 && c.Storage == nil && c.FSReach == nil && c.Process == nil
}

// Validate checks the shape of the declaration.
func (c Capabilities) Validate() error {
	var errs []error
	if c.Network != nil && len(c.Network.AllowedHosts) == 0 {
		errs = append(errs, errors.New("capabilities.network.allowed_hosts must list at least one host pattern"))
	}
	for _, s := range c.Secrets {
		if s == "" {
			errs = append(errs, errors.New("capabilities.secrets must not contain an empty ref"))
		}
	}
	for _, s := range c.SecretsRaw {
		switch {
		case s == "":
			errs = append(errs, errors.New("capabilities.secrets_raw must not contain an empty ref"))
		case !slices.ContainsFunc(c.Secrets, func(p string) bool { return refPatternCovers(p, s) }):
			errs = append(errs, fmt.Errorf("capabilities.secrets_raw entry %q is not covered by capabilities.secrets", s))
		}
	}
	if c.Storage != nil {
		switch c.Storage.Scope {
		case ScopeToolPrivate, ScopeSession, ScopePersonality:
		default:
			errs = append(errs, fmt.Errorf("capabilities.storage.scope %q must be tool-private, session or personality", c.Storage.Scope))
		}
		if c.Storage.Kind != "kv" {
			errs = append(errs, fmt.Errorf("capabilities.storage.kind %q must be kv", c.Storage.Kind))
		}
		if c.Storage.TTLSecondsDefault < 0 {
			errs = append(errs, errors.New("capabilities.storage.ttl_seconds_default must not be negative"))
		}
	}
	if c.FSReach != nil && c.FSReach.Read == nil && c.FSReach.Write == nil {
		errs = append(errs, errors.New("capabilities.fs_reach must declare read or write"))
	}
	if c.Process != nil && len(c.Process.AllowedBinaries) == 0 {
		errs = append(errs, errors.New("capabilities.process.allowed_binaries must list at least one binary"))
	}
	return errors.Join(errs...)
}

// refPatternCovers reports whether every ref the secret pattern q matches is
// matched by the pattern p ("*", "a/*" or an exact ref): the check that a
// secrets_raw entry lies inside the secrets declaration. It compares the
// patterns as written; malformed refs are refused when the grant checks
// them.
func refPatternCovers(p, q string) bool {
	switch {
	case p == "*" || p == q:
		return true
	case q == "*":
		return false
	}
	prefix, ok := strings.CutSuffix(p, "/*")
	return ok && strings.HasPrefix(q, prefix+"/")
}
