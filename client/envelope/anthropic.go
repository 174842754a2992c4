package envelope

import (
	"encoding/json"
	"fmt"

	"github.com/capstanhq/capstan/client"
)

// AnthropicToolResult is a tool_result content block of the Anthropic
// Messages API; IsError is set (true) only for failures.
type AnthropicToolResult struct {
	Type      string `json:"type"`
	ToolUseID string `json:"tool_use_id"`
	Content   string `json:"content"`
	IsError   bool   `json:"is_error,omitempty"`
}

// AnthropicMessage is the user message that answers a turn's tool_use
// blocks: {"role":"user","content":[tool_result, ...]}.
type AnthropicMessage struct {
	Role    string                `json:"role"`
	Content []AnthropicToolResult `json:"content"`
}

// FromAnthropic translates the tool_use blocks of an Anthropic Messages
// response: data is the message ({"role":"assistant","content":[...]}) or its
// content array. Blocks of other types (text, thinking, ...) are skipped;
// each {"type":"tool_use","id","name","input"} becomes one ToolCall, in
// order; input must be a JSON object.
func FromAnthropic(data []byte, tmpl client.Call) ([]ToolCall, error) {
	elems, err := items(data, "content", "Anthropic message or content blocks")
	if err != nil {
		return nil, err
	}
	var out []ToolCall
	for i, e := range elems {
		if e == nil {
			continue
		}
		if typ, _ := stringField(e["type"]); typ != "tool_use" {
			continue
		}
		out = append(out, anthropicCall(fmt.Sprintf("content[%d]", i), e, tmpl))
	}
	return out, nil
}

func anthropicCall(at string, e map[string]json.RawMessage, tmpl client.Call) ToolCall {
	id, problem := checkID(at+".id", e["id"])
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
	args, problem := object(at+".input", e["input"])
	return newCall(tmpl, id, name, args, problem)
}

// ToAnthropic returns the user message answering calls: one tool_result
// block per call, in order, content the result's value, or "<code>:
// <error>" with is_error true for a failure.
func ToAnthropic(calls []ToolCall, results []client.Result) AnthropicMessage {
	blocks := make([]AnthropicToolResult, len(calls))
	for i, tc := range calls {
		r := resultAt(results, i, tc)
		blocks[i] = AnthropicToolResult{Type: "tool_result", ToolUseID: tc.ProviderID, Content: Text(r), IsError: !r.OK}
	}
	return AnthropicMessage{Role: "user", Content: blocks}
}
