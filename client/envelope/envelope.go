// Package envelope translates between model providers' tool-call formats and
// Capstan calls and results, so that an agent backend passes its model's
// tool calls to Capstan and the results back without writing either shape by
// hand:
//
//   - OpenAI Chat Completions: an assistant message's tool_calls[] (whose
//     function.arguments is a JSON string) → calls; results → messages
//     {"role":"tool","tool_call_id","content"} (FromOpenAIChat, ToOpenAIChat);
//   - OpenAI Responses: function_call output items → calls; results →
//     function_call_output items (FromOpenAIResponses, ToOpenAIResponses);
//   - Anthropic Messages: tool_use content blocks → calls; results → a user
//     message of tool_result blocks, is_error set on failures (FromAnthropic,
//     ToAnthropic);
//   - MCP: a tools/call request → a call; its result → a CallToolResult in a
//     JSON-RPC response (FromMCP, ToMCP).
//
// And the reverse for the catalog: the tools a personality may call
// (client.ToolsFor) as OpenAI function definitions, Anthropic tool
// definitions and MCP tools (OpenAIChatTools, OpenAIResponsesTools,
// AnthropicTools, MCPTools).
//
// Malformed provider input is never an error that loses the other calls of
// the turn: each malformed call becomes a ToolCall with a Failure
// (input_invalid, the message naming the field, e.g. `invalid tool call:
// tool_calls[1].function.arguments is not valid JSON`), which Execute
// answers without publishing it and the To* functions render in the
// provider's own error shape. Only input that is not the provider's shape at
// all (not a JSON array or message) is an error.
//
// The provider's call id becomes the Capstan call_id (CallID documents the
// mapping), so it is also the idempotency key: a turn replayed with the same
// provider ids is answered from the stored results instead of running again.
// The same rules, messages and shapes are implemented by the TypeScript
// client's envelope module; both are tested against the recorded payloads in
// testdata/.
package envelope

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/protocol"
)

// ToolCall is one tool call of a model's turn, translated.
type ToolCall struct {
	// ProviderID is the provider's id of the call ("" when it had none, and
	// for MCP, whose calls have no id of their own).
	ProviderID string
	// Call is the Capstan call: the template's fields, Tool and Args from the
	// provider, CallID = CallID(ProviderID) (a new id when ProviderID is "").
	Call client.Call
	// Failure, when not nil, answers a call the provider input made
	// malformed (input_invalid): Execute does not publish it.
	Failure *client.Result
}

// Failed reports whether the provider input of the call was malformed.
func (tc ToolCall) Failed() bool { return tc.Failure != nil }

// Execute runs the calls of one turn with c.ExecuteParallel and returns one
// result per call, in input order: malformed calls get their Failure, the
// others their result (as ExecuteParallel describes). The turn's budget is
// shared by all calls, malformed ones included, as ExecuteParallel shares it
// with refused calls. Calls whose call_id differs from the provider's id
// record the provider's id as gen_ai.tool.call.id (client.WithToolCallIDs).
func Execute(ctx context.Context, c *client.Client, turn client.Turn, calls []ToolCall) []client.Result {
	results := make([]client.Result, len(calls))
	if len(calls) == 0 {
		return results
	}
	budget := cmp.Or(max(turn.BudgetChars, 0), protocol.DefaultTurnBudgetChars)
	share := max(int64(budget/len(calls)), 1)
	var run []client.Call
	var idx []int
	ids := map[string]string{}
	for i, tc := range calls {
		if tc.Failure != nil {
			results[i] = *tc.Failure
			continue
		}
		call := tc.Call
		if call.ResultBudgetChars == 0 {
			call.ResultBudgetChars = share
		}
		if tc.ProviderID != "" && tc.ProviderID != call.CallID {
			ids[call.CallID] = tc.ProviderID
		}
		run = append(run, call)
		idx = append(idx, i)
	}
	if len(run) == 0 {
		return results
	}
	if len(ids) > 0 {
		ctx = client.WithToolCallIDs(ctx, ids)
	}
	for j, r := range c.ExecuteParallel(ctx, turn, run) {
		results[idx[j]] = r
	}
	return results
}

// Text is the text a provider's tool-result message carries for r: the value
// of an ok result, "<code>: <error>" for a failure (as the MCP front door
// renders failures), followed by one line for each part of the tool's
// output that the result message does not carry, so that the model knows
// (docs/clients.md, "Rules"):
//
//	[full output (<size> bytes) stored as blob <bucket>/<name>]
//	[full error message (<size> bytes) stored as blob <bucket>/<name>]
//	[structured content (<size> bytes) left out; stored as blob <bucket>/<name>]
//	[structured content left out: too large for the result message]
//
// The first two for a blob of the value or of the error message (unless the
// text already names the blob, as the worker's "output was dropped" failure
// does), the third for a blob of the structured payload, the last for
// structured_omitted without one.
func Text(r client.Result) string {
	text := r.Value
	if !r.OK {
		text = string(r.Code) + ": " + r.Error
	}
	lines := omitted(r, text)
	if len(lines) == 0 {
		return text
	}
	if text != "" {
		lines = append([]string{text}, lines...)
	}
	return strings.Join(lines, "\n")
}

// omitted returns the lines Text adds after text for what r's message does
// not carry.
func omitted(r client.Result, text string) []string {
	var lines []string
	structuredBlob := false
	if b := r.Blob; b != nil {
		where := "blob " + b.Bucket + "/" + b.Name
		size := sizeOf(b.Size)
		switch {
		case b.Part == protocol.BlobPartStructured:
			structuredBlob = true
			lines = append(lines, "[structured content ("+size+") left out; stored as "+where+"]")
		case strings.Contains(text, where):
			// The text says so already.
		case b.Part == protocol.BlobPartError:
			lines = append(lines, "[full error message ("+size+") stored as "+where+"]")
		default:
			lines = append(lines, "[full output ("+size+") stored as "+where+"]")
		}
	}
	if r.StructuredOmitted && !structuredBlob {
		lines = append(lines, "[structured content left out: too large for the result message]")
	}
	return lines
}

