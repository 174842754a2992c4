package capability

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/capstanhq/capstan/tool"
)

// CallView is the part of a call that resolution needs.
type CallView struct {
	Tool          string
	SessionID     string
	PersonalityID string
	// WorkingDir is the call's working_dir; "" means the personality's workdir.
	WorkingDir string
}

// Grant is everything one call may reach: one entry per declared capability,
// nil when the tool does not declare it. A declared capability that resolves
// to nothing is non-nil and denies every request.
type Grant struct {
	Network *NetworkGrant
	FS      *FSGrant
	Secrets *RefGrant
	Process *BinaryGrant
	Storage *StorageGrant
}

// StorageGrant is the resolved key-value scope of one call.
type StorageGrant struct {
	// Scope is the declared scope.
	Scope tool.StorageScope
	// ScopeID identifies the store ("tool:<tool>", "session:<id>" or
	// "personality:<id>"); see ScopeID.
	ScopeID string
	// TTLDefault is the declared ttl_seconds_default (0 = no expiry).
	TTLDefault time.Duration
}

// ScopeID returns the storage scope id of a call: tool-private →
// "tool:<toolName>"; session → "session:<sessionID>"; personality →
// "personality:<personalityID>", or "session:<sessionID>" when the call has no
// personality. It returns "" for an unknown scope. It does not encode the
// parts; the KV accessor encodes ids before they reach a subject.
func ScopeID(scope tool.StorageScope, toolName, sessionID, personalityID string) string {
	switch scope {
	case tool.ScopeToolPrivate:
		return "tool:" + toolName
	case tool.ScopeSession:
		return "session:" + sessionID
	case tool.ScopePersonality:
		if personalityID == "" {
			return "session:" + sessionID
		}
		return "personality:" + personalityID
	}
	return ""
}

// Resolve intersects t's declaration with personality p for one call, by the
// rules of capabilities.md:
//
//   - network: declared ∩ safety.network.allow, minus deny ("*" declared =
//     the allow list); no allow list = nothing;
//   - fs_reach: explicit declared paths are kept where they lie inside the
//     personality's list of the same direction; "from-personality" = that
//     list; no list = nothing;
//   - secrets and process: the declaration, capped by the personality's
//     ceiling when present; secrets also carry the declared secrets_raw
//     patterns and the personality's secrets.send_to bindings;
//   - storage: the scope id of the call.
//
// A nil p is an absent personality (network and fs reach nothing). The error
// reports a declaration or personality that cannot be resolved: malformed
// host patterns, relative declared paths, a relative working dir, an unknown
// storage scope or a scope id with an empty part. Resolve does not check the
// declaration against the personality; use ValidateTool for that.
func Resolve(t *tool.Tool, p *Personality, call CallView) (*Grant, error) {
	if t == nil {
		return nil, errors.New("resolve: nil tool")
	}
	if p == nil {
		p = &Personality{}
	}
	caps := t.Capabilities
	g := &Grant{}
	var errs []error
	if caps.Network != nil {
		ng, err := NewNetworkGrant(caps.Network.AllowedHosts, p.Network)
		if err != nil {
			errs = append(errs, err)
		}
		g.Network = ng
	}
	if caps.FSReach != nil {
		fg, err := resolveFS(caps.FSReach, p, call.WorkingDir)
		if err != nil {
			errs = append(errs, err)
		}
		g.FS = fg
	}
	if len(caps.Secrets) > 0 {
		dest, err := NewSecretDestinations(p.SendTo)
		if err != nil {
			errs = append(errs, err)
		}
		g.Secrets = &RefGrant{Declared: slices.Clone(caps.Secrets), Raw: slices.Clone(caps.SecretsRaw), Ceiling: p.Secrets.clone(), Destinations: dest}
	}
	if caps.Process != nil {
		g.Process = &BinaryGrant{Declared: slices.Clone(caps.Process.AllowedBinaries), Ceiling: p.Process.clone(), Limits: p.ProcessLimits.WithDefaults()}
	}
	if caps.Storage != nil {
		sg, err := resolveStorage(caps.Storage, t.Name, call)
		if err != nil {
			errs = append(errs, err)
		}
		g.Storage = sg
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("resolve capabilities of tool %s: %w", t.Name, err)
	}
	return g, nil
}

func resolveFS(decl *tool.FSReach, p *Personality, callWD string) (*FSGrant, error) {
	g := &FSGrant{WorkingDir: p.FSReach.Workdir, Writable: slices.Clone(p.FSReach.Write)}
	if callWD != "" {
		if !filepath.IsAbs(callWD) {
			return nil, fmt.Errorf("working_dir %q must be an absolute path", callWD)
		}
		g.WorkingDir = filepath.Clean(callWD)
	}
	var errs []error
	var err error
	if g.Read, err = resolvePaths(decl.Read, p.FSReach.Read, "fs_reach.read"); err != nil {
		errs = append(errs, err)
	}
	if g.Write, err = resolvePaths(decl.Write, p.FSReach.Write, "fs_reach.write"); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return g, nil
}

// resolvePaths applies the fs_reach rule to one direction. The result is nil
// when nothing is declared, and non-nil (maybe empty) otherwise.
func resolvePaths(decl *tool.PathList, reach []string, key string) ([]string, error) {
	if decl == nil {
		return nil, nil
	}
	out := []string{}
	for _, prefix := range reach {
		if !isAbsClean(prefix) {
			return nil, fmt.Errorf("personality %s path %q must be absolute and clean", key, prefix)
		}
	}
	if decl.FromPersonality {
		return append(out, reach...), nil
	}
	for _, path := range decl.Paths {
		if !filepath.IsAbs(path) {
			return nil, fmt.Errorf("%s path %q must be absolute", key, path)
		}
		if clean := filepath.Clean(path); coveredBy(reach, clean) && !slices.Contains(out, clean) {
			out = append(out, clean)
		}
	}
	return out, nil
}

// maxTTLSeconds keeps ttl_seconds_default inside a time.Duration.
const maxTTLSeconds = int64(math.MaxInt64 / time.Second)

func resolveStorage(decl *tool.Storage, toolName string, call CallView) (*StorageGrant, error) {
	id := ScopeID(decl.Scope, toolName, call.SessionID, call.PersonalityID)
	switch {
	case id == "":
		return nil, fmt.Errorf("storage scope %q must be tool-private, session or personality", decl.Scope)
	case id == "tool:" && toolName == "":
		return nil, errors.New("storage scope tool-private needs a tool name")
	case id == "session:":
		return nil, fmt.Errorf("storage scope %s needs the call's session id", decl.Scope)
	case decl.TTLSecondsDefault < 0 || decl.TTLSecondsDefault > maxTTLSeconds:
		return nil, fmt.Errorf("storage ttl_seconds_default must be 0 to %d", maxTTLSeconds)
	}
	return &StorageGrant{
		Scope:      decl.Scope,
		ScopeID:    id,
		TTLDefault: time.Duration(decl.TTLSecondsDefault) * time.Second,
	}, nil
}
