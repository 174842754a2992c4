// Package capability owns the policy side of tool capabilities: personality
// documents (Parse), registration-time validation of tool declarations
// (Validate), the per-call gates of the execution pipeline (ExcludeGate,
// ToolsetGate, PermissionGate), resolution of a declaration against a
// personality (Resolve) and the one matcher of each kind used everywhere:
// hosts (HostPattern), paths (Covers), secret refs (RefMatch) and binaries
// (BinaryMatch).
//
// It is pure: no I/O, no logging, no goroutines. The scoped accessors that
// enforce a Grant live in internal/scoped.
package capability

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
)

// DefaultBudgetChars is the turn budget of a personality whose document sets
// no budget.result_chars.
const DefaultBudgetChars = protocol.DefaultTurnBudgetChars

// MaxIDLen is the longest personality id.
const MaxIDLen = 128

var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// ValidID reports whether id is a valid personality id: 1 to 128 characters
// of [A-Za-z0-9_-].
func ValidID(id string) bool { return len(id) <= MaxIDLen && idRE.MatchString(id) }

// Personality is a parsed, substituted, validated personality document. The
// distinction between nil and empty lists is kept where it matters (Toolset).
type Personality struct {
	ID string
	// Toolset lists built-in tool names or toolset labels: nil = key absent
	// (every built-in tool); non-nil empty = none.
	Toolset []string
	// MCPServers lists the servers whose tools (mcp__<server>__*) are
	// available; absent or empty = none.
	MCPServers []string
	// Plugins lists the plugins whose tools are available; absent or empty = none.
	Plugins []string
	// Permissions are granted to tools that declare permissions; "ns:*"
	// grants every "ns:..." permission and "*" grants all.
	Permissions []string
	// FSReach is the filesystem reach (absolute, clean, substituted paths).
	FSReach FSReach
	// Network is safety.network.
	Network NetworkPolicy
	// Secrets is the optional secrets ceiling (secrets.allow); nil = no ceiling.
	Secrets *Ceiling
	// SendTo is secrets.send_to: secret pattern → host patterns that may
	// receive the refs it matches over HTTP (see SecretDestinations). nil
	// or empty = no secret is sent anywhere.
	SendTo map[string][]string
	// Process is the optional process ceiling; nil = no ceiling.
	Process *Ceiling
	// ProcessLimits are process.limits, with the defaults for what the
	// document does not set.
	ProcessLimits ProcessLimits
	// Scheduling is the scheduling section: priority, weight and
	// max_concurrency, with the defaults (DefaultScheduling) for what the
	// document does not set.
	Scheduling Scheduling
	// Approval is the approval section: which calls a person must approve
	// before they run (Approval.Needs); nil when the document has none.
	Approval *Approval
	// RateLimits maps a tool name to its fleet-wide rate limit.
	RateLimits map[string]RateLimit
	// BudgetChars is budget.result_chars, DefaultBudgetChars when absent.
	BudgetChars int
	// ForbidBlobs is budget.blobs: false: the full output of this
	// personality's calls is never stored by reference; their results
	// carry only what fits the message (docs/protocol.md, "Large outputs by
	// reference").
	ForbidBlobs bool
}

// FSReach is a personality's fs_reach section.
type FSReach struct {
	// Workdir is ${WORKDIR} and the default working dir of calls; "" = none.
	Workdir string
	// Read and Write are the prefixes reachable in each direction; empty = none.
	Read  []string
	Write []string
}

// RateLimit is one seeded fleet-wide rate limit: Requests calls per Window.
type RateLimit struct {
	Requests int
	Window   time.Duration
	// WindowText is the window as written in the document (e.g. "1h"), for messages.
	WindowText string
}

// Env holds the worker-side values of substitutions: ${HOME}. ${WORKDIR} is
// fs_reach.workdir and ${PERSONALITY} the document's id.
type Env struct {
	Home string
}

// ErrInvalidDocument is matched (errors.Is) by every *DocumentError.
var ErrInvalidDocument = errors.New("invalid personality document")

// Problem is one reason a personality document is invalid.
type Problem struct {
	// Key is the path of the offending key, e.g. "safety.network.allow[1]"
	// ("" for the document as a whole).
	Key string
	// Message is the full text, naming the key.
	Message string
}

// DocumentError lists every problem of a personality document, in document
// order (unknown keys of a section first, then its known keys in the order
// of capabilities.md).
type DocumentError struct {
	Problems []Problem
}

// Error returns "invalid personality document: " and the problems joined by "; ".
func (e *DocumentError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Message
	}
	return ErrInvalidDocument.Error() + ": " + strings.Join(msgs, "; ")
}

// Is matches ErrInvalidDocument.
func (e *DocumentError) Is(target error) bool { return target == ErrInvalidDocument }

// Parse reads a personality document (YAML or JSON), decodes it strictly,
// applies the substitutions ${WORKDIR}, ${PERSONALITY} and ${HOME} in
// fs_reach paths and validates it. Any problem makes the document invalid;
// the error is a *DocumentError listing all of them, each naming its key
// (e.g. `unknown key "safety.network.alow"`). A key whose value is null is
// treated as absent.
func Parse(data []byte, env Env) (*Personality, error) {
	d := &docParser{env: env}
	p := d.parse(data)
	if len(d.problems) > 0 {
		return nil, &DocumentError{Problems: d.problems}
	}
	return p, nil
}

// maxWindowDays keeps a window of whole days inside a time.Duration.
const maxWindowDays = int64(1<<63-1) / int64(24*time.Hour)

// ParseWindow parses a rate-limit window: Go duration syntax ("90s", "15m",
// "1h30m") plus a leading whole number of days with the unit "d" ("7d",
// "1d12h"). Signs are refused and the window must be at least one second.
func ParseWindow(s string) (time.Duration, error) {
	bad := func() (time.Duration, error) {
		return 0, fmt.Errorf("invalid window %q: want a duration like 30s, 15m, 1h or 7d", s)
	}
	if s == "" || strings.ContainsAny(s, "+-") {
		return bad()
	}
	var d time.Duration
	rest := s
	if days, after, ok := strings.Cut(s, "d"); ok {
		if days == "" || strings.Trim(days, "0123456789") != "" {
			return bad()
		}
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n > maxWindowDays {
			return bad()
		}
		d, rest = time.Duration(n)*24*time.Hour, after
	}
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil || r > time.Duration(1<<63-1)-d {
			return bad()
		}
		d += r
	}
	if d < time.Second {
		return 0, fmt.Errorf("invalid window %q: must be at least 1s", s)
	}
	return d, nil
}
