package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// countTool counts its runs and answers with the run's number.
func countTool(name string, effects tool.SideEffects, runs *atomic.Int32) tool.Tool {
	return tool.Tool{Name: name, Description: "counts its runs", SideEffects: effects,
		Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
			return tool.OK("run " + string(rune('0'+runs.Add(1)))), nil
		}}
}

// TestResultsStreamIsTheLedger: a call id sent again after the
// deduplication window (simulated with another Nats-Msg-Id) is a second
// stream message with delivery count 1. A tool without side effects runs
// again, but the results stream refuses its second result: one result, the
// first. An exclusive tool's call is checked against the stored result
// before it runs, and does not run again. Either way the duplicate is acked.
func TestResultsStreamIsTheLedger(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		effects tool.SideEffects
		runs    int32
	}{
		{tool.SideEffectsNone, 2},
		{tool.SideEffectsIdempotent, 2},
		{tool.SideEffectsExclusive, 1},
		{"", 1}, // undeclared is exclusive
	} {
		t.Run(string(tc.effects.Effective())+"/"+string(tc.effects), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var runs atomic.Int32
			e.start(worker.Config{}, countTool("count", tc.effects, &runs))
			body, err := json.Marshal(protocol.Call{CallID: "dup", Tool: "count", SessionID: "s", Args: json.RawMessage(`{}`)})
			require.NoError(t, err)
			e.publishAs("default", "default", "count", body, "dup")
			require.Equal(t, "run 1", e.result("dup", "dup").Value)
			e.waitCallsDrained()

			e.publishAs("default", "default", "count", body, "dup-after-the-window")
			e.waitCallsDrained()
			require.Equal(t, tc.runs, runs.Load())
			require.Equal(t, 1, e.resultsOn("dup", "dup"), "one result per call, whatever ran")
			require.Equal(t, "run 1", e.result("dup", "dup").Value, "the first result stays")
		})
	}
}
