package envelope_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/client/envelope"
	"github.com/capstanhq/capstan/internal/protocol"
)

// FuzzParseArguments checks that any arguments string is either refused
// with one of the two errors or parsed into a compact JSON object that
// decodes to the same value as the input.
func FuzzParseArguments(f *testing.F) {
	for _, s := range []string{"", "{}", `{"text":"hi"}`, `{"a":[1,{"b":null}]}`, "[1]", `"x"`, "null", `{"a":`, " {\n} ", `{"a":1}{`, "\x00", `{"\u00e9":"\ud800"}`, "{}\f", "\f", "\u00a0{}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := envelope.ParseArguments(s)
		if err != nil {
			if !errors.Is(err, envelope.ErrArgumentsNotJSON) && !errors.Is(err, envelope.ErrArgumentsNotObject) {
				t.Fatalf("ParseArguments(%q): unexpected error %v", s, err)
			}
			if got != nil {
				t.Fatalf("ParseArguments(%q): a value with an error", s)
			}
			return
		}
		var obj map[string]any
		if err := json.Unmarshal(got, &obj); err != nil || obj == nil {
			t.Fatalf("ParseArguments(%q) = %q: not a JSON object", s, got)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, got); err != nil || !bytes.Equal(compact.Bytes(), got) {
			t.Fatalf("ParseArguments(%q) = %q: not compact", s, got)
		}
		if len(bytes.Trim([]byte(s), " \t\n\r")) > 0 {
			var want map[string]any
			if err := json.Unmarshal([]byte(s), &want); err != nil {
				t.Fatalf("ParseArguments(%q) accepted what encoding/json refuses: %v", s, err)
			}
		}
	})
}

// FuzzFromOpenAIChat checks that no input panics, and that every call of an
// accepted input is either a valid call or a failure naming tool_calls.
func FuzzFromOpenAIChat(f *testing.F) {
	for _, s := range []string{
		`[{"id":"call_1","type":"function","function":{"name":"echo","arguments":"{\"text\":\"a\"}"}}]`,
		`{"role":"assistant","tool_calls":[{"id":"x y","function":{"name":"e","arguments":""}},5,null]}`,
		`{"tool_calls":null}`, `[]`, `{`, `[{"id":7}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		calls, err := envelope.FromOpenAIChat(data, client.Call{SessionID: "s"})
		if err != nil {
			return
		}
		for i, c := range calls {
			if !protocol.ValidToken(c.Call.CallID) {
				t.Fatalf("call %d: call_id %q is not a token", i, c.Call.CallID)
			}
			if c.Failure != nil {
				if !bytes.Contains([]byte(c.Failure.Error), []byte("tool_calls[")) {
					t.Fatalf("call %d: failure %q names no field", i, c.Failure.Error)
				}
				continue
			}
			if _, err := protocol.DecodeCall(mustEncode(t, c.Call)); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
	})
}

func mustEncode(t *testing.T, c client.Call) []byte {
	t.Helper()
	b, err := protocol.EncodeCall(&c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
