package shape

import (
	"strings"
	"testing"
)

// Microbenchmarks of result shaping (docs/benchmarks.md). Run with:
// go test -run XXX -bench . -benchmem ./internal/shape

func BenchmarkTrim(b *testing.B) {
	for _, tc := range []struct {
		name   string
		s      string
		budget int
	}{
		{"1KiB under budget", strings.Repeat("x", 1024), 80000},
		{"100KiB over budget", strings.Repeat("x", 100<<10), 40000},
		{"100KiB multibyte over budget", strings.Repeat("é", 50<<10), 40000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.s)))
			b.ReportAllocs()
			for b.Loop() {
				_, _, _ = Trim(tc.s, tc.budget)
			}
		})
	}
}

// BenchmarkRedact is redaction of a 1 KiB value with no resolved secret
// (echo's case) and with two.
func BenchmarkRedact(b *testing.B) {
	s := strings.Repeat("Capstan runs LLM-agent tool calls at scale. ", 23)
	for _, tc := range []struct {
		name    string
		secrets []string
	}{{"none", nil}, {"two", []string{"s3cr3t-token-value", "another-secret-1234"}}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Redact(s, tc.secrets)
			}
		})
	}
}

// BenchmarkWrapUntrusted is the untrusted wrap of a 10 KiB fetched page.
func BenchmarkWrapUntrusted(b *testing.B) {
	s := strings.Repeat("<p>Some fetched page text, with <b>markup</b>.</p>\n", 200)
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		_ = WrapUntrusted(s, "https://example.com/page", "fetch_url")
	}
}
