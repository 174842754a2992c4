package worker_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// docHeaders returns the headers that docs/protocol.md's "Headers" table
// says are set on results.
func docHeaders(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/protocol.md")
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "\n## Headers\n")
	require.Positive(t, start, "docs/protocol.md has no Headers section")
	section := doc[start+len("\n## Headers\n"):]
	section = section[:strings.Index(section, "\n## ")]
	row := regexp.MustCompile("(?m)^\\| ((?:`[^`]+`(?:, )?)+) \\| ([^|]+) \\|")
	name := regexp.MustCompile("`([^`]+)`")
	var out []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		setOn := m[2]
		if !regexp.MustCompile(`\bresults?\b`).MatchString(setOn) {
			continue
		}
		for _, n := range name.FindAllStringSubmatch(m[1], -1) {
			out = append(out, n[1])
		}
	}
	require.NotEmpty(t, out, "no header of results in docs/protocol.md's table")
	return out
}

// TestProtocolDocHeadersMatchAResult: the headers docs/protocol.md lists
// for results are the ones a stored result carries (once the table listed
// a result Nats-Msg-Id the worker never set). Trace headers are set only
// when the call carries a trace context or the worker traces, so they are
// allowed to be absent; everything else must match both ways.
func TestProtocolDocHeadersMatchAResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{Concurrency: 2}, builtin.All()...)
	e.call(protocol.Call{CallID: "hdr", Tool: "echo"})
	m := e.resultMsg("hdr", "hdr")
	documented := docHeaders(t)
	optional := []string{"traceparent", "tracestate"}
	for _, h := range documented {
		if slices.Contains(optional, h) {
			continue
		}
		require.NotEmpty(t, m.Header.Get(h), "docs/protocol.md lists %s on results; the stored result has headers %v", h, m.Header)
	}
	for h := range m.Header {
		require.Contains(t, documented, h, "a stored result carries %s, which docs/protocol.md's Headers table does not list for results", h)
	}
}

// TestSecuritySuiteTableNamesRealTests: every test that docs/capabilities.md's
// table of the security regression suite names exists in the package the
// table gives (a renamed or deleted attack test fails here).
func TestSecuritySuiteTableNamesRealTests(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/capabilities.md")
	require.NoError(t, err)
	doc := string(b)
	start := strings.Index(doc, "## The security regression suite")
	require.Positive(t, start)
	section := doc[start:]
	section = section[:strings.Index(section[3:], "\n## ")+3]
	// `pkg` `TestA`, `TestB`; `pkg2` `TestC`
	group := regexp.MustCompile("`((?:internal|worker|cmd|client)[a-z/]*)` ((?:`(?:Test|Fuzz)[A-Za-z0-9]+`(?:, )?)+)")
	name := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9]+)`")
	checked := 0
	for _, g := range group.FindAllStringSubmatch(section, -1) {
		dir := "../" + g[1]
		var src strings.Builder
		entries, err := os.ReadDir(dir)
		require.NoError(t, err, "package %s named in the table", g[1])
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), "_test.go") {
				data, err := os.ReadFile(dir + "/" + e.Name())
				require.NoError(t, err)
				src.Write(data)
			}
		}
		for _, n := range name.FindAllStringSubmatch(g[2], -1) {
			require.Contains(t, src.String(), "func "+n[1]+"(", "%s is named in the table but not in %s", n[1], g[1])
			checked++
		}
	}
	require.Greater(t, checked, 30)
}
