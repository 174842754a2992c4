package capability

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseApproval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want *Approval
	}{
		{name: "absent: nil", doc: "id: a", want: nil},
		{name: "null: nil", doc: "id: a\napproval: null", want: nil},
		{name: "empty: default timeout, nothing required", doc: "id: a\napproval: {}", want: &Approval{Timeout: time.Hour}},
		{name: "empty require: nothing required", doc: "id: a\napproval: {require: []}", want: &Approval{Require: []ApprovalRule{}, Timeout: time.Hour}},
		{name: "null keys: defaults", doc: "id: a\napproval: {require: null, timeout: null, approvers: null, self: null}",
			want: &Approval{Timeout: time.Hour}},
		{name: "the spec's example", doc: `id: a
approval:
  require:
    - tool: http_request
      when: {method: [POST, PUT, PATCH, DELETE]}
    - tool: run_process
    - tool: "mcp__github__*"
  timeout: 1h
  approvers: [oncall]
  self: false
`, want: &Approval{
			Require: []ApprovalRule{
				{Tool: "http_request", When: map[string][]any{"method": {"POST", "PUT", "PATCH", "DELETE"}}},
				{Tool: "run_process"},
				{Tool: "mcp__github__*"},
			},
			Timeout:   time.Hour,
			Approvers: []string{"oncall"},
		}},
		{name: "numbers, booleans and several arguments", doc: "id: a\napproval: {require: [{tool: t, when: {num: [1, 2.5, -3], force: [true], env: [prod]}}]}",
			want: &Approval{Require: []ApprovalRule{{Tool: "t", When: map[string][]any{
				"num": {json.Number("1"), json.Number("2.5"), json.Number("-3")}, "force": {true}, "env": {"prod"},
			}}}, Timeout: time.Hour}},
		{name: "YAML 1.1 words are booleans; quoted they are strings", doc: "id: a\napproval: {require: [{tool: t, when: {mode: [on, 'off', yes]}}]}",
			want: &Approval{Require: []ApprovalRule{{Tool: "t", When: map[string][]any{"mode": {true, "off", true}}}}, Timeout: time.Hour}},
		{name: "empty when: always", doc: "id: a\napproval: {require: [{tool: t, when: {}}]}",
			want: &Approval{Require: []ApprovalRule{{Tool: "t"}}, Timeout: time.Hour}},
		{name: "null when: always", doc: "id: a\napproval: {require: [{tool: t, when: null}]}",
			want: &Approval{Require: []ApprovalRule{{Tool: "t"}}, Timeout: time.Hour}},
		{name: "star alone: every tool", doc: "id: a\napproval: {require: [{tool: '*'}]}",
			want: &Approval{Require: []ApprovalRule{{Tool: "*"}}, Timeout: time.Hour}},
		{name: "timeout 90m, approvers, self", doc: "id: a\napproval: {timeout: 90m, approvers: [oncall, sre], self: true}",
			want: &Approval{Timeout: 90 * time.Minute, Approvers: []string{"oncall", "sre"}, Self: true}},
		{name: "shortest timeout", doc: "id: a\napproval: {timeout: 1s}", want: &Approval{Timeout: time.Second}},
		{name: "longest timeout", doc: "id: a\napproval: {timeout: 168h}", want: &Approval{Timeout: 168 * time.Hour}},
		{name: "compound timeout", doc: "id: a\napproval: {timeout: 1h30m15s}", want: &Approval{Timeout: time.Hour + 30*time.Minute + 15*time.Second}},
		{name: "empty approvers: any approver", doc: "id: a\napproval: {approvers: []}", want: &Approval{Timeout: time.Hour}},
		{name: "JSON", doc: `{"id":"a","approval":{"require":[{"tool":"http_request","when":{"method":["POST"]}}],"timeout":"30s","self":true}}`,
			want: &Approval{Require: []ApprovalRule{{Tool: "http_request", When: map[string][]any{"method": {"POST"}}}},
				Timeout: 30 * time.Second, Self: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse([]byte(tt.doc), Env{})
			require.NoError(t, err)
			require.Equal(t, tt.want, p.Approval)
		})
	}
}

