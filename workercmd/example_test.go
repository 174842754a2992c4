package workercmd_test

import (
	"context"

	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/workercmd"
)

type pingArgs struct {
	Host string `json:"host"`
}

func pingTool() tool.Tool {
	return tool.Tool{
		Name:        "ping_note",
		Description: "Says which host would be pinged.",
		Schema:      []byte(`{"type":"object","properties":{"host":{"type":"string"}},"required":["host"]}`),
		Execute: tool.Typed(func(_ context.Context, a pingArgs, _ *tool.Context) (tool.Result, error) {
			return tool.OK("would ping " + a.Host), nil
		}),
	}
}

// A worker binary with a tool of its own, next to the built-in tools: this
// is the whole of its main package's main function. It is configured like
// cmd/worker, with CAPSTAN_* variables (docs/operations.md).
func ExampleMain() {
	workercmd.Main(pingTool())
}
