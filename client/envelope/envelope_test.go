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
	blob := func(part string, size int64) *client.BlobRef {
		return &client.BlobRef{Bucket: "capstan_blobs", Name: "p/c1", NUID: "p.X", Size: size, SHA256: strings.Repeat("a", 64), Part: part}
	}
	for _, c := range []struct {
		name string
		r    client.Result
		want string
	}{
		{"ok", client.Result{OK: true, Value: "42"}, "42"},
		{"failure", client.Result{Code: protocol.CodeExecutionFailed, Error: "timed out after 1.5s"}, "execution_failed: timed out after 1.5s"},
		{"cut value with its blob", client.Result{OK: true, Value: "ab\n[truncated — 70000 chars total]", Blob: blob(protocol.BlobPartValue, 70000)},
			"ab\n[truncated — 70000 chars total]\n[full output (70000 bytes) stored as blob capstan_blobs/p/c1]"},
		{"a part this client does not know is the output", client.Result{OK: true, Value: "x", Blob: blob("other", 1)},
			"x\n[full output (1 byte) stored as blob capstan_blobs/p/c1]"},
		{"error with its blob", client.Result{Code: protocol.CodeExecutionFailed, Error: "boom", Blob: blob(protocol.BlobPartError, 90000)},
			"execution_failed: boom\n[full error message (90000 bytes) stored as blob capstan_blobs/p/c1]"},
		{"a text naming the blob already", client.Result{Code: protocol.CodeExecutionFailed,
			Error: "result of 2 MB exceeds the worker's 1 MiB result limit (CAPSTAN_RESULT_MAX_BYTES); the output was dropped (the full output is in blob capstan_blobs/p/c1)",
			Blob:  blob(protocol.BlobPartValue, 2_000_000)},
			"execution_failed: result of 2 MB exceeds the worker's 1 MiB result limit (CAPSTAN_RESULT_MAX_BYTES); the output was dropped (the full output is in blob capstan_blobs/p/c1)"},
		{"structured left out, in its blob", client.Result{OK: true, Value: "report", StructuredOmitted: true, Blob: blob(protocol.BlobPartStructured, 300000)},
			"report\n[structured content (300000 bytes) left out; stored as blob capstan_blobs/p/c1]"},
		{"structured left out, no blob", client.Result{OK: true, Value: "report", StructuredOmitted: true},
			"report\n[structured content left out: too large for the result message]"},
		{"value blob and structured left out", client.Result{OK: true, Value: "v", StructuredOmitted: true, Blob: blob(protocol.BlobPartValue, 65536)},
			"v\n[full output (65536 bytes) stored as blob capstan_blobs/p/c1]\n[structured content left out: too large for the result message]"},
		{"empty value: the lines alone", client.Result{OK: true, StructuredOmitted: true},
			"[structured content left out: too large for the result message]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, envelope.Text(c.r))
		})
	}
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
