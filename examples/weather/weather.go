//capstan:toolpackage

// Package weather is the complete tool of docs/writing-tools.md: a tool
// that reads the weather of a city from one HTTP API, with its typed
// arguments, its schema and its capability declaration. Only public
// packages of Capstan are imported, as in a module of your own.
package weather

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/capstanhq/capstan/tool"
)

// Args are the tool's arguments; Schema describes the same fields.
type Args struct {
	City string `json:"city"`
	Days int    `json:"days,omitempty"`
}

// Schema is the JSON Schema the worker checks arguments against before
// Execute runs.
const Schema = `{
  "type": "object",
  "properties": {
    "city": {"type": "string", "minLength": 1, "description": "city name, e.g. Oslo"},
    "days": {"type": "integer", "minimum": 1, "maximum": 7, "description": "days of forecast (default 1)"}
  },
  "required": ["city"],
  "additionalProperties": false
}`

// Tool returns the weather tool. It reaches the network only through
// tc.Fetch, which the worker builds from the declared hosts intersected
// with the personality's network allow list.
func Tool() tool.Tool {
	return tool.Tool{
		Name:        "weather",
		Description: "Returns the weather forecast of a city.",
		Schema:      json.RawMessage(Schema),
		Toolset:     "weather",
		Capabilities: tool.Capabilities{
			Network: &tool.Network{AllowedHosts: []string{"api.weather.example"}},
		},
		Permissions:       []string{"weather:read"},
		OutputIsUntrusted: true,
		// A forecast changes nothing: two runs of one call are harmless,
		// so the worker takes no lease for it.
		SideEffects: tool.SideEffectsNone,
		Execute:     tool.Typed(forecast),
	}
}

func forecast(ctx context.Context, a Args, tc *tool.Context) (tool.Result, error) {
	if tc.Fetch == nil {
		return tool.Fail(tool.CodeNotAvailable, "network capability not configured"), nil
	}
	days := max(a.Days, 1)
	_ = tc.Emit(tool.Progress{Message: "asking for " + a.City, Audience: tool.AudienceUser})
	u := fmt.Sprintf("https://api.weather.example/v1/forecast?city=%s&days=%d", url.QueryEscape(a.City), days)
	resp, err := tc.Fetch.Fetch(ctx, tool.Request{Method: "GET", URL: u})
	if err != nil {
		return tool.Result{}, err // a denial or a network failure: execution_failed
	}
	if resp.StatusCode != 200 {
		return tool.Fail(tool.CodeExecutionFailed, "weather API answered "+resp.Status), nil
	}
	return tool.OK(string(resp.Body)), nil
}
