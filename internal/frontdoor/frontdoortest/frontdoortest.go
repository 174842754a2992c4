// Package frontdoortest starts a real worker pool for the tests of the MCP
// front door: an embedded JetStream server, personalities that may call
// different tools (two of them hold echo calls for approval), and a worker
// hosting those tools.
package frontdoortest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
)

// The personalities of a Pool and the tools each may call.
const (
	// Alpha may call echo and whoami.
	Alpha = "alpha"
	// Beta may call echo and beta_only.
	Beta = "beta"
	// Conformance may call echo and the tools of ConformanceTools.
	Conformance = "conformance"
	// SelfApproval may call echo and whoami; every echo call is held for
	// approval, and the caller's own session may decide (approval.self).
	SelfApproval = "self-approval"
	// OthersApprove may call echo and whoami; every echo call is held for
	// approval, which only an approver may give (approval.self is false).
	OthersApprove = "others-approve"
)

// Tool names hosted by a Pool besides echo.
const (
	// WhoAmI returns the call as the tool saw it: the value "whoami" and a
	// structured payload with session_id, session_key, platform, agent_id
	// and personality_id.
	WhoAmI = "whoami"
	// BetaOnly is a tool only Beta may call; it returns BetaSecret.
	BetaOnly = "beta_only"
	// BetaSecret is BetaOnly's value.
	BetaSecret = "a value only personality beta may see"
)

// Personality documents of the personalities above.
const (
	AlphaDoc         = "id: alpha\ntoolset: [echo, whoami]\n"
	BetaDoc          = "id: beta\ntoolset: [echo, beta_only]\n"
	ConformanceDoc   = "id: conformance\ntoolset: [echo, test_simple_text, test_error_handling, test_tool_with_progress, json_schema_2020_12_tool]\n"
	SelfApprovalDoc  = "id: self-approval\ntoolset: [echo, whoami]\napproval:\n  require: [{tool: echo}]\n  self: true\n"
	OthersApproveDoc = "id: others-approve\ntoolset: [echo, whoami]\napproval:\n  require: [{tool: echo}]\n"
)

// Pool is a running embedded server with a worker pool.
type Pool struct {
	// URL is the server's client URL; connect with Creds.
	URL string
	// Creds is the server's credentials file.
	Creds string
	// Conn is a connection of the test (prefix "capstan").
	Conn *bus.Conn
}

// Start starts the server, stores the documents of every personality above, and
// runs a worker hosting echo, whoami, beta_only and ConformanceTools until
// the test ends.
func Start(t testing.TB) *Pool {
	t.Helper()
	url := bustest.Server(t)
	p := &Pool{URL: url, Creds: bustest.Creds(url), Conn: bustest.Conn(t, url, "")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := p.Conn.KV(ctx, bus.Personalities)
	if err != nil {
		t.Fatalf("personalities bucket: %v", err)
	}
	for id, doc := range map[string]string{Alpha: AlphaDoc, Beta: BetaDoc, Conformance: ConformanceDoc,
		SelfApproval: SelfApprovalDoc, OthersApprove: OthersApproveDoc} {
		if _, err := kv.Put(ctx, id, []byte(doc)); err != nil {
			t.Fatalf("store personality %s: %v", id, err)
		}
	}
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: p.Creds, WorkerID: "frontdoortest",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownGrace: time.Second},
		append([]tool.Tool{echo.Tool(), whoAmI(), betaOnly()}, ConformanceTools()...)...)
	if err != nil {
		t.Fatalf("worker: %v", err)
	}
	workertest.Run(t, w, nil)
	return p
}

func whoAmI() tool.Tool {
	return tool.Tool{
		Name:        WhoAmI,
		Description: "Returns the call as the tool sees it.",
		Schema:      []byte(`{"type":"object","properties":{},"additionalProperties":false}`),
		Toolset:     "test",
		Execute: func(_ context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			r := tool.OK(WhoAmI)
			r.Structured = map[string]any{"session_id": tc.SessionID, "session_key": tc.SessionKey, "platform": tc.Platform,
				"agent_id": tc.AgentID, "personality_id": tc.PersonalityID}
			return r, nil
		},
	}
}

func betaOnly() tool.Tool {
	return tool.Tool{
		Name:        BetaOnly,
		Description: "A tool only personality beta may call.",
		Schema:      []byte(`{"type":"object","properties":{}}`),
		Toolset:     "test",
		Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
			return tool.OK(BetaSecret), nil
		},
	}
}

// ConformanceTools are ordinary Capstan tools with the names and behaviour
// the server scenarios of the official MCP conformance suite
// (@modelcontextprotocol/conformance) expect of the tools they call:
// test_simple_text, test_error_handling, test_tool_with_progress (three
// user-audience progress events, 0, 50 and 100 percent, 50 ms apart) and
// json_schema_2020_12_tool (an input schema using JSON Schema 2020-12
// keywords). Served through the front door, they let those scenarios check
// its mapping of Capstan results, failures, progress and schemas to MCP.
func ConformanceTools() []tool.Tool {
	noArgs := json.RawMessage(`{"type":"object","properties":{}}`)
	return []tool.Tool{
		{
			Name: "test_simple_text", Description: "Returns a simple text response.", Schema: noArgs, Toolset: "conformance",
			Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
				return tool.OK("This is a simple text response for testing."), nil
			},
		},
		{
			Name: "test_error_handling", Description: "Always fails.", Schema: noArgs, Toolset: "conformance",
			Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
				return tool.Fail(tool.CodeExecutionFailed, "This tool intentionally returns an error for testing"), nil
			},
		},
		{
			Name: "test_tool_with_progress", Description: "Reports progress 0, 50 and 100 percent.", Schema: noArgs, Toolset: "conformance",
			Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
				for i, pct := range []float64{0, 50, 100} {
					if i > 0 {
						select {
						case <-time.After(50 * time.Millisecond):
						case <-ctx.Done():
							return tool.Result{}, context.Cause(ctx)
						}
					}
					if err := tc.Emit(tool.Progress{Message: "step", Percent: &pct, Audience: tool.AudienceUser}); err != nil {
						return tool.Result{}, err
					}
				}
				return tool.OK("Progress test completed"), nil
			},
		},
		{
			Name: "json_schema_2020_12_tool", Description: "Tool with JSON Schema 2020-12 features", Toolset: "conformance",
			Schema: json.RawMessage(`{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
  "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
  "additionalProperties": false
}`),
			Execute: func(_ context.Context, args json.RawMessage, _ *tool.Context) (tool.Result, error) {
				return tool.OK(string(args)), nil
			},
		},
	}
}
