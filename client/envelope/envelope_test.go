package envelope_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/client/envelope"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

func TestParseArguments(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, in, want string
		err            error
	}{
		{"object", `{"text":"hi"}`, `{"text":"hi"}`, nil},
		{"object with white space is compacted", "{\n  \"a\": [1, 2],\n  \"b\": {\"c\": null}\n}", `{"a":[1,2],"b":{"c":null}}`, nil},
		{"empty string is no arguments", "", `{}`, nil},
		{"white space only is no arguments", " \n\t", `{}`, nil},
		{"empty object", "{}", `{}`, nil},
		{"unicode kept", `{"city":"Zürich 東京"}`, `{"city":"Zürich 東京"}`, nil},
		{"truncated", `{"text": "unterminated`, "", envelope.ErrArgumentsNotJSON},
		{"trailing garbage", `{"a":1} x`, "", envelope.ErrArgumentsNotJSON},
		{"two objects", `{"a":1}{"b":2}`, "", envelope.ErrArgumentsNotJSON},
		{"single quotes", `{'a':1}`, "", envelope.ErrArgumentsNotJSON},
		{"array", `[1,2]`, "", envelope.ErrArgumentsNotObject},
		{"string", `"text"`, "", envelope.ErrArgumentsNotObject},
		{"null", `null`, "", envelope.ErrArgumentsNotObject},
		{"number", `42`, "", envelope.ErrArgumentsNotObject},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := envelope.ParseArguments(c.in)
			if c.err != nil {
				require.ErrorIs(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, string(got))
		})
	}
}

func TestCallIDIsOneToOne(t *testing.T) {
	t.Parallel()
	ids := []string{"call_1", "cx-call_1", "ch-call_1", "call 1", "call.1", "", "x", strings.Repeat("a", 128),
		strings.Repeat("a", 129), strings.Repeat("é", 46), strings.Repeat("é", 47), "cx-", "ch-", "Y2FsbCAx", "cx-Y2FsbCAx"}
	seen := map[string]string{}
	for _, id := range ids {
		if id == "" {
			continue
		}
		got := envelope.CallID(id)
		require.True(t, protocol.ValidToken(got), "CallID(%q) = %q is a token", id, got)
		if prev, ok := seen[got]; ok {
			t.Fatalf("CallID(%q) = CallID(%q) = %q", id, prev, got)
		}
		seen[got] = id
	}
	a, b := envelope.CallID(""), envelope.CallID("")
	require.NotEqual(t, a, b, "an empty id gets a new id each time")
	require.True(t, protocol.ValidToken(a))
}

func TestTextOfResults(t *testing.T) {
	t.Parallel()
	require.Equal(t, "42", envelope.Text(client.Result{OK: true, Value: "42"}))
	require.Equal(t, "execution_failed: timed out after 1.5s",
		envelope.Text(client.Result{Code: protocol.CodeExecutionFailed, Error: "timed out after 1.5s"}))
}

func TestResultsShorterThanCallsAreMissing(t *testing.T) {
	t.Parallel()
	calls, err := envelope.FromAnthropic([]byte(`[{"type":"tool_use","id":"toolu_1","name":"echo","input":{}}]`), client.Call{SessionID: "s"})
	require.NoError(t, err)
	msg := envelope.ToAnthropic(calls, nil)
	require.Equal(t, "execution_failed: "+client.ResultMissing, msg.Content[0].Content)
	require.True(t, msg.Content[0].IsError)
}

func TestTemplateFieldsReachEveryCall(t *testing.T) {
	t.Parallel()
	tmpl := client.Call{SessionID: "sess", SessionKey: "cli:repo", PersonalityID: "researcher", TimeoutMS: 5000, Args: json.RawMessage(`{"ignored":true}`)}
	calls, err := envelope.FromOpenAIChat([]byte(`[{"id":"call_1","type":"function","function":{"name":"echo","arguments":"{\"text\":\"x\"}"}}]`), tmpl)
	require.NoError(t, err)
	require.Len(t, calls, 1)
	c := calls[0].Call
	require.Equal(t, "sess", c.SessionID)
	require.Equal(t, "cli:repo", c.SessionKey)
	require.Equal(t, "researcher", c.PersonalityID)
	require.Equal(t, int64(5000), c.TimeoutMS)
	require.JSONEq(t, `{"text":"x"}`, string(c.Args), "the provider's arguments replace the template's")
}