// sizeOf is a blob's size for the model: "<n> bytes" ("1 byte").
func sizeOf(n int64) string {
	if n == 1 {
		return "1 byte"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// newCall builds the Capstan call of a provider call from the template; a
// problem with the provider input gives a ToolCall with a Failure.
func newCall(tmpl client.Call, providerID, tool string, args json.RawMessage, problem string) ToolCall {
	call := tmpl
	call.CallID = CallID(providerID)
	call.Tool = tool
	call.Args = args
	tc := ToolCall{ProviderID: providerID, Call: call}
	if problem != "" {
		f := protocol.Failure(&call, protocol.CodeInputInvalid, "invalid tool call: "+problem)
		tc.Failure = &f
	}
	return tc
}

// checkName returns the problem with a provider's tool name, "" if none.
func checkName(field, name string) string {
	if name == "" {
		return field + " is required"
	}
	if !protocol.ValidToken(name) {
		return fmt.Sprintf("%s %q must match ^[A-Za-z0-9_-]{1,128}$", field, truncate(name))
	}
	return ""
}

// checkID returns the problem with a provider's call id, "" if none.
func checkID(field string, raw json.RawMessage) (string, string) {
	if isAbsent(raw) {
		return "", field + " is required"
	}
	var id string
	if err := json.Unmarshal(raw, &id); err != nil {
		return "", field + " must be a string"
	}
	if id == "" {
		return "", field + " is required"
	}
	return id, ""
}

// ErrArgumentsNotJSON and ErrArgumentsNotObject are the errors of ParseArguments.
var (
	ErrArgumentsNotJSON   = errors.New("is not valid JSON")
	ErrArgumentsNotObject = errors.New("must be a JSON object")
)

// ParseArguments parses a function's arguments as OpenAI sends them: a JSON
// string holding a JSON object. It returns the object, compacted; an empty or
// all-white-space string is {} (a function without parameters). Anything
// else is ErrArgumentsNotJSON or ErrArgumentsNotObject.
func ParseArguments(s string) (json.RawMessage, error) {
	b := trimJSONSpace([]byte(s))
	if len(b) == 0 {
		return json.RawMessage("{}"), nil
	}
	if !json.Valid(b) {
		return nil, ErrArgumentsNotJSON
	}
	if b[0] != '{' {
		return nil, ErrArgumentsNotObject
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, ErrArgumentsNotJSON
	}
	return out.Bytes(), nil
}

// arguments reads a provider's arguments field: a JSON string holding an
// object (OpenAI's documented shape), or an object (what some compatible
// servers send). The problem names field.
func arguments(field string, raw json.RawMessage) (json.RawMessage, string) {
	raw = trimJSONSpace(raw)
	if isAbsent(raw) {
		return json.RawMessage("{}"), ""
	}
	switch raw[0] {
	case '{':
		return object(field, raw)
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, field + " " + ErrArgumentsNotJSON.Error()
		}
		args, err := ParseArguments(s)
		if err != nil {
			return nil, field + " " + err.Error()
		}
		return args, ""
	}
	return nil, field + " must be a string holding a JSON object"
}

// object reads a field that must be a JSON object (absent means {}).
func object(field string, raw json.RawMessage) (json.RawMessage, string) {
	raw = trimJSONSpace(raw)
	if isAbsent(raw) {
		return json.RawMessage("{}"), ""
	}
	if raw[0] != '{' {
		return nil, field + " " + ErrArgumentsNotObject.Error()
	}
	var out bytes.Buffer
	if err := json.Compact(&out, raw); err != nil {
		return nil, field + " " + ErrArgumentsNotJSON.Error()
	}
	return out.Bytes(), ""
}

func isAbsent(raw json.RawMessage) bool {
	raw = trimJSONSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// stringField decodes an optional string field; ok is false when present
// and not a string.
func stringField(raw json.RawMessage) (string, bool) {
	if isAbsent(raw) {
		return "", true
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

// items decodes data as a JSON array of objects, or an object whose key
// holds one; shape names what was expected, for the error.
func items(data []byte, key, shape string) ([]map[string]json.RawMessage, error) {
	data = trimJSONSpace(data)
	if len(data) > 0 && data[0] == '{' {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil {
			return nil, fmt.Errorf("envelope: %s: not valid JSON", shape)
		}
		v, ok := obj[key]
		if !ok || isAbsent(v) {
			return nil, nil
		}
		data = v
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		return nil, fmt.Errorf("envelope: %s: want a JSON array or an object with %q", shape, key)
	}
	out := make([]map[string]json.RawMessage, len(raws))
	for i, r := range raws {
		// An element that is not an object is kept as nil: its call fails on
		// its own, the others go on.
		_ = json.Unmarshal(r, &out[i])
	}
	return out, nil
}

func truncate(s string) string {
	r := []rune(s)
	if len(r) <= 64 {
		return s
	}
	return string(r[:64]) + "..."
}

// trimJSONSpace trims the four whitespace characters JSON allows around a
// value (RFC 8259 section 2), and no others: a form feed or a non-breaking
// space around the arguments is an error, as encoding/json says.
func trimJSONSpace(b []byte) []byte {
	return bytes.Trim(b, " \t\n\r")
}
