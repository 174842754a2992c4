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

// BenchmarkValidateEchoSleep is BenchmarkValidateEcho's call with one
// integer argument more (sleep_ms, the sleep10 scenario's args): what the
// library's number checks cost (it compares numbers as big.Rat parsed from
// their fmt.Sprint).
func BenchmarkValidateEchoSleep(b *testing.B) {
	schema := json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"},"sleep_ms":{"type":"integer","minimum":0,"maximum":600000}},
		"required":["text"],"additionalProperties":false}`)
	s, err := Compile("echo", schema)
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("Capstan runs LLM-agent tool calls at scale. ", 24)[:1013]
	for _, bc := range []struct{ name, args string }{
		{"text", `{"text":"` + text + `"}`},
		{"text+sleep_ms", `{"text":"` + text + `","sleep_ms":10}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Validate(json.RawMessage(bc.args)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
