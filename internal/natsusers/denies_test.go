package natsusers

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/nats-io/nats-server/v2/conf"
	"github.com/stretchr/testify/require"
)

// authConf is the users file every node of deploy/nats includes.
const authConf = "../../deploy/nats/auth.conf"

// subjectPatterns returns every subject pattern of every allow and deny
// list in a parsed NATS configuration, each with the path of keys that
// leads to it (for the failure message).
func subjectPatterns(v any, path string, out map[string][]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			subjectPatterns(e, path+"."+k, out)
		}
	case []any:
		for i, e := range v {
			if s, ok := e.(string); ok && (strings.HasSuffix(path, ".allow") || strings.HasSuffix(path, ".deny")) {
				out[path] = append(out[path], s)
				continue
			}
			subjectPatterns(e, fmt.Sprintf("%s[%d]", path, i), out)
		}
	}
}

// wildcardProblem returns why a subject pattern uses a wildcard that NATS
// would read as a literal ("" when every wildcard is a whole token): ">"
// and "*" are wildcards only as a whole token, ">" only as the last one. A
// subscribe permission may name a queue group after a space
// ("capstan.approval.*.*.* capstan_approvals"): its subject is checked.
func wildcardProblem(pattern string) string {
	subject, queue, hasQueue := strings.Cut(pattern, " ")
	if hasQueue && (queue == "" || strings.ContainsAny(queue, " *>")) {
		return fmt.Sprintf("queue group %q is not one name", queue)
	}
	tokens := strings.Split(subject, ".")
	for i, tok := range tokens {
		switch {
		case tok == ">" && i != len(tokens)-1:
			return fmt.Sprintf("%q is not the last token", tok)
		case tok == ">" || tok == "*":
		case strings.ContainsAny(tok, ">*"):
			return fmt.Sprintf("token %q holds a wildcard that is not a whole token (a literal to NATS)", tok)
		}
	}
	return ""
}

func TestWildcardProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern string
		bad     bool
	}{
		{"capstan.call.*.researcher.>", false},
		{"$JS.API.STREAM.INFO.CAPSTAN_RESULTS", false},
		{"$JS.ACK.*.*.CAPSTAN_CALLS.default.>", false},
		{"$JS.API.STREAM.INFO.CAPSTAN_>", true},
		{"$JS.API.STREAM.INFO.CAPSTAN_*", true},
		{"capstan.*x.y", true},
		{"capstan.>.call", true},
		{"capstan.approval.*.*.* capstan_approvals", false},
		{"capstan.approval.* capstan_*", true},
		{"capstan.approval.*x capstan_approvals", true},
	} {
		require.Equal(t, tc.bad, wildcardProblem(tc.pattern) != "", tc.pattern)
	}
}

// TestAuthConfWildcardsAreWholeTokens parses deploy/nats/auth.conf as the
// server does and rejects any allow or deny pattern with a ">" or "*" that
// is not a whole token: such a pattern is a literal subject, and a deny
// written that way denies nothing (it once let a tenant read
// CAPSTAN_RESULTS' information once an allow of $JS.API.STREAM.INFO.> was
// added).
func TestAuthConfWildcardsAreWholeTokens(t *testing.T) {
	t.Parallel()
	parsed, err := conf.ParseFile(authConf)
	require.NoError(t, err)
	patterns := map[string][]string{}
	subjectPatterns(parsed, "", patterns)
	require.NotEmpty(t, patterns, "no allow or deny lists found in %s", authConf)
	var problems []string
	count := 0
	for path, list := range patterns {
		for _, p := range list {
			count++
			if why := wildcardProblem(p); why != "" {
				problems = append(problems, fmt.Sprintf("%s: %q: %s", path, p, why))
			}
		}
	}
	sort.Strings(problems)
	require.Greater(t, count, 100, "too few patterns: is the walk of the parsed file right?")
	require.Empty(t, problems)
}

// TestTenantDenyHoldsAgainstAnAddedAllow: operations.md says a tenant's
// deny list holds "even if an allow rule is added later". A copy of
// deploy/nats whose researcher tenant also gets an allow of
// $JS.API.STREAM.INFO.> still refuses that tenant the information of every
// stream and bucket whose subjects name other tenants' calls, and still
// answers the tool catalog's.
func TestTenantDenyHoldsAgainstAnAddedAllow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Dir(nodeConf)
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".conf") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		if e.Name() == "auth.conf" {
			s := string(b)
			at := strings.Index(s, "user: tenant-researcher")
			require.Positive(t, at)
			anchor := `"$JS.API.STREAM.INFO.KV_capstan_tools"`
			i := strings.Index(s[at:], anchor)
			require.Positive(t, i)
			s = s[:at+i] + `"$JS.API.STREAM.INFO.>"` + "\n            " + s[at+i:]
			b = []byte(s)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600))
	}
	url := bustest.ConfigServer(t, filepath.Join(dir, filepath.Base(nodeConf)))
	op := newClient(t, url, "operator") // creates the topology
	_, _, err = op.PutPersonality(ctxT(t, 10*time.Second), []byte("id: researcher\n"))
	require.NoError(t, err)

	raw := dialRaw(t, url, "tenant-researcher")
	raw.requireAnswered(t, "$JS.API.STREAM.INFO.KV_capstan_tools", nil)
	for _, stream := range []string{
		"CAPSTAN_CALLS", "CAPSTAN_RESULTS", "CAPSTAN_PROGRESS", "CAPSTAN_DLQ", "CAPSTAN_AUDIT", "CAPSTAN_ADVISORIES",
		"KV_capstan_personalities", "KV_capstan_cancels", "KV_capstan_completions", "KV_capstan_leases",
		"KV_capstan_workers", "KV_capstan_failures", "KV_capstan_approvals", "OBJ_capstan_blobs",
	} {
		raw.requireRefused(t, "$JS.API.STREAM.INFO."+stream, []byte(`{"subjects_filter":">"}`))
	}
}