func TestParseApprovalErrors(t *testing.T) {
	t.Parallel()
	const (
		timeout   = "approval.timeout: must be a duration from 1s to 168h"
		approvers = "approval.approvers: must be a list of names"
		self      = "approval.self: must be true or false"
		tool0     = "approval.require[0].tool: is required"
	)
	when := func(i int, arg string) string {
		return "approval.require[" + string(rune('0'+i)) + "].when." + arg + ": must be a list of strings, numbers or booleans"
	}
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{name: "not a mapping: list", doc: "approval: [http_request]", want: []string{"approval: must be a mapping"}},
		{name: "not a mapping: string", doc: "approval: always", want: []string{"approval: must be a mapping"}},
		{name: "not a mapping: boolean", doc: "approval: true", want: []string{"approval: must be a mapping"}},
		{name: "unknown key", doc: "approval: {requires: []}", want: []string{"approval.requires: unknown key"}},
		{name: "unknown keys sorted, before the known ones", doc: "approval: {zz: 1, timeout: 0s, aa: 2}",
			want: []string{"approval.aa: unknown key", "approval.zz: unknown key", timeout}},
		{name: "require not a list: mapping", doc: "approval: {require: {tool: x}}", want: []string{"approval.require: must be a list"}},
		{name: "require not a list: string", doc: "approval: {require: run_process}", want: []string{"approval.require: must be a list"}},
		{name: "require entry not a mapping", doc: "approval: {require: [run_process]}", want: []string{"approval.require[0]: must be a mapping"}},
		{name: "require entry null", doc: "approval: {require: [null]}", want: []string{"approval.require[0]: must be a mapping"}},
		{name: "require entry without tool", doc: "approval: {require: [{when: {method: [POST]}}]}", want: []string{tool0}},
		{name: "require entry with null tool", doc: "approval: {require: [{tool: null}]}", want: []string{tool0}},
		{name: "require entry with empty tool", doc: "approval: {require: [{tool: ''}]}", want: []string{tool0}},
		{name: "second entry without tool", doc: "approval: {require: [{tool: a}, {}]}", want: []string{"approval.require[1].tool: is required"}},
		{name: "tool not a string", doc: "approval: {require: [{tool: 3}]}", want: []string{"approval.require[0].tool: must be a string, got the number 3"}},
		{name: "star inside the tool", doc: "approval: {require: [{tool: 'mcp__*__x'}]}",
			want: []string{`approval.require[0].tool: "mcp__*__x" may hold * only at its end (a prefix followed by *, such as mcp__github__*)`}},
		{name: "two stars at the end", doc: "approval: {require: [{tool: 'a**'}]}",
			want: []string{`approval.require[0].tool: "a**" may hold * only at its end (a prefix followed by *, such as mcp__github__*)`}},
		{name: "unknown key in an entry", doc: "approval: {require: [{tool: a, if: {x: [1]}}]}", want: []string{"approval.require[0].if: unknown key"}},
		{name: "unknown keys in an entry, before its tool", doc: "approval: {require: [{b: 1, a: 2}]}",
			want: []string{"approval.require[0].a: unknown key", "approval.require[0].b: unknown key", tool0}},
		{name: "when not a mapping: list", doc: "approval: {require: [{tool: a, when: [POST]}]}",
			want: []string{"approval.require[0].when: must be a mapping of argument names to lists of values"}},
		{name: "when not a mapping: string", doc: "approval: {require: [{tool: a, when: POST}]}",
			want: []string{"approval.require[0].when: must be a mapping of argument names to lists of values"}},
		{name: "when value a scalar", doc: "approval: {require: [{tool: a, when: {method: POST}}]}", want: []string{when(0, "method")}},
		{name: "when value a mapping", doc: "approval: {require: [{tool: a, when: {method: {is: POST}}}]}", want: []string{when(0, "method")}},
		{name: "when list holding null", doc: "approval: {require: [{tool: a, when: {method: [POST, null]}}]}", want: []string{when(0, "method")}},
		{name: "when list holding a list", doc: "approval: {require: [{tool: a, when: {method: [[POST]]}}]}", want: []string{when(0, "method")}},
		{name: "when list holding a mapping", doc: "approval: {require: [{tool: a, when: {method: [{a: 1}]}}]}", want: []string{when(0, "method")}},
		{name: "when list empty", doc: "approval: {require: [{tool: a, when: {method: []}}]}",
			want: []string{"approval.require[0].when.method: must list at least one value (an empty list matches no call)"}},
		{name: "when argument name empty", doc: "approval: {require: [{tool: a, when: {'': [x]}}]}",
			want: []string{"approval.require[0].when: argument names must not be empty"}},
		{name: "when problems sorted by argument", doc: "approval: {require: [{tool: a}, {tool: b, when: {z: x, a: [null], m: [ok]}}]}",
			want: []string{when(1, "a"), when(1, "z")}},
		{name: "timeout 0s", doc: "approval: {timeout: 0s}", want: []string{timeout}},
		{name: "timeout below 1s", doc: "approval: {timeout: 999ms}", want: []string{timeout}},
		{name: "timeout above 168h", doc: "approval: {timeout: 168h1s}", want: []string{timeout}},
		{name: "timeout negative", doc: "approval: {timeout: -1h}", want: []string{timeout}},
		{name: "timeout in days", doc: "approval: {timeout: 7d}", want: []string{timeout}},
		{name: "timeout a number", doc: "approval: {timeout: 3600}", want: []string{timeout}},
		{name: "timeout without unit", doc: "approval: {timeout: '3600'}", want: []string{timeout}},
		{name: "timeout empty", doc: "approval: {timeout: ''}", want: []string{timeout}},
		{name: "timeout a boolean", doc: "approval: {timeout: true}", want: []string{timeout}},
		{name: "timeout a list", doc: "approval: {timeout: [1h]}", want: []string{timeout}},
		{name: "approvers a string", doc: "approval: {approvers: oncall}", want: []string{approvers}},
		{name: "approvers a mapping", doc: "approval: {approvers: {oncall: true}}", want: []string{approvers}},
		{name: "approvers holding a number", doc: "approval: {approvers: [oncall, 3]}", want: []string{approvers}},
		{name: "approvers holding an empty name", doc: "approval: {approvers: ['']}", want: []string{approvers}},
		{name: "approvers holding a blank name", doc: "approval: {approvers: ['  ']}", want: []string{approvers}},
		{name: "approvers holding null", doc: "approval: {approvers: [null]}", want: []string{approvers}},
		{name: "self a string", doc: "approval: {self: 'false'}", want: []string{self}},
		{name: "self a number", doc: "approval: {self: 0}", want: []string{self}},
		{name: "all at once, in order", doc: "approval: {require: [{}, {tool: a, when: {m: x}}], timeout: 1y, approvers: x, self: 'no', extra: 1}",
			want: []string{"approval.extra: unknown key", tool0, when(1, "m"), timeout, approvers, self}},
		{name: "with the problems of other sections, in document order",
			doc:  "scheduling: {priority: 9}\napproval: {timeout: 1d}\nbudget: {result_chars: 0}",
			want: []string{"scheduling.priority: must be an integer from 1 to 5", timeout, "budget.result_chars: must be an integer greater than 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse([]byte("id: a\n"+tt.doc), Env{})
			require.Nil(t, p)
			require.ErrorIs(t, err, ErrInvalidDocument)
			var de *DocumentError
			require.True(t, errors.As(err, &de))
			got := make([]string, len(de.Problems))
			for i, pr := range de.Problems {
				got[i] = pr.Message
				require.Contains(t, pr.Message, pr.Key+": ", "a problem's message starts with its key")
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestApprovalProblemKeys(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("id: a\napproval: {require: [{tool: a, when: {method: POST}}], timeout: 2w}"), Env{})
	var de *DocumentError
	require.ErrorAs(t, err, &de)
	require.Equal(t, []Problem{
		{Key: "approval.require[0].when.method", Message: "approval.require[0].when.method: must be a list of strings, numbers or booleans"},
		{Key: "approval.timeout", Message: "approval.timeout: must be a duration from 1s to 168h"},
	}, de.Problems)
}

func TestApprovalRuleMatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, tool string
		want          bool
	}{
		{"http_request", "http_request", true},
		{"http_request", "http_request2", false},
		{"http_request", "http", false},
		{"http_request", "HTTP_REQUEST", false},
		{"mcp__github__*", "mcp__github__create_issue", true},
		{"mcp__github__*", "mcp__github__", true},
		{"mcp__github__*", "mcp__gitlab__create_issue", false},
		{"mcp__github__*", "mcp__github", false},
		{"mcp__github*", "mcp__githubx__y", true},
		{"*", "anything", true},
		{"*", "", false},
		{"run_process", "", false},
		{"", "", false},
		{"", "x", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"~"+tt.tool, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, ApprovalRule{Tool: tt.pattern}.Matches(tt.tool))
		})
	}
}

