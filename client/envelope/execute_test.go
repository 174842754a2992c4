package envelope_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/client/envelope"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/telemetry/telemetrytest"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// TestExecuteAnthropicTurnThroughARealWorker runs a model's turn, recorded
// in Anthropic's shape, through a real worker: good calls run, malformed and
// unknown ones are answered in place, the answer is in the provider's shape
// and in order, and a mapped id is recorded as gen_ai.tool.call.id.
func TestExecuteAnthropicTurnThroughARealWorker(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	url := bustest.Server(t)
	startEchoWorker(t, ctx, url)
	tp, rec := telemetrytest.Tracing(t)
	c, err := client.New(ctx, client.Config{NATSURL: url, NATSCreds: bustest.Creds(url), Name: t.Name(), TracerProvider: tp})
	require.NoError(t, err)
	t.Cleanup(c.Close)

	msg := `{"role":"assistant","content":[
	  {"type":"text","text":"Running three tools."},
	  {"type":"tool_use","id":"toolu_01A09q90qw90lq917835lq9","name":"echo","input":{"text":"first"}},
	  {"type":"tool_use","id":"toolu 02 spaced","name":"echo","input":{"text":"second"}},
	  {"type":"tool_use","id":"toolu_03","name":"echo","input":"not an object"},
	  {"type":"tool_use","id":"toolu_04","name":"no_such_tool","input":{}}
	]}`
	calls, err := envelope.FromAnthropic([]byte(msg), client.Call{SessionID: "s1"})
	require.NoError(t, err)
	require.Len(t, calls, 4)
	results := envelope.Execute(ctx, c, client.Turn{BatchID: "turn-1", Wait: 30 * time.Second}, calls)
	answer := envelope.ToAnthropic(calls, results)

	require.Equal(t, "user", answer.Role)
	require.Equal(t, []envelope.AnthropicToolResult{
		{Type: "tool_result", ToolUseID: "toolu_01A09q90qw90lq917835lq9", Content: "first"},
		{Type: "tool_result", ToolUseID: "toolu 02 spaced", Content: "second"},
		{Type: "tool_result", ToolUseID: "toolu_03", Content: "input_invalid: invalid tool call: content[3].input must be a JSON object", IsError: true},
		{Type: "tool_result", ToolUseID: "toolu_04", Content: "not_available: Unknown tool: no_such_tool", IsError: true},
	}, answer.Content)
	require.Equal(t, "cx-dG9vbHUgMDIgc3BhY2Vk", results[1].CallID, "the spaced id is mapped")

	toolCallIDs := map[string]string{}
	for _, s := range rec.Ended() {
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		if id, ok := attrs["messaging.message.id"]; ok {
			toolCallIDs[id] = attrs["gen_ai.tool.call.id"]
		}
	}
	require.Equal(t, map[string]string{
		"toolu_01A09q90qw90lq917835lq9": "toolu_01A09q90qw90lq917835lq9",
		"cx-dG9vbHUgMDIgc3BhY2Vk":       "toolu 02 spaced",
	}, toolCallIDs, "producer spans record the provider's id; malformed and refused calls are never published")

	// The provider id is the idempotency key: the same turn replayed is
	// answered from the stored results, in a new batch, without running again.
	again := envelope.Execute(ctx, c, client.Turn{BatchID: "turn-2", Wait: 30 * time.Second}, calls[:2])
	require.Equal(t, "turn-1", again[0].BatchID)
	require.Equal(t, "first", again[0].Value)
}

func startEchoWorker(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	conn := bustest.Conn(t, url, "")
	kv, err := conn.KV(ctx, bus.Personalities)
	require.NoError(t, err)
	_, err = kv.Put(ctx, "default", []byte("id: default\n"))
	require.NoError(t, err)
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), WorkerID: "envelope",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownGrace: 2 * time.Second}, echo.Tool())
	require.NoError(t, err)
	workertest.Run(t, w, nil)
}
