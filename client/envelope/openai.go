package envelope

import (
	"encoding/json"
	"fmt"

	"github.com/capstanhq/capstan/client"
)

// OpenAIChatToolMessage is the message that answers one tool call in the
// OpenAI Chat Completions API: {"role":"tool","tool_call_id","content"}.
type OpenAIChatToolMessage struct {
	Role       string `json:"role"`
	ToolCallID string `json:"tool_call_id"`
	Content    string `json:"content"`
}

// FromOpenAIChat translates the tool calls of an OpenAI Chat Completions
// assistant message: data is the message ({"role":"assistant",
// "tool_calls":[...]}, also a choice's "message") or its tool_calls array.
// Each element {"id","type":"function","function":{"name","arguments"}}
// becomes one ToolCall, in order, with tmpl's fields (session_id, ...);
// function.arguments is a JSON string holding the arguments object ("" means
// {}; an object instead of a string is accepted too). A message without
// tool_calls gives none. Only data of another shape is an error.
func FromOpenAIChat(data []byte, tmpl client.Call) ([]ToolCall, error) {
	elems, err := items(data, "tool_calls", "OpenAI chat message or tool_calls")
	if err != nil {
		return nil, err
	}
	out := make([]ToolCall, len(elems))
	for i, e := range elems {
		out[i] = openAIChatCall(fmt.Sprintf("tool_calls[%d]", i), e, tmpl)
	}
	return out, nil
}

func openAIChatCall(at string, e map[string]json.RawMessage, tmpl client.Call) ToolCall {
	if e == nil {
		return newCall(tmpl, "", "", nil, at+" must be an object")
	}
	id, problem := checkID(at+".id", e["id"])
	if problem != "" {
		return newCall(tmpl, id, "", nil, problem)
	}
	if typ, ok := stringField(e["type"]); !ok || (typ != "" && typ != "function") {
		return newCall(tmpl, id, "", nil, fmt.Sprintf("%s.type must be \"function\"", at))
	}
	var fn map[string]json.RawMessage
	if isAbsent(e["function"]) || json.Unmarshal(e["function"], &fn) != nil {
		return newCall(tmpl, id, "", nil, at+".function must be an object")
	}
	name, ok := stringField(fn["name"])
	if !ok {
		return newCall(tmpl, id, "", nil, at+".function.name must be a string")
	}
	if problem := checkName(at+".function.name", name); problem != "" {
		return newCall(tmpl, id, name, nil, problem)
	}
	args, problem := arguments(at+".function.arguments", fn["arguments"])
	return newCall(tmpl, id, name, args, problem)
}

// ToOpenAIChat returns the tool messages that answer calls, one per call in
// order: content is the result's value, or "<code>: <error>" for a failure
// (Chat Completions has no error flag). results[i] answers calls[i].
func ToOpenAIChat(calls []ToolCall, results []client.Result) []OpenAIChatToolMessage {
	out := make([]OpenAIChatToolMessage, len(calls))
	for i, tc := range calls {
		out[i] = OpenAIChatToolMessage{Role: "tool", ToolCallID: tc.ProviderID, Content: Text(resultAt(results, i, tc))}
	}
	return out
}

// OpenAIFunctionCallOutput is the input item that answers a function_call
// item in the OpenAI Responses API.
type OpenAIFunctionCallOutput struct {
	Type   string `json:"type"`
	CallID string `json:"call_id"`
	Output string `json:"output"`
}

// FromOpenAIResponses translates the function_call items of an OpenAI
// Responses API response: data is the response ({"output":[...]}) or an
// array of items. Items of other types (message, reasoning, ...) are
// skipped; each {"type":"function_call","call_id","name","arguments"}
// becomes one ToolCall, in order, with call_id as the provider id (the
// item's own "id", fc_..., is not what function_call_output answers).
func FromOpenAIResponses(data []byte, tmpl client.Call) ([]ToolCall, error) {
	elems, err := items(data, "output", "OpenAI response or output items")
	if err != nil {
		return nil, err
	}
	var out []ToolCall
	for i, e := range elems {
		at := fmt.Sprintf("output[%d]", i)
		if e == nil {
			continue // not an item: nothing says it is a function call
		}
		if typ, _ := stringField(e["type"]); typ != "function_call" {
			continue
		}
		out = append(out, openAIResponsesCall(at, e, tmpl))
	}
	return out, nil
}

func openAIResponsesCall(at string, e map[string]json.RawMessage, tmpl client.Call) ToolCall {
	id, problem := checkID(at+".call_id", e["call_id"])
	if problem != "" {
		return newCall(tmpl, id, "", nil, problem)
	}
	name, ok := stringField(e["name"])
	if !ok {
		return newCall(tmpl, id, "", nil, at+".name must be a string")
	}
	if problem := checkName(at+".name", name); problem != "" {
		return newCall(tmpl, id, name, nil, problem)
	}
	args, problem := arguments(at+".arguments", e["arguments"])
	return newCall(tmpl, id, name, args, problem)
}

// ToOpenAIResponses returns the function_call_output items that answer
// calls, one per call in order; output as in ToOpenAIChat.
func ToOpenAIResponses(calls []ToolCall, results []client.Result) []OpenAIFunctionCallOutput {
	out := make([]OpenAIFunctionCallOutput, len(calls))
	for i, tc := range calls {
		out[i] = OpenAIFunctionCallOutput{Type: "function_call_output", CallID: tc.ProviderID, Output: Text(resultAt(results, i, tc))}
	}
	return out
}

// resultAt returns results[i], or the missing-result failure when results
// is shorter than calls.
func resultAt(results []client.Result, i int, tc ToolCall) client.Result {
	if i < len(results) {
		return results[i]
	}
	if tc.Failure != nil {
		return *tc.Failure
	}
	return client.Result{CallID: tc.Call.CallID, Tool: tc.Call.Tool, Code: "execution_failed", Error: client.ResultMissing}
}
