// Package echo is the echo tool: it emits the progress events it is given,
// waits sleep_ms honouring cancellation and timeouts, and returns text
// unchanged. It touches nothing external; it is the tool for tests, demos
// and benchmarks.
package echo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/tool"
)

// Name is the tool's name.
const Name = "echo"

// MaxSleepMS is the largest sleep_ms accepted.
const MaxSleepMS = 600000

const schema = `{
  "type": "object",
  "properties": {
    "text": {"type": "string", "description": "returned unchanged"},
    "sleep_ms": {"type": "integer", "minimum": 0, "maximum": 600000, "description": "wait this long before answering"},
    "progress": {
      "type": "array",
      "description": "progress events to emit before waiting",
      "items": {
        "type": "object",
        "properties": {
          "message": {"type": "string"},
          "percent": {"type": "number", "minimum": 0, "maximum": 100},
          "audience": {"type": "string", "enum": ["internal", "user", "dashboard"]}
        },
        "required": ["message"],
        "additionalProperties": false
      }
    }
  },
  "required": ["text"],
  "additionalProperties": false
}`

type args struct {
	Text     string `json:"text"`
	SleepMS  int64  `json:"sleep_ms"`
	Progress []struct {
		Message  string   `json:"message"`
		Percent  *float64 `json:"percent"`
		Audience string   `json:"audience"`
	} `json:"progress"`
}

// Tool returns the echo tool.
func Tool() tool.Tool {
	return tool.Tool{
		Name:        Name,
		SideEffects: tool.SideEffectsNone,
		Description: "Returns text unchanged after emitting the given progress events and waiting sleep_ms milliseconds. For tests, demos and benchmarks.",
		Schema:      json.RawMessage(schema),
		Toolset:     "debug",
		Execute:     tool.Typed(execute),
	}
}

func execute(ctx context.Context, a args, tc *tool.Context) (tool.Result, error) {
	for i, p := range a.Progress {
		ev := tool.Progress{Message: p.Message, Percent: p.Percent, Audience: tool.Audience(p.Audience)}
		if err := tc.Emit(ev); err != nil {
			return tool.Result{}, fmt.Errorf("emit progress %d: %w", i, err)
		}
	}
	if a.SleepMS > 0 {
		t := time.NewTimer(time.Duration(a.SleepMS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return tool.Result{}, context.Cause(ctx)
		}
	}
	return tool.OK(a.Text), nil
}
