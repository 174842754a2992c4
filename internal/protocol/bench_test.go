package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

// Microbenchmarks of the per-call wire work (docs/benchmarks.md). Run with:
// go test -run XXX -bench . -benchmem ./internal/protocol

// benchCall is a call as the benchmark publishes it: about 1 KiB of args.
func benchCall() []byte {
	text := strings.Repeat("Capstan runs LLM-agent tool calls at scale. ", 24)[:1013]
	return []byte(`{"call_id":"r1s2c12345","batch_id":"r1s2","tool":"echo","session_id":"bench","personality_id":"bench","args":{"text":"` + text + `"}}`)
}

func BenchmarkDecodeCall(b *testing.B) {
	data := benchCall()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCall(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeCallAllFields decodes a call that sets every field.
func BenchmarkDecodeCallAllFields(b *testing.B) {
	data := []byte(`{"call_id":"c1","batch_id":"b1","tool":"read_file","args":{"path":"a.txt","start_line":1},"session_id":"s",
		"session_key":"cli:repo","platform":"cli","working_dir":"/srv/x","personality_id":"coder","agent_id":"a","team_id":"t",
		"memory_scope_id":"m","current_turn":3,"message_count":12,"result_budget_chars":20000,"dry_run":false,
		"deadline":"2030-01-02T15:04:05Z","timeout_ms":30000,"exclude_tools":["terminal"],"narrow_tools":["read_file","echo"]}`)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCall(data); err != nil {
			b.Fatal(err)
		}
	}
}

func benchResult(ok bool) Result {
	text := strings.Repeat("Capstan runs LLM-agent tool calls at scale. ", 24)[:1013]
	r := Result{CallID: "r1s2c12345", BatchID: "r1s2", Tool: "echo", OK: ok, Value: text, DurationMS: 3, WorkerID: "host-1234", Deliveries: 1}
	if !ok {
		r.Code, r.Error, r.Value = CodeExecutionFailed, "Command exited with error (code 1):\n"+text, ""
	}
	return r
}

// BenchmarkEncodeResultJSONMarshal is json.Marshal of a result, which the
// worker used before EncodeResult: the same bytes, one more pass.
func BenchmarkEncodeResultJSONMarshal(b *testing.B) {
	r := benchResult(true)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeResult is the result encoding of every answered call.
func BenchmarkEncodeResult(b *testing.B) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"ok", true}, {"failure", false}} {
		b.Run(tc.name, func(b *testing.B) {
			r := benchResult(tc.ok)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodeResult(&r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
