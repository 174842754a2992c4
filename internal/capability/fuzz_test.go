package capability

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func FuzzHostMatch(f *testing.F) {
	seeds := []struct {
		p1, p2, host string
		port         int
		https        bool
	}{
		{"*", "*.example.com", "api.example.com", 0, true},
		{"*:*", "example.com:8443", "example.com", 8443, true},
		{"*.example.com", "a.example.com", "example.com", 0, true},
		{"*.example.com", "*.b.example.com", "evil-example.com", 443, false},
		{"10.1.2.0/24", "10.1.2.3", "10.1.2.3", 80, false},
		{"[::1]:8080", "[::1]:*", "::1", 8080, false},
		{"fd00::/8", "[fd00::/16]:*", "[fd00::1]", 0, true},
		{"bücher.de", "*.de", "BÜCHER.de.", 0, true},
		{"0.0.0.0/0", "*", "::ffff:10.0.0.1", 0, true},
		{"example.com:*", "example.com", "EXAMPLE.COM", 443, false},
	}
	for _, s := range seeds {
		f.Add(s.p1, s.p2, s.host, s.port, s.https)
	}
	f.Fuzz(func(t *testing.T, p1, p2, host string, port int, https bool) {
		scheme := "http"
		if https {
			scheme = "https"
		}
		if n, err := NormalizeHost(host); err == nil {
			again, err := NormalizeHost(n)
			require.NoError(t, err, "normalised host %q must stay valid", n)
			require.Equal(t, n, again, "normalisation must be idempotent")
		}
		e, eerr := ParseEndpoint(scheme, host, port)
		if eerr == nil && isASCII(host) {
			upper, err := ParseEndpoint(strings.ToUpper(scheme), strings.ToUpper(host), port)
			require.NoError(t, err)
			require.Equal(t, e, upper, "matching is case-insensitive")
		}
		if eerr == nil {
			self, err := ParseHostPattern(e.String())
			require.NoError(t, err, "the display form %q must parse as a pattern", e.String())
			require.True(t, self.Match(e), "the display form %q must match its endpoint", e.String())
		}
		a, aerr := ParseHostPattern(p1)
		b, berr := ParseHostPattern(p2)
		for _, p := range []struct {
			pat HostPattern
			err error
		}{{a, aerr}, {b, berr}} {
			if p.err != nil {
				continue
			}
			require.True(t, p.pat.Covers(p.pat, false), "a pattern covers itself")
			again, err := ParseHostPattern(p.pat.String())
			require.NoError(t, err)
			require.Equal(t, p.pat, again)
			if p.pat.kind == kindSuffix {
				parent, err := ParseEndpoint(scheme, p.pat.name, 0)
				if err == nil {
					require.False(t, p.pat.MatchDeny(parent), "%q must never match %q", p.pat, p.pat.name)
				}
			}
			if eerr != nil {
				continue
			}
			if p.pat.Match(e) {
				require.True(t, p.pat.MatchDeny(e), "a deny entry is at least as broad as an allow entry")
			}
			if p.pat.MatchDeny(e) {
				switch p.pat.kind {
				case kindName, kindSuffix:
					require.False(t, e.host.isIP(), "a name pattern never matches an IP literal")
				case kindPrefix:
					require.True(t, e.host.isIP(), "an IP pattern never matches a name")
				}
				if p.pat.kind == kindSuffix {
					require.True(t, strings.HasSuffix(e.host.name, "."+p.pat.name) && e.host.name != p.pat.name)
				}
			}
		}
		if aerr == nil && berr == nil && eerr == nil {
			if a.Covers(b, false) && b.Match(e) {
				require.True(t, a.Match(e), "%q covers %q, so it must match %s", p1, p2, e)
			}
			if a.Covers(b, true) && b.Match(e) {
				require.True(t, a.MatchDeny(e), "deny %q covers %q, so it must deny %s", p1, p2, e)
			}
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"https://example.com/", "http://[::1]:8080/x", "ftp://x", "http://u@x", "http://127.1/", "https://bücher.de"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		scheme, host, port, err := CheckURL(raw)
		if err != nil {
			require.True(t, strings.HasPrefix(err.Error(), "HOST_NOT_ALLOWED: "))
			return
		}
		e, err := ParseEndpoint(scheme, host, port)
		require.NoError(t, err)
		require.Equal(t, host, e.Host())
		require.Equal(t, port, e.Port())
	})
}

func FuzzPathCovers(f *testing.F) {
	for _, s := range [][2]string{{"/data", "/data/x"}, {"/data", "/data2"}, {"/", "/etc"}, {"/data/", "/data/x"}, {"/a", "/a/../b"}, {"/a", "b/c"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, prefix, p string) {
		if Covers(prefix, p) {
			require.True(t, filepath.IsAbs(p) && filepath.Clean(p) == p, "covered paths are absolute and clean")
			require.True(t, p == prefix || (strings.HasPrefix(p, prefix) && (prefix == "/" || p[len(prefix)] == '/')),
				"%q must have %q as a component prefix", p, prefix)
			for _, seg := range strings.Split(p, "/") {
				require.NotEqual(t, "..", seg, "a covered path has no .. component")
			}
		}
		if isAbsClean(prefix) && prefix != "/" {
			require.False(t, Covers(prefix, prefix+"x"), "never a sibling with the same leading bytes")
			require.True(t, Covers(prefix, prefix))
		}
		if filepath.IsAbs(prefix) {
			j := JoinPath(prefix, p)
			require.True(t, isAbsClean(j), "joined to an absolute dir, %q must be absolute and clean", j)
			require.Equal(t, j, JoinPath(prefix, j), "JoinPath is idempotent")
			g := &FSGrant{Read: []string{filepath.Clean(prefix)}, WorkingDir: prefix}
			abs, err := g.Check(Read, p)
			require.Equal(t, j, abs)
			require.Equal(t, Covers(filepath.Clean(prefix), j), err == nil)
		}
	})
}

func FuzzRefMatch(f *testing.F) {
	for _, s := range [][2]string{{"providers/github/*", "providers/github/token"}, {"*", "a/../b"}, {"a/*", "a"}, {"a", "a"}, {"*", ""}, {"a/*/b", "a/x/b"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, ref string) {
		ok := RefMatch(pattern, ref)
		segs := strings.Split(ref, "/")
		for _, seg := range segs {
			if seg == ".." || seg == "." || seg == "" {
				require.False(t, ok, "a ref with segment %q never matches", seg)
			}
		}
		if ValidateRefPattern(pattern) != nil {
			require.False(t, ok, "a malformed pattern matches nothing")
		}
		if ok {
			require.True(t, ValidRef(ref))
			switch {
			case pattern == "*":
			case strings.HasSuffix(pattern, "/*"):
				prefix := strings.TrimSuffix(pattern, "/*")
				require.Greater(t, len(segs), len(strings.Split(prefix, "/")), "strictly more segments")
				require.True(t, strings.HasPrefix(ref, prefix+"/"))
			default:
				require.Equal(t, pattern, ref)
			}
		}
		err := (&RefGrant{Declared: []string{pattern}}).Check(ref)
		require.Equal(t, ok, err == nil)
		if err != nil {
			require.Equal(t, "SECRET_NOT_DECLARED: requested secret is not permitted for this tool", err.Error())
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(fullDoc), "/home/w")
	f.Add([]byte(`{"id":"j","toolset":[],"safety":{"network":{"allow":["*"]}}}`), "")
	f.Add([]byte("id: a\nfs_reach: {workdir: '${HOME}', read: ['${WORKDIR}/../x', '${FOO}']}"), "/h")
	f.Add([]byte("id: a\nrate_limits: {t: {requests: 3, window: 1d12h}}\nbudget: {result_chars: 10}"), "")
	f.Add([]byte("id: a\nsecrets: {allow: ['a/*'], send_to: {'a/*': ['x.com', '127.0.0.1:*'], 'b': []}}"), "")
	f.Add([]byte("id: a\nprocess: {limits: {memory: 64MiB, pids: 16, cpu: 0.5, tmp: 1MiB}}"), "")
	f.Add([]byte("id: a\nscheduling: {priority: 1, weight: 10, max_concurrency: 4}"), "")
	f.Add([]byte("id: a\nscheduling: {priority: 2.5, weight: '3', max_concurrency: -1, burst: true}"), "")
	f.Add([]byte("id: a\napproval: {require: [{tool: http_request, when: {method: [POST, 1.5e3, true]}}, {tool: 'mcp__x__*'}], timeout: 90m, approvers: [oncall], self: true}"), "")
	f.Add([]byte("id: a\napproval: {require: [{tool: 'a*b', when: {x: []}}, {}], timeout: 0s, approvers: [''], self: 1, more: 2}"), "")
	f.Fuzz(func(t *testing.T, data []byte, home string) {
		p, err := Parse(data, Env{Home: home})
		p2, err2 := Parse(data, Env{Home: home})
		require.Equal(t, p, p2, "Parse is deterministic")
		require.Equal(t, err, err2, "Parse is deterministic")
		if err != nil {
			require.Nil(t, p)
			var de *DocumentError
			require.True(t, errors.As(err, &de))
			require.NotEmpty(t, de.Problems)
			for _, pr := range de.Problems {
				require.NotEmpty(t, pr.Message)
			}
			return
		}
		require.True(t, ValidID(p.ID))
		require.Positive(t, p.BudgetChars)
		if p.FSReach.Workdir != "" {
			require.True(t, isAbsClean(p.FSReach.Workdir))
		}
		for _, path := range append(append([]string{}, p.FSReach.Read...), p.FSReach.Write...) {
			require.True(t, isAbsClean(path), "path %q", path)
		}
		_, err = ParseHostList(append(append([]string{}, p.Network.Allow...), p.Network.Deny...))
		require.NoError(t, err)
		if p.Secrets != nil {
			for _, s := range p.Secrets.Allow {
				require.NoError(t, ValidateRefPattern(s))
			}
		}
		_, err = NewSecretDestinations(p.SendTo)
		require.NoError(t, err, "a parsed send_to is valid")
		for name, rl := range p.RateLimits {
			require.NotEmpty(t, name)
			require.Positive(t, rl.Requests)
			w, err := ParseWindow(rl.WindowText)
			require.NoError(t, err)
			require.Equal(t, w, rl.Window)
		}
		l := p.ProcessLimits
		require.GreaterOrEqual(t, l.MemoryBytes, int64(MinMemoryBytes))
		require.GreaterOrEqual(t, l.TmpBytes, int64(MinTmpBytes))
		n, err := ParseTmp(l.TmpText)
		require.NoError(t, err)
		require.Equal(t, l.TmpBytes, n, "the tmp text parses back")
		s := p.Scheduling
		require.Equal(t, s, s.WithDefaults(), "a parsed scheduling has every default filled in")
		require.True(t, s.Priority >= MinPriority && s.Priority <= MaxPriority, "priority %d", s.Priority)
		require.True(t, s.Weight >= MinWeight && s.Weight <= MaxWeight, "weight %d", s.Weight)
		require.GreaterOrEqual(t, s.MaxConcurrency, 0)
		if a := p.Approval; a != nil {
			require.True(t, a.Timeout >= MinApprovalTimeout && a.Timeout <= MaxApprovalTimeout, "timeout %v", a.Timeout)
			back, err := time.ParseDuration(FormatTimeout(a.Timeout))
			require.NoError(t, err)
			require.Equal(t, a.Timeout, back, "the timeout's text reads back")
			for _, r := range a.Require {
				require.NotEmpty(t, r.Tool)
				require.NotContains(t, strings.TrimSuffix(r.Tool, "*"), "*")
				require.True(t, r.When == nil || len(r.When) > 0, "an empty when is nil")
				for _, values := range r.When {
					require.NotEmpty(t, values)
					for _, v := range values {
						kind, _ := whenValue(v)
						require.NotEqual(t, kindNone, kind, "every when value compares")
					}
				}
			}
			for _, name := range a.Approvers {
				require.NotEmpty(t, strings.TrimSpace(name))
			}
			require.NotEmpty(t, a.String())
		}
	})
}

// fuzzApproval is the approval section FuzzApprovalNeeds checks calls against.
var fuzzApproval = &Approval{Require: []ApprovalRule{
	{Tool: "http_request", When: map[string][]any{"method": {"POST", "DELETE"}}},
	{Tool: "mcp__github__*"},
	{Tool: "transfer", When: map[string][]any{"amount": {json.Number("1000"), json.Number("2.5")}, "force": {true}}},
	{Tool: "t*", When: map[string][]any{"a": {"x", json.Number("0"), false}}},
}, Timeout: time.Hour}

func FuzzApprovalNeeds(f *testing.F) {
	seeds := []struct{ tool, args string }{
		{"http_request", `{"method":"POST","url":"https://x"}`},
		{"http_request", `{"method":"GET","METHOD":"POST"}`},
		{"http_request", `{"method":"POST","method":"GET"}`},
		{"mcp__github__x", `[]`},
		{"transfer", `{"amount":1e3,"force":true}`},
		{"transfer", `{"amount":0.25e1,"force":true,"amount":"x"}`},
		{"tx", `{"a":-0.0}`},
		{"tx", `{"a":"\u0078"}`},
		{"t", `{"a":false} x`},
		{"", `{}`},
	}
	for _, s := range seeds {
		f.Add(s.tool, []byte(s.args))
	}
	f.Fuzz(func(t *testing.T, tool string, args []byte) {
		needed, rule := fuzzApproval.Needs(tool, args)
		again, rule2 := fuzzApproval.Needs(tool, args)
		require.Equal(t, needed, again, "Needs is deterministic")
		require.Equal(t, rule, rule2)
		require.Equal(t, needed, rule >= 0)
		require.Less(t, rule, len(fuzzApproval.Require))
		if needed {
			require.True(t, fuzzApproval.Require[rule].Matches(tool), "the rule that matched names the tool")
		}
		for i, r := range fuzzApproval.Require {
			if r.Matches(tool) && len(r.When) == 0 {
				require.True(t, needed, "an unconditional rule always matches its tools")
				require.LessOrEqual(t, rule, i, "the first rule that matches is named")
			}
		}
		var obj map[string]any
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.UseNumber()
		isObject := dec.Decode(&obj) == nil && obj != nil && !dec.More()
		if !isObject {
			if needed {
				require.Empty(t, fuzzApproval.Require[rule].When, "args that are no object match only rules without when")
			}
			return
		}
		// Formatting does not change the answer.
		var compact bytes.Buffer
		if json.Compact(&compact, args) == nil {
			n, r := fuzzApproval.Needs(tool, compact.Bytes())
			require.Equal(t, needed, n)
			require.Equal(t, rule, r)
		}
		// What encoding/json reads (the last occurrence, the exact name)
		// is never let through when a rule lists it.
		for i, r := range fuzzApproval.Require {
			if !r.Matches(tool) || len(r.When) == 0 {
				continue
			}
			all := true
			for name, values := range r.When {
				v, ok := obj[name]
				if !ok || !slices.ContainsFunc(values, func(w any) bool { return oracleEqual(v, w) }) {
					all = false
				}
			}
			if all {
				require.True(t, needed, "rule %d matches %s as encoding/json reads it", i, args)
				require.LessOrEqual(t, rule, i)
			}
		}
	})
}

// oracleEqual is a simpler equality than Needs': the same JSON type and
// the same decoded value, numbers by text.
func oracleEqual(got, want any) bool {
	switch g := got.(type) {
	case string, bool:
		return g == want
	case json.Number:
		w, ok := want.(json.Number)
		return ok && g == w
	}
	return false
}