// specApproval is the approval section of docs/approvals.md's example.
func specApproval(t *testing.T) *Approval {
	t.Helper()
	p, err := Parse([]byte(`id: a
approval:
  require:
    - tool: http_request
      when: {method: [POST, PUT, PATCH, DELETE]}
    - tool: run_process
    - tool: "mcp__github__*"
    - tool: transfer
      when: {amount: [1000, 2.5e3], currency: [EUR]}
    - tool: deploy
      when: {force: [true], replicas: [0]}
    - tool: transfer
      when: {dry: [false]}
  approvers: [oncall]
`), Env{})
	require.NoError(t, err)
	return p.Approval
}

func TestApprovalNeeds(t *testing.T) {
	t.Parallel()
	a := specApproval(t)
	tests := []struct {
		name string
		tool string
		args string
		rule int // -1: not needed
	}{
		{name: "POST", tool: "http_request", args: `{"method":"POST","url":"https://x"}`, rule: 0},
		{name: "DELETE", tool: "http_request", args: `{"url":"https://x","method":"DELETE"}`, rule: 0},
		{name: "GET", tool: "http_request", args: `{"method":"GET","url":"https://x"}`, rule: -1},
		{name: "lower-case post is another string", tool: "http_request", args: `{"method":"post"}`, rule: -1},
		{name: "escaped string", tool: "http_request", args: `{"method":"\u0050OST"}`, rule: 0},
		{name: "argument name in other case, as encoding/json reads it", tool: "http_request", args: `{"METHOD":"POST"}`, rule: 0},
		{name: "argument given twice: any occurrence counts", tool: "http_request", args: `{"method":"POST","method":"GET"}`, rule: 0},
		{name: "argument given twice, the last matching", tool: "http_request", args: `{"method":"GET","method":"PUT"}`, rule: 0},
		{name: "key missing", tool: "http_request", args: `{"url":"https://x"}`, rule: -1},
		{name: "nested key does not count", tool: "http_request", args: `{"opts":{"method":"POST"}}`, rule: -1},
		{name: "value a list", tool: "http_request", args: `{"method":["POST"]}`, rule: -1},
		{name: "value an object", tool: "http_request", args: `{"method":{"POST":true}}`, rule: -1},
		{name: "value null", tool: "http_request", args: `{"method":null}`, rule: -1},
		{name: "empty object", tool: "http_request", args: `{}`, rule: -1},
		{name: "no args", tool: "http_request", args: ``, rule: -1},
		{name: "args null", tool: "http_request", args: `null`, rule: -1},
		{name: "args a list", tool: "http_request", args: `[{"method":"POST"}]`, rule: -1},
		{name: "args a string", tool: "http_request", args: `"POST"`, rule: -1},
		{name: "args invalid JSON", tool: "http_request", args: `{"method":"POST"`, rule: -1},
		{name: "args with trailing data", tool: "http_request", args: `{"method":"POST"} {}`, rule: -1},
		{name: "args with surrounding space", tool: "http_request", args: " \n{\"method\" : \"POST\"}\t", rule: 0},
		{name: "always: any args", tool: "run_process", args: `{"binary":"ls"}`, rule: 1},
		{name: "always: no args", tool: "run_process", args: ``, rule: 1},
		{name: "always: args not an object", tool: "run_process", args: `[1,2]`, rule: 1},
		{name: "always: invalid args", tool: "run_process", args: `{{`, rule: 1},
		{name: "prefix", tool: "mcp__github__create_issue", args: `{}`, rule: 2},
		{name: "other server", tool: "mcp__gitlab__create_issue", args: `{}`, rule: -1},
		{name: "unlisted tool", tool: "read_file", args: `{"method":"POST"}`, rule: -1},
		{name: "number equal", tool: "transfer", args: `{"amount":1000,"currency":"EUR"}`, rule: 3},
		{name: "number with a fraction", tool: "transfer", args: `{"amount":1000.0,"currency":"EUR"}`, rule: 3},
		{name: "number with an exponent", tool: "transfer", args: `{"amount":1e3,"currency":"EUR"}`, rule: 3},
		{name: "number of the document's exponent form", tool: "transfer", args: `{"amount":2500,"currency":"EUR"}`, rule: 3},
		{name: "number 0.25e4", tool: "transfer", args: `{"amount":0.25e4,"currency":"EUR"}`, rule: 3},
		{name: "number as a string does not match", tool: "transfer", args: `{"amount":"1000","currency":"EUR"}`, rule: -1},
		{name: "number not listed", tool: "transfer", args: `{"amount":1000.0001,"currency":"EUR"}`, rule: -1},
		{name: "number beyond float64 precision", tool: "transfer", args: `{"amount":1000.0000000000000000001,"currency":"EUR"}`, rule: -1},
		{name: "one of two keys: AND", tool: "transfer", args: `{"amount":1000,"currency":"USD"}`, rule: -1},
		{name: "the other rule of the tool: OR", tool: "transfer", args: `{"amount":5,"dry":false}`, rule: 5},
		{name: "boolean false does not match the string", tool: "transfer", args: `{"dry":"false"}`, rule: -1},
		{name: "boolean true", tool: "deploy", args: `{"force":true,"replicas":0}`, rule: 4},
		{name: "boolean false", tool: "deploy", args: `{"force":false,"replicas":0}`, rule: -1},
		{name: "negative zero is zero", tool: "deploy", args: `{"force":true,"replicas":-0.0}`, rule: 4},
		{name: "zero with an exponent", tool: "deploy", args: `{"force":true,"replicas":0e10}`, rule: 4},
		{name: "boolean as a number does not match", tool: "deploy", args: `{"force":1,"replicas":0}`, rule: -1},
		{name: "empty tool name", tool: "", args: `{}`, rule: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			needed, rule := a.Needs(tt.tool, json.RawMessage(tt.args))
			require.Equal(t, tt.rule, rule)
			require.Equal(t, tt.rule >= 0, needed)
		})
	}
}

