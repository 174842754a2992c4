package argschema

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkValidateEcho validates about 1 KiB of echo arguments against
// echo's schema, as every benchmark call is (docs/benchmarks.md).
func BenchmarkValidateEcho(b *testing.B) {
	schema := json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"sleep_ms":{"type":"integer","minimum":0,"maximum":600000},
		"progress":{"type":"array","items":{"type":"object","properties":{"message":{"type":"string"},"percent":{"type":"number","minimum":0,"maximum":100},
		"audience":{"type":"string","enum":["internal","user","dashboard"]}},"required":["message"],"additionalProperties":false}}},
		"required":["text"],"additionalProperties":false}`)
	s, err := Compile("echo", schema)
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"text":"` + strings.Repeat("Capstan runs LLM-agent tool calls at scale. ", 24)[:1013] + `"}`)
	b.SetBytes(int64(len(args)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Validate(args); err != nil {
			b.Fatal(err)
		}
	}
}
