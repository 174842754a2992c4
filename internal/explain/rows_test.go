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