func TestApprovalNeedsNilAndEmpty(t *testing.T) {
	t.Parallel()
	var none *Approval
	needed, rule := none.Needs("run_process", json.RawMessage(`{}`))
	require.False(t, needed)
	require.Equal(t, -1, rule)
	needed, rule = (&Approval{}).Needs("run_process", nil)
	require.False(t, needed)
	require.Equal(t, -1, rule)
}

func TestApprovalNeedsCodeValues(t *testing.T) {
	t.Parallel()
	a := &Approval{Require: []ApprovalRule{
		{Tool: "t", When: map[string][]any{"n": {3, int64(4), 5.5, json.Number("6")}}},
		{Tool: "u", When: map[string][]any{"n": {nil, []any{"x"}, uint(1)}}},
	}}
	for _, tc := range []struct {
		tool, args string
		rule       int
	}{
		{"t", `{"n":3}`, 0}, {"t", `{"n":4.0}`, 0}, {"t", `{"n":55e-1}`, 0}, {"t", `{"n":6}`, 0}, {"t", `{"n":7}`, -1},
		{"u", `{"n":null}`, -1}, {"u", `{"n":["x"]}`, -1}, {"u", `{"n":1}`, -1},
	} {
		_, rule := a.Needs(tc.tool, json.RawMessage(tc.args))
		require.Equal(t, tc.rule, rule, "%s %s", tc.tool, tc.args)
	}
}

