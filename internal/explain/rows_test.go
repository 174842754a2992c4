package explain

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

func TestSchedulingView(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want SchedulingView
		text string
	}{
		{name: "no section: defaults", doc: "id: a", want: SchedulingView{Priority: 3, Weight: 1},
			text: "priority 3, weight 1, no concurrency cap"},
		{name: "interactive", doc: "id: a\nscheduling: {priority: 1, weight: 10}", want: SchedulingView{Priority: 1, Weight: 10},
			text: "priority 1, weight 10, no concurrency cap"},
		{name: "batch", doc: "id: a\nscheduling: {priority: 4, max_concurrency: 16}", want: SchedulingView{Priority: 4, Weight: 1, MaxConcurrency: 16},
			text: "priority 4, weight 1, max_concurrency 16"},
		{name: "explicit zero cap", doc: "id: a\nscheduling: {max_concurrency: 0}", want: SchedulingView{Priority: 3, Weight: 1},
			text: "priority 3, weight 1, no concurrency cap"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := parsePersonality(t, tc.doc)
			require.Equal(t, tc.want, Scheduling(p))
			require.Equal(t, tc.text, Scheduling(p).String())
			e := Tool(&tool.Tool{Name: "echo"}, "echo", p)
			require.True(t, e.Allowed)
			require.Equal(t, tc.want, e.Grant.Scheduling, "every grant shows the personality's scheduling")
		})
	}
	// A personality built in code, without Parse, shows the defaults.
	require.Equal(t, SchedulingView{Priority: 3, Weight: 1}, Scheduling(&capability.Personality{ID: "code"}))
}

