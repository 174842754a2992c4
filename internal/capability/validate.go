package capability

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

// Capability names used in ValidationError.Capability.
const (
	CapNetwork      = "network"
	CapFSReachRead  = "fs_reach.read"
	CapFSReachWrite = "fs_reach.write"
	CapSecrets      = "secrets"
	CapProcess      = "process"
)

// ValidationError is one registration-time problem: a tool's declaration
// reaches outside the personality.
type ValidationError struct {
	Tool       string `json:"tool"`
	Capability string `json:"capability"`
	Message    string `json:"message"`
}

// Error returns "tool <tool>: <message>".
func (e ValidationError) Error() string { return "tool " + e.Tool + ": " + e.Message }

// Validate checks every tool of the personality's effective toolset (tools
// that pass ToolsetGate without narrow_tools; always_include tools count) and
// returns every problem, in tool order and then declaration order (network
// hosts, fs_reach.read paths, fs_reach.write paths); nil when there is none:
//
//   - each explicit declared host (not "*") must be covered by one entry of
//     safety.network.allow: `host "<host>" is not in personality network
//     allow list`; a host covered by a deny entry: `host "<host>" is on
//     personality network deny list` (capability "network");
//   - each explicit declared path must be covered by the personality's list of
//     the same direction: `path "<path>" is not covered by personality
//     fs_reach.read` (capability "fs_reach.read"; the same for write).
//
// <host> and <path> are quoted as the tool declares them. Malformed declared
// hosts and relative declared paths are reported too. A nil p is an absent
// personality: every explicit host and path is an error.
func Validate(tools []*tool.Tool, p *Personality) []ValidationError {
	var out []ValidationError
	for _, t := range tools {
		if t == nil || ToolsetGate(t, p, nil) != nil {
			continue
		}
		out = append(out, ValidateTool(t, p)...)
	}
	return out
}

// ValidateTool is Validate for one tool, without the toolset filter: the
// worker uses it before running a call, and answers not_available with the
// messages when it returns anything.
//
// A tool hosted from an MCP server (its name starts with "mcp__") has a
// fixed reach: the server runs with its whole declaration whoever calls it,
// so a personality's ceilings cannot narrow it per call as they narrow a
// built-in tool's grant. For such a tool two more rules apply, so that a
// personality may call it only when its policy covers the whole
// declaration:
//
//   - each declared secret pattern must be covered by secrets.allow when
//     the personality has that ceiling: `secret "<pattern>" is not covered
//     by personality secrets.allow` (capability "secrets");
//   - each declared binary must be allowed by process.allow when the
//     personality has that ceiling: `binary "<binary>" is not covered by
//     personality process.allow` (capability "process").
func ValidateTool(t *tool.Tool, p *Personality) []ValidationError {
	if t == nil {
		return nil
	}
	if p == nil {
		p = &Personality{}
	}
	var out []ValidationError
	add := func(capability, msg string) {
		out = append(out, ValidationError{Tool: t.Name, Capability: capability, Message: msg})
	}
	if n := t.Capabilities.Network; n != nil {
		allow, _ := ParseHostList(p.Network.Allow) // Parse already refused malformed entries
		deny, _ := ParseHostList(p.Network.Deny)
		for _, h := range n.AllowedHosts {
			if h == "*" {
				continue
			}
			q, err := ParseHostPattern(h)
			if err != nil {
				add(CapNetwork, err.Error())
				continue
			}
			if !allow.Covers(q, false) {
				add(CapNetwork, fmt.Sprintf("host %q is not in personality network allow list", h))
			}
			if deny.Covers(q, true) {
				add(CapNetwork, fmt.Sprintf("host %q is on personality network deny list", h))
			}
		}
	}
	if fs := t.Capabilities.FSReach; fs != nil {
		validatePaths(fs.Read, p.FSReach.Read, CapFSReachRead, add)
		validatePaths(fs.Write, p.FSReach.Write, CapFSReachWrite, add)
	}
	if strings.HasPrefix(t.Name, "mcp__") {
		if p.Secrets != nil {
			for _, s := range t.Capabilities.Secrets {
				if !slices.ContainsFunc(p.Secrets.Allow, func(c string) bool { return refPatternCovers(c, s) }) {
					add(CapSecrets, fmt.Sprintf("secret %q is not covered by personality secrets.allow", s))
				}
			}
		}
		if p.Process != nil && t.Capabilities.Process != nil {
			for _, b := range t.Capabilities.Process.AllowedBinaries {
				if !binaryAllowed(p.Process.Allow, b) {
					add(CapProcess, fmt.Sprintf("binary %q is not covered by personality process.allow", b))
				}
			}
		}
	}
	return out
}

// refPatternCovers reports whether the secret pattern ceiling allows every
// ref the secret pattern declared matches: "*" covers everything; "p/*"
// covers "p/*", "p/q/*" and every ref below p; any other pattern is covered
// as a ref (RefMatch).
func refPatternCovers(ceiling, declared string) bool {
	if ceiling == "*" {
		return true
	}
	prefix, isPrefix := strings.CutSuffix(declared, "/*")
	if declared == "*" || !isPrefix {
		return declared != "*" && RefMatch(ceiling, declared)
	}
	cp, ok := strings.CutSuffix(ceiling, "/*")
	return ok && ValidRef(cp) && ValidRef(prefix) && (prefix == cp || strings.HasPrefix(prefix, cp+"/"))
}

func validatePaths(decl *tool.PathList, reach []string, capability string, add func(string, string)) {
	if decl == nil || decl.FromPersonality {
		return
	}
	for _, path := range decl.Paths {
		if !filepath.IsAbs(path) {
			add(capability, fmt.Sprintf("path %q must be absolute", path))
			continue
		}
		if !coveredBy(reach, filepath.Clean(path)) {
			add(capability, fmt.Sprintf("path %q is not covered by personality %s", path, capability))
		}
	}
}
