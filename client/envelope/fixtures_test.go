package envelope_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/client/envelope"
	"github.com/stretchr/testify/require"
)

// The files in testdata/ are shared with the TypeScript client's tests
// (clients/typescript/test/envelope.test.ts): recorded real-shape payloads
// of each provider, the calls they must give and the provider output that
// given results must give, so both clients translate alike.

type fixture struct {
	Provider string      `json:"provider"`
	Template client.Call `json:"template"`
	Cases    []struct {
		Name      string            `json:"name"`
		Input     json.RawMessage   `json:"input"`
		Calls     []wantCall        `json:"calls"`
		RequestID json.RawMessage   `json:"request_id"`
		Results   []json.RawMessage `json:"results"`
		Output    json.RawMessage   `json:"output"`
	} `json:"cases"`
	Errors []struct {
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
		Error string          `json:"error"`
	} `json:"errors"`
}

type wantCall struct {
	ProviderID string          `json:"provider_id"`
	CallID     string          `json:"call_id"`
	Tool       string          `json:"tool"`
	Args       json.RawMessage `json:"args"`
	Failure    string          `json:"failure"`
}

func readFixture(t *testing.T, name string) fixture {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	var f fixture
	require.NoError(t, json.Unmarshal(data, &f))
	return f
}

// translate parses input with the fixture's provider; render renders results
// in the provider's shape; requestID is the JSON-RPC id of an MCP request.
func translate(t *testing.T, provider string, tmpl client.Call, input []byte) (calls []envelope.ToolCall, render func([]client.Result) any, requestID json.RawMessage, err error) {
	t.Helper()
	switch provider {
	case "openai_chat":
		calls, err = envelope.FromOpenAIChat(input, tmpl)
		return calls, func(r []client.Result) any { return envelope.ToOpenAIChat(calls, r) }, nil, err
	case "openai_responses":
		calls, err = envelope.FromOpenAIResponses(input, tmpl)
		return calls, func(r []client.Result) any { return envelope.ToOpenAIResponses(calls, r) }, nil, err
	case "anthropic":
		calls, err = envelope.FromAnthropic(input, tmpl)
		return calls, func(r []client.Result) any { return envelope.ToAnthropic(calls, r) }, nil, err
	case "mcp":
		mc, err := envelope.FromMCP(input, tmpl)
		if err != nil {
			return nil, nil, nil, err
		}
		id := mc.RequestID
		if len(id) == 0 {
			id = json.RawMessage("null")
		}
		return []envelope.ToolCall{mc.ToolCall}, func(r []client.Result) any { return envelope.ToMCP(mc, r[0]) }, id, nil
	}
	t.Fatalf("unknown provider %q", provider)
	return nil, nil, nil, nil
}

func TestProviderFixtures(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"openai_chat.json", "openai_responses.json", "anthropic.json", "mcp.json"} {
		f := readFixture(t, file)
		for _, c := range f.Cases {
			t.Run(f.Provider+"/"+c.Name, func(t *testing.T) {
				t.Parallel()
				calls, render, requestID, err := translate(t, f.Provider, f.Template, c.Input)
				require.NoError(t, err)
				require.Len(t, calls, len(c.Calls))
				results := make([]client.Result, len(calls))
				for i, want := range c.Calls {
					got := calls[i]
					require.Equal(t, want.ProviderID, got.ProviderID, "call %d: provider id", i)
					require.Equal(t, f.Template.SessionID, got.Call.SessionID, "call %d: the template's fields", i)
					if want.Failure != "" {
						require.NotNil(t, got.Failure, "call %d must fail", i)
						require.Equal(t, "input_invalid", string(got.Failure.Code))
						require.Equal(t, want.Failure, got.Failure.Error, "call %d", i)
						require.Equal(t, got.Call.CallID, got.Failure.CallID)
					} else {
						require.Nil(t, got.Failure, "call %d: %v", i, got.Failure)
						require.Equal(t, want.CallID, got.Call.CallID, "call %d", i)
						require.Equal(t, want.Tool, got.Call.Tool, "call %d", i)
						require.JSONEq(t, string(want.Args), string(got.Call.Args), "call %d", i)
					}
					if i < len(c.Results) && string(c.Results[i]) != "null" {
						require.NoError(t, json.Unmarshal(c.Results[i], &results[i]))
					} else {
						results[i] = *got.Failure
					}
				}
				if f.Provider == "mcp" {
					require.JSONEq(t, string(c.RequestID), string(requestID), "request id")
				}
				out, err := json.Marshal(render(results))
				require.NoError(t, err)
				require.JSONEq(t, string(c.Output), string(out))
			})
		}
		for _, c := range f.Errors {
			t.Run(f.Provider+"/error/"+c.Name, func(t *testing.T) {
				t.Parallel()
				_, _, _, err := translate(t, f.Provider, f.Template, c.Input)
				require.EqualError(t, err, c.Error)
			})
		}
	}
}

type catalogFixture struct {
	Entries              []client.CatalogEntry `json:"entries"`
	OpenAIChatTools      json.RawMessage       `json:"openai_chat_tools"`
	OpenAIResponsesTools json.RawMessage       `json:"openai_responses_tools"`
	AnthropicTools       json.RawMessage       `json:"anthropic_tools"`
	MCPTools             json.RawMessage       `json:"mcp_tools"`
}

func TestCatalogDefinitionsFixture(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "catalog.json"))
	require.NoError(t, err)
	var f catalogFixture
	require.NoError(t, json.Unmarshal(data, &f))
	for _, c := range []struct {
		name string
		want json.RawMessage
		got  any
	}{
		{"openai chat", f.OpenAIChatTools, envelope.OpenAIChatTools(f.Entries)},
		{"openai responses", f.OpenAIResponsesTools, envelope.OpenAIResponsesTools(f.Entries)},
		{"anthropic", f.AnthropicTools, envelope.AnthropicTools(f.Entries)},
		{"mcp", f.MCPTools, envelope.MCPTools(f.Entries)},
	} {
		out, err := json.Marshal(c.got)
		require.NoError(t, err)
		require.JSONEq(t, string(c.want), string(out), c.name)
	}
}

func TestCallIDFixture(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "ids.json"))
	require.NoError(t, err)
	var cases []struct {
		ProviderID string `json:"provider_id"`
		CallID     string `json:"call_id"`
		Reversible bool   `json:"reversible"`
	}
	require.NoError(t, json.Unmarshal(data, &cases))
	for _, c := range cases {
		got := envelope.CallID(c.ProviderID)
		require.Equal(t, c.CallID, got, "CallID(%q)", c.ProviderID)
		back, ok := envelope.ProviderID(got)
		require.Equal(t, c.Reversible, ok, "ProviderID(%q)", got)
		if ok {
			require.Equal(t, c.ProviderID, back)
		}
	}
}