func TestSchedulingJSON(t *testing.T) {
	t.Parallel()
	p := parsePersonality(t, "id: a\nscheduling: {priority: 4, max_concurrency: 16}")
	b, err := json.Marshal(Tool(&tool.Tool{Name: "echo"}, "echo", p))
	require.NoError(t, err)
	var got struct {
		Grant struct {
			Scheduling map[string]any `json:"scheduling"`
		} `json:"grant"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, map[string]any{"priority": 4.0, "weight": 1.0, "max_concurrency": 16.0}, got.Grant.Scheduling)

	b, err = json.Marshal(Tool(&tool.Tool{Name: "echo"}, "echo", parsePersonality(t, "id: a")))
	require.NoError(t, err)
	require.Contains(t, string(b), `"scheduling":{"priority":3,"weight":1,"max_concurrency":0}`, "defaults are shown, a zero cap too")
}

func TestApprovalView(t *testing.T) {
	t.Parallel()
	const doc = `id: a
mcp_servers: [github]
approval:
  require:
    - tool: http_request
      when: {method: [POST, PUT, PATCH, DELETE]}
    - tool: transfer
      when: {amount: [1000], currency: [EUR]}
    - tool: transfer
      when: {force: [true]}
    - tool: run_process
    - tool: "mcp__github__*"
    - tool: run_process
      when: {binary: [rm]}
    - tool: "mcp__github__delete_repo"
      when: {confirm: [true]}
  approvers: [oncall, sre]
`
	p := parsePersonality(t, doc)
	tests := []struct {
		name string
		p    *capability.Personality
		tool string
		want *ApprovalView
		text string
	}{
		{name: "conditional", p: p, tool: "http_request",
			want: &ApprovalView{Required: "when", When: []map[string][]any{{"method": {"POST", "PUT", "PATCH", "DELETE"}}},
				Timeout: "1h", Approvers: []string{"oncall", "sre"}},
			text: "required when method is POST, PUT, PATCH or DELETE (timeout 1h, approvers oncall, sre)"},
		{name: "two conditional rules, in document order", p: p, tool: "transfer",
			want: &ApprovalView{Required: "when", When: []map[string][]any{
				{"amount": {json.Number("1000")}, "currency": {"EUR"}},
				{"force": {true}},
			}, Timeout: "1h", Approvers: []string{"oncall", "sre"}},
			text: "required when amount is 1000 and currency is EUR, or when force is true (timeout 1h, approvers oncall, sre)"},
		{name: "always wins over a later condition", p: p, tool: "run_process",
			want: &ApprovalView{Required: "always", Timeout: "1h", Approvers: []string{"oncall", "sre"}},
			text: "required (timeout 1h, approvers oncall, sre)"},
		{name: "always by prefix wins over a later condition", p: p, tool: "mcp__github__delete_repo",
			want: &ApprovalView{Required: "always", Timeout: "1h", Approvers: []string{"oncall", "sre"}},
			text: "required (timeout 1h, approvers oncall, sre)"},
		{name: "a tool no rule names", p: p, tool: "read_file"},
		{name: "no approval section", p: parsePersonality(t, "id: a"), tool: "run_process"},
		{name: "empty require", p: parsePersonality(t, "id: a\napproval: {require: [], self: true}"), tool: "run_process"},
		{name: "timeout, any approver, self", p: parsePersonality(t, "id: a\napproval: {require: [{tool: '*'}], timeout: 90s, self: true}"), tool: "echo",
			want: &ApprovalView{Required: "always", Timeout: "1m30s", Approvers: []string{}, Self: true},
			text: "required (timeout 1m30s, any approver, self-approval on)"},
		{name: "a personality built in code: default timeout", p: &capability.Personality{ID: "code", Approval: &capability.Approval{
			Require: []capability.ApprovalRule{{Tool: "echo"}}}}, tool: "echo",
			want: &ApprovalView{Required: "always", Timeout: "1h", Approvers: []string{}},
			text: "required (timeout 1h, any approver)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Approval(tc.p, tc.tool)
			require.Equal(t, tc.want, got)
			if got != nil {
				require.Equal(t, tc.text, got.String())
			}
			e := Tool(&tool.Tool{Name: tc.tool}, tc.tool, tc.p)
			require.True(t, e.Allowed)
			require.Equal(t, tc.want, e.Grant.Approval, "the grant shows the tool's approval")
			requireWorkerApproval(t, tc.tool, tc.p, got)
		})
	}
}

func TestApprovalJSON(t *testing.T) {
	t.Parallel()
	p := parsePersonality(t, `id: a
approval:
  require: [{tool: transfer, when: {amount: [1000, 2.5], force: [true], currency: [EUR]}}, {tool: echo}]
  timeout: 30m
  approvers: [oncall]
`)
	tests := []struct {
		tool string
		want string
	}{
		{tool: "transfer", want: `{"required":"when","when":[{"amount":[1000,2.5],"currency":["EUR"],"force":[true]}],` +
			`"timeout":"30m","approvers":["oncall"],"self":false}`},
		{tool: "echo", want: `{"required":"always","timeout":"30m","approvers":["oncall"],"self":false}`},
		{tool: "read_file", want: `null`},
	}
	for _, tc := range tests {
		t.Run(tc.tool, func(t *testing.T) {
			t.Parallel()
			b, err := json.Marshal(Tool(&tool.Tool{Name: tc.tool}, tc.tool, p))
			require.NoError(t, err)
			var got struct {
				Grant struct {
					Approval json.RawMessage `json:"approval"`
				} `json:"grant"`
			}
			require.NoError(t, json.Unmarshal(b, &got))
			require.JSONEq(t, tc.want, string(got.Grant.Approval))
		})
	}
}

func TestRows(t *testing.T) {
	t.Parallel()
	researcher := parsePersonality(t, researcherDoc)
	tests := []struct {
		name string
		tool *tool.Tool
		p    *capability.Personality
		want [][2]string
	}{
		{name: "nothing external, capped scheduling", tool: &tool.Tool{Name: "weather", Permissions: []string{"weather:read"}}, p: researcher,
			want: [][2]string{
				{"reach", "nothing external (no capabilities declared)"},
				{"scheduling", "priority 2, weight 5, max_concurrency 4"},
				{"result budget", "50000 chars (personality 50000)"},
				{"blobs", "allowed"},
			}},
		{name: "approval between the rate limit and scheduling", tool: &tool.Tool{Name: "gh"}, p: researcher,
			want: [][2]string{
				{"reach", "nothing external (no capabilities declared)"},
				{"rate limit", "100 calls per 1h (fleet-wide)"},
				{"approval", "required when method is POST or DELETE (timeout 1h30m, approvers oncall)"},
				{"scheduling", "priority 2, weight 5, max_concurrency 4"},
				{"result budget", "50000 chars (personality 50000)"},
				{"blobs", "allowed"},
			}},
		{name: "process limits, rate limit and default scheduling",
			tool: &tool.Tool{Name: "gh", Capabilities: tool.Capabilities{Process: &tool.Process{AllowedBinaries: []string{"git"}}}},
			p: parsePersonality(t, "id: b\nprocess: {limits: {memory: 512MiB, pids: 64, cpu: 1.5}}\nrate_limits: {gh: {requests: 5, window: 1m}}\n"+
				"budget: {result_chars: 1000, blobs: false}\n"),
			want: [][2]string{
				{"binaries", "git"},
				{"process limits", "memory 512MiB, pids 64, cpu 1.5, tmp 256MiB"},
				{"rate limit", "5 calls per 1m (fleet-wide)"},
				{"scheduling", "priority 3, weight 1, no concurrency cap"},
				{"result budget", "1000 chars (personality 1000)"},
				{"blobs", "forbidden by the personality (budget.blobs: false)"},
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := Tool(tc.tool, tc.tool.Name, tc.p)
			require.True(t, e.Allowed, "%+v", e)
			require.Equal(t, tc.want, Rows(e.Grant))
		})
	}
}