func TestNormNumber(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"0", "0", true}, {"-0", "0", true}, {"0.000", "0", true}, {"0e99", "0", true},
		{"1", "1e0", true}, {"1.0", "1e0", true}, {"10e-1", "1e0", true}, {"0.1e1", "1e0", true}, {"1E0", "1e0", true}, {"1e+0", "1e0", true},
		{"100", "1e2", true}, {"1e2", "1e2", true}, {"-1.50", "-15e-1", true}, {"0.001", "1e-3", true},
		{"12345678901234567890123", "12345678901234567890123e0", true},
		{"1e1099511627776", "1e1099511627776", true},
		{"1e1099511627777", "", false}, {"1e99999999999999999999", "", false},
		{"", "", false}, {"-", "", false}, {"01", "", false}, {"1.", "", false}, {".5", "", false}, {"+1", "", false},
		{"1e", "", false}, {"1e+", "", false}, {"1x", "", false}, {"0x10", "", false}, {"1.5.2", "", false}, {"--1", "", false}, {"NaN", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, ok := normNumber(tt.in)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestFormatTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   time.Duration
		want string
	}{
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{90 * time.Second, "1m30s"},
		{2 * time.Second, "2s"},
		{168 * time.Hour, "168h"},
		{time.Hour + 30*time.Second, "1h0m30s"},
		{time.Minute, "1m"},
		{1500 * time.Millisecond, "1.5s"},
		{0, "0s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			got := FormatTimeout(tt.in)
			require.Equal(t, tt.want, got)
			back, err := time.ParseDuration(got)
			require.NoError(t, err)
			require.Equal(t, tt.in, back, "the text reads back")
		})
	}
}

