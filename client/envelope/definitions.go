package envelope

import (
	"encoding/json"

	"github.com/capstanhq/capstan/client"
)

// OpenAIFunction is the function of an OpenAI Chat Completions tool definition.
type OpenAIFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// OpenAIChatTool is an OpenAI Chat Completions tool definition:
// {"type":"function","function":{"name","description","parameters"}}.
type OpenAIChatTool struct {
	Type     string         `json:"type"`
	Function OpenAIFunction `json:"function"`
}

// OpenAIResponsesTool is an OpenAI Responses API function tool:
// {"type":"function","name","description","parameters"}.
type OpenAIResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// AnthropicTool is an Anthropic Messages tool definition.
type AnthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// MCPTool is an MCP tools/list entry.
type MCPTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// schemaOf is the entry's JSON Schema, {"type":"object"} when it has none.
func schemaOf(e client.CatalogEntry) json.RawMessage {
	if isAbsent(e.Schema) {
		return json.RawMessage(`{"type":"object"}`)
	}
	return e.Schema
}

// OpenAIChatTools returns entries (typically client.ToolsFor of the
// personality) as OpenAI Chat Completions tool definitions, in order. OpenAI
// accepts names of at most 64 characters: longer ones are the caller's to
// drop.
func OpenAIChatTools(entries []client.CatalogEntry) []OpenAIChatTool {
	out := make([]OpenAIChatTool, len(entries))
	for i, e := range entries {
		out[i] = OpenAIChatTool{Type: "function", Function: OpenAIFunction{Name: e.Name, Description: e.Description, Parameters: schemaOf(e)}}
	}
	return out
}

// OpenAIResponsesTools returns entries as OpenAI Responses API function tools, in order.
func OpenAIResponsesTools(entries []client.CatalogEntry) []OpenAIResponsesTool {
	out := make([]OpenAIResponsesTool, len(entries))
	for i, e := range entries {
		out[i] = OpenAIResponsesTool{Type: "function", Name: e.Name, Description: e.Description, Parameters: schemaOf(e)}
	}
	return out
}

// AnthropicTools returns entries as Anthropic Messages tool definitions, in order.
func AnthropicTools(entries []client.CatalogEntry) []AnthropicTool {
	out := make([]AnthropicTool, len(entries))
	for i, e := range entries {
		out[i] = AnthropicTool{Name: e.Name, Description: e.Description, InputSchema: schemaOf(e)}
	}
	return out
}

// MCPTools returns entries as MCP tools/list entries, in order.
func MCPTools(entries []client.CatalogEntry) []MCPTool {
	out := make([]MCPTool, len(entries))
	for i, e := range entries {
		out[i] = MCPTool{Name: e.Name, Description: e.Description, InputSchema: schemaOf(e)}
	}
	return out
}
