package envelope

import (
	"encoding/json"
	"fmt"

	"github.com/capstanhq/capstan/client"
)

// MCPCall is a translated MCP tools/call request.
type MCPCall struct {
	// RequestID is the JSON-RPC id of the request (nil when data was the
	// params object alone), echoed by ToMCP.
	RequestID json.RawMessage
	ToolCall
}

// MCPContent is one content item of a CallToolResult: text only, as Capstan
// results are text.
type MCPContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// MCPCallToolResult is the MCP CallToolResult of a Capstan result.
type MCPCallToolResult struct {
	Content           []MCPContent    `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
	IsError           bool            `json:"isError,omitempty"`
}

// MCPResponse is the JSON-RPC response to a tools/call request.
type MCPResponse struct {
	JSONRPC string            `json:"jsonrpc"`
	ID      json.RawMessage   `json:"id"`
	Result  MCPCallToolResult `json:"result"`
}

// FromMCP translates an MCP tools/call request: data is the JSON-RPC request
// ({"jsonrpc":"2.0","id","method":"tools/call","params":{"name","arguments"}})
// or its params object. MCP calls carry no call id of their own (JSON-RPC
// ids repeat in every session), so the call gets a new call_id unless tmpl
// has one. A request of another method is an error; a malformed name or
// arguments make a Failure.
func FromMCP(data []byte, tmpl client.Call) (MCPCall, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(trimJSONSpace(data), &obj); err != nil || obj == nil {
		return MCPCall{}, fmt.Errorf("envelope: MCP tools/call: want a JSON-RPC request or its params object")
	}
	at := ""
	var req MCPCall
	if m, ok := obj["method"]; ok {
		var method string
		if json.Unmarshal(m, &method) != nil || method != "tools/call" {
			return MCPCall{}, fmt.Errorf("envelope: MCP request: method must be %q", "tools/call")
		}
		req.RequestID = obj["id"]
		at = "params."
		var params map[string]json.RawMessage
		if json.Unmarshal(obj["params"], &params) != nil {
			params = nil
		}
		obj = params
	}
	switch name, ok := stringField(obj["name"]); {
	case obj == nil:
		req.ToolCall = newCall(tmpl, "", "", nil, "params must be an object")
	case !ok:
		req.ToolCall = newCall(tmpl, "", "", nil, at+"name must be a string")
	case checkName(at+"name", name) != "":
		req.ToolCall = newCall(tmpl, "", name, nil, checkName(at+"name", name))
	default:
		args, problem := object(at+"arguments", obj["arguments"])
		req.ToolCall = newCall(tmpl, "", name, args, problem)
	}
	if tmpl.CallID != "" {
		// The caller's call_id stands (newCall gave a new one).
		req.Call.CallID = tmpl.CallID
		if req.Failure != nil {
			req.Failure.CallID, req.Failure.BatchID = tmpl.CallID, req.Call.EffectiveBatchID()
		}
	}
	return req, nil
}

// MCPResult returns the CallToolResult of r: one text item (the value, or
// "<code>: <error>" with isError for a failure) and, for an ok result with a
// structured payload, structuredContent.
func MCPResult(r client.Result) MCPCallToolResult {
	out := MCPCallToolResult{Content: []MCPContent{{Type: "text", Text: Text(r)}}, IsError: !r.OK}
	if r.OK && len(r.Structured) > 0 && trimJSONSpace(r.Structured)[0] == '{' {
		out.StructuredContent = r.Structured
	}
	return out
}

// ToMCP returns the JSON-RPC response to call with r's CallToolResult.
func ToMCP(call MCPCall, r client.Result) MCPResponse {
	id := call.RequestID
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	return MCPResponse{JSONRPC: "2.0", ID: id, Result: MCPResult(r)}
}
