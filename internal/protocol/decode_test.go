package protocol_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

func TestDecodeCallValid(t *testing.T) {
	t.Parallel()
	c, err := protocol.DecodeCall([]byte(`{"call_id":"c1","batch_id":"b1","tool":"echo","args":{"text":"x"},"session_id":"s",
		"working_dir":"/srv","personality_id":"researcher","current_turn":0,"message_count":3,"result_budget_chars":100,
		"dry_run":true,"deadline":"2026-01-02T15:04:05Z","timeout_ms":1500,"exclude_tools":["a"],"narrow_tools":[],"future_field":{"x":1}}`))
	require.NoError(t, err)
	require.Equal(t, "c1", c.CallID)
	require.Equal(t, "b1", c.EffectiveBatchID())
	require.JSONEq(t, `{"text":"x"}`, string(c.Args))
	require.EqualValues(t, 3, c.MessageCount)
	require.True(t, c.DryRun)
	require.Equal(t, time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC), c.Deadline.UTC())
	require.EqualValues(t, 1500, c.TimeoutMS)
	require.NotNil(t, c.NarrowTools, "an empty narrow_tools is kept apart from an absent one")
	require.Empty(t, c.NarrowTools)
	require.Nil(t, (&protocol.Call{}).NarrowTools)

	// Round trip keeps the empty narrow_tools.
	b, err := protocol.EncodeCall(&c)
	require.NoError(t, err)
	c2, err := protocol.DecodeCall(b)
	require.NoError(t, err)
	require.Equal(t, c, c2)
}

func TestDecodeCallDefaults(t *testing.T) {
	t.Parallel()
	c, err := protocol.DecodeCall([]byte(`{"call_id":"c1","tool":"echo","args":{},"session_id":"s"}`))
	require.NoError(t, err)
	require.Equal(t, "c1", c.EffectiveBatchID(), "batch_id defaults to call_id")
	require.Nil(t, c.NarrowTools)
	require.Nil(t, c.Deadline)
}

func TestDecodeCallErrors(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 129)
	cases := []struct {
		name        string
		body        string
		msg         string
		callID      string
		batchID     string
		undecodable bool
	}{
		{"not json", `nope`, `invalid call: body must be a JSON object`, "", "", true},
		{"array", `[1]`, `invalid call: body must be a JSON object`, "", "", true},
		{"null", `null`, `invalid call: body must be a JSON object`, "", "", true},
		{"no call_id", `{"tool":"echo"}`, `invalid call: field "call_id" is required`, "", "", true},
		{"call_id not string", `{"call_id":5}`, `invalid call: field "call_id" must be a string`, "", "", true},
		{"call_id with dot", `{"call_id":"a.b"}`, `invalid call: field "call_id" must match ^[A-Za-z0-9_-]{1,128}$`, "", "", true},
		{"call_id too long", `{"call_id":"` + long + `"}`, `invalid call: field "call_id" must match ^[A-Za-z0-9_-]{1,128}$`, "", "", true},
		{"bad batch", `{"call_id":"c","batch_id":"b*","tool":"echo","args":{},"session_id":"s"}`, `invalid call: field "batch_id" must match ^[A-Za-z0-9_-]{1,128}$`, "c", "", false},
		{"missing tool", `{"call_id":"c","batch_id":"b","args":{},"session_id":"s"}`, `invalid call: field "tool" is required`, "c", "b", false},
		{"tool with space", `{"call_id":"c","tool":"a b","args":{},"session_id":"s"}`, `invalid call: field "tool" must match ^[A-Za-z0-9_-]{1,128}$`, "c", "", false},
		{"missing args", `{"call_id":"c","tool":"echo","session_id":"s"}`, `invalid call: field "args" is required`, "c", "", false},
		{"args null", `{"call_id":"c","tool":"echo","args":null,"session_id":"s"}`, `invalid call: field "args" is required`, "c", "", false},
		{"args array", `{"call_id":"c","tool":"echo","args":[],"session_id":"s"}`, `invalid call: field "args" must be a JSON object`, "c", "", false},
		{"missing session", `{"call_id":"c","tool":"echo","args":{}}`, `invalid call: field "session_id" is required`, "c", "", false},
		{"empty session", `{"call_id":"c","tool":"echo","args":{},"session_id":""}`, `invalid call: field "session_id" must not be empty`, "c", "", false},
		{"relative working_dir", `{"call_id":"c","tool":"echo","args":{},"session_id":"s","working_dir":"x/y"}`, `invalid call: field "working_dir" must be an absolute path`, "c", "", false},
		{"personality with dot", `{"call_id":"c","tool":"echo","args":{},"session_id":"s","personality_id":"a.b"}`, `invalid call: field "personality_id" must match ^[A-Za-z0-9_-]{1,128}$`, "c", "", false},
		{"negative turn", `{"call_id":"c","tool":"echo","args":{},"session_id":"s","current_turn":-1}`, `invalid call: field "current_turn" must be an integer of at least 0`, "c", "", false},
		{"fractional count", `{"call_id":"c","tool":"echo","args":{},"session_id":"s","message_count":1.5}`, `invalid call: field "message_count" must be an integer of at least 0`, "c", "", false},
		{"zero budget", `{"call_id":"c","tool":"echo","args":{},"session_id":"s","result_budget_chars":0}`, `invalid call: field "result_budget_chars" must be an integer greater than 0`, "c", "", false},
		{"zero timeout", `{"call_id":"c","tool":"echo","args":{},"session_id":"s","timeout_ms":0}`, `invalid call: field "timeout_ms" must be an integer greater than 0`, "c", "", false},
		{"string timeout", `{"call_id":"c","tool":"echo","args":{},"session_id":"s","timeout_ms":"5"}`, `invalid call: field "timeout_ms" must be an integer greater than 0`, "c", "", false},
		{"dry_run string", `{"call_id":"c","tool":"echo","args":{},"session_id":"s","dry_run":"yes"}`, `invalid call: field "dry_run" must be true or false`, "c", "", false},
		{"bad deadline", `{"call_id":"c","tool":"echo","args":{},"session_id":"s","deadline":"tomorrow"}`, `invalid call: field "deadline" must be an RFC 3339 time such as 2026-01-02T15:04:05Z`, "c", "", false},
		{"exclude not list", `{"call_id":"c","tool":"echo","args":{},"session_id":"s","exclude_tools":"echo"}`, `invalid call: field "exclude_tools" must be an array of strings`, "c", "", false},
		{"narrow numbers", `{"call_id":"c","tool":"echo","args":{},"session_id":"s","narrow_tools":[1]}`, `invalid call: field "narrow_tools" must be an array of strings`, "c", "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := protocol.DecodeCall([]byte(tc.body))
			require.EqualError(t, err, tc.msg)
			de, ok := protocol.AsDecodeError(err)
			require.True(t, ok)
			require.Equal(t, tc.callID, de.CallID)
			require.Equal(t, tc.batchID, de.BatchID)
			require.Equal(t, tc.undecodable, de.Undecodable())
		})
	}
}