func TestApprovalString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a    *Approval
		want string
	}{
		{name: "the spec's example", a: &Approval{
			Require: []ApprovalRule{
				{Tool: "http_request", When: map[string][]any{"method": {"POST", "PUT", "PATCH", "DELETE"}}},
				{Tool: "run_process"},
				{Tool: "mcp__github__*"},
			},
			Timeout: time.Hour, Approvers: []string{"oncall"},
		}, want: "http_request when method is POST, PUT, PATCH or DELETE; run_process; mcp__github__* (timeout 1h, approvers oncall, self-approval off)"},
		{name: "several arguments, in name order; numbers and booleans", a: &Approval{
			Require: []ApprovalRule{{Tool: "deploy", When: map[string][]any{"replicas": {json.Number("0")}, "force": {true}}}},
			Timeout: 90 * time.Minute, Approvers: []string{"oncall", "sre"}, Self: true,
		}, want: "deploy when force is true and replicas is 0 (timeout 1h30m, approvers oncall, sre, self-approval on)"},
		{name: "two values", a: &Approval{Require: []ApprovalRule{{Tool: "h", When: map[string][]any{"method": {"POST", "DELETE"}}}}, Timeout: time.Hour},
			want: "h when method is POST or DELETE (timeout 1h, any approver, self-approval off)"},
		{name: "strings that could be read otherwise are quoted", a: &Approval{
			Require: []ApprovalRule{{Tool: "t", When: map[string][]any{"v": {"", "true", "1", "a, b", " x", "a or b", `say "hi"`, "/srv/data"}}}},
		}, want: `t when v is "", "true", "1", "a, b", " x", "a or b", "say \"hi\"" or /srv/data (timeout 1h, any approver, self-approval off)`},
		{name: "no rules", a: &Approval{Timeout: 2 * time.Second}, want: "no call needs approval (timeout 2s, any approver, self-approval off)"},
		{name: "nil", a: nil, want: "no approval section"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.a.String())
		})
	}
}

func TestApprovalTimeoutOrDefault(t *testing.T) {
	t.Parallel()
	var none *Approval
	require.Equal(t, time.Hour, none.TimeoutOrDefault())
	require.Equal(t, time.Hour, (&Approval{}).TimeoutOrDefault())
	require.Equal(t, time.Minute, (&Approval{Timeout: time.Minute}).TimeoutOrDefault())
}
