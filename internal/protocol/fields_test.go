package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
)

// topLevelFields must split exactly what json.Unmarshal into a
// map[string]json.RawMessage splits, and refuse what it refuses.
var fieldsSeeds = []string{
	`{"call_id":"c1","tool":"echo","args":{"text":"x","n":[1,2,{"a":null}]},"session_id":"s"}`,
	`{"a":1,"a":2}`,
	" \t\r\n{ \"a\" : \"b\" } \n",
	"{\"s\":\"\xff ok\"}",
	`{"\u0061":1}`,
	`{"x":1} {"y":2}`,
	`{"x":1}]`,
	`{"a":}`,
	`[]`,
	`null`,
	`{}`,
	``,
	`{"x":1e400}`,
}

func TestTopLevelFieldsMatchesUnmarshal(t *testing.T) {
	t.Parallel()
	for _, s := range fieldsSeeds {
		checkFieldsMatch(t, []byte(s))
	}
}

func FuzzTopLevelFieldsMatchesUnmarshal(f *testing.F) {
	for _, s := range fieldsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkFieldsMatch(t, data) })
}

func checkFieldsMatch(t *testing.T, data []byte) {
	t.Helper()
	var want map[string]json.RawMessage
	wantOK := json.Unmarshal(data, &want) == nil && want != nil
	got, ok := topLevelFields(data)
	if ok != wantOK {
		t.Fatalf("%q: topLevelFields ok=%v, json.Unmarshal ok=%v", data, ok, wantOK)
	}
	if !ok {
		return
	}
	if len(got) != len(want) {
		t.Fatalf("%q: %d fields, json.Unmarshal %d", data, len(got), len(want))
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Fatalf("%q: field %q is %q, json.Unmarshal %q", data, k, got[k], v)
		}
	}
}

// BenchmarkTopLevelFields compares topLevelFields with json.Unmarshal into
// a map (what DecodeCall used before) on the benchmark's 1 KiB call, in
// one run.
func BenchmarkTopLevelFields(b *testing.B) {
	data := benchCall()
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("topLevelFields", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := topLevelFields(data); !ok {
				b.Fatal("not an object")
			}
		}
	})
}