func TestDecodeCallSizeLimit(t *testing.T) {
	t.Parallel()
	big := `{"call_id":"c","tool":"echo","session_id":"s","args":{"text":"` + strings.Repeat("x", protocol.MaxCallBytes) + `"}}`
	_, err := protocol.DecodeCall([]byte(big))
	require.ErrorContains(t, err, "more than the 1 MiB limit")
}

func TestResultJSONShape(t *testing.T) {
	t.Parallel()
	ok, err := json.Marshal(protocol.Result{CallID: "c", BatchID: "b", Tool: "echo", OK: true, Value: "", Error: "ignored", DurationMS: 3})
	require.NoError(t, err)
	require.JSONEq(t, `{"call_id":"c","batch_id":"b","tool":"echo","ok":true,"value":"","duration_ms":3}`, string(ok))
	fail, err := json.Marshal(protocol.Result{CallID: "c", BatchID: "b", Tool: "echo", Code: protocol.CodeNotAvailable, Error: "Unknown tool: x"})
	require.NoError(t, err)
	require.JSONEq(t, `{"call_id":"c","batch_id":"b","tool":"echo","ok":false,"code":"not_available","error":"Unknown tool: x","duration_ms":0}`, string(fail))
}

func FuzzDecodeCall(f *testing.F) {
	f.Add([]byte(`{"call_id":"c1","tool":"echo","args":{"text":"x"},"session_id":"s"}`))
	f.Add([]byte(`{"call_id":"c1","batch_id":"b","tool":"echo","args":{},"session_id":"s","timeout_ms":5,"deadline":"2026-01-02T15:04:05Z","narrow_tools":[]}`))
	f.Add([]byte(`{"call_id":"a.b"}`))
	f.Add([]byte(`{"call_id":"c","timeout_ms":1e400}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := protocol.DecodeCall(data)
		if err != nil {
			de, ok := protocol.AsDecodeError(err)
			if !ok {
				t.Fatalf("error is not a *DecodeError: %v", err)
			}
			if de.CallID != "" && !protocol.ValidToken(de.CallID) {
				t.Fatalf("decode error carries invalid call id %q", de.CallID)
			}
			if de.BatchID != "" && !protocol.ValidToken(de.BatchID) {
				t.Fatalf("decode error carries invalid batch id %q", de.BatchID)
			}
			return
		}
		for _, tok := range []string{c.CallID, c.Tool, c.EffectiveBatchID()} {
			if !protocol.ValidToken(tok) {
				t.Fatalf("accepted call with invalid token %q", tok)
			}
		}
		if c.TimeoutMS < 0 || c.ResultBudgetChars < 0 || c.CurrentTurn < 0 || c.MessageCount < 0 {
			t.Fatalf("accepted negative numbers: %+v", c)
		}
		b, err := protocol.EncodeCall(&c)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if _, err := protocol.DecodeCall(b); err != nil {
			t.Fatalf("re-decode of a valid call failed: %v\n%s", err, b)
		}
	})
}

func TestEncodeResultIsJSONMarshal(t *testing.T) {
	t.Parallel()
	cost := 0.25
	for _, r := range []protocol.Result{
		{CallID: "c", BatchID: "b", Tool: "echo", OK: true, Value: "<b>héllo</b> & \u2028 \xff", Code: "ignored", Error: "ignored", DurationMS: 3, WorkerID: "w", Deliveries: 2},
		{CallID: "c", BatchID: "b", Tool: "echo", OK: true, Structured: json.RawMessage(`{"a": [1, 2]}`), CostUSD: &cost, Truncated: true, OriginalChars: 9, Untrusted: true},
		{CallID: "c", BatchID: "b", Tool: "x", Code: protocol.CodeNotAvailable, Error: "Unknown tool: x", Value: "ignored", RetryAfterMS: 1500},
		{},
	} {
		want, err := json.Marshal(r)
		require.NoError(t, err)
		got, err := protocol.EncodeResult(&r)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}
