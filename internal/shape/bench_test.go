package shape

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
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
// (echo's case) and with two, building the Redactor included, and with two
// by the literal-only code before issue 19.
func BenchmarkRedact(b *testing.B) {
	s := strings.Repeat("Capstan runs LLM-agent tool calls at scale. ", 23)
	two := []string{"s3cr3t-token-value", "another-secret-1234"}
	for _, tc := range []struct {
		name    string
		redact  func(string, []string) string
		secrets []string
	}{{"none", Redact, nil}, {"two", Redact, two}, {"two literal only (before)", redactLiteral, two}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = tc.redact(s, tc.secrets)
			}
		})
	}
}

// benchSecrets are five secrets of the kinds a call resolves: a GitHub
// token, an API key, an AWS secret key (base64 alphabet), a bearer JWT and
// a password.
var benchSecrets = []string{
	"ghp_R8aQk2LmZ0xV7tY4pWc9Ns3Jd6Hf1Be5Ug0K",
	"sk-proj-Tq9vX2mB7cL4nR8sK1wE6yH3jP0aZ5dF-uG7iO2tV9bN4xM1",
	"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	"Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ3b3JrZXIifQ.c2lnbmF0dXJl",
	"hunter2!Pa55w0rd",
}

// benchResult is a 100 KiB tool result: prose, JSON lines with hex ids and
// base64 blobs, request lines with query strings, padded table rows; each
// of secrets appears once, literally.
func benchResult(secrets []string) string {
	const size = 100 << 10
	r := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the a of to and in is that for on with as was by it be at this from are or an tool call " +
		"worker result agent secret token request response server client error value data stream capstan nats policy")
	var b strings.Builder
	buf := make([]byte, 48)
	for b.Len() < size {
		switch r.IntN(6) {
		case 0, 1, 2:
			for range 12 {
				b.WriteString(words[r.IntN(len(words))] + " ")
			}
			b.WriteString(".\n")
		case 3:
			for i := range buf {
				buf[i] = byte(r.Uint32())
			}
			fmt.Fprintf(&b, `{"id":"%s","blob":"%s","n":%d}`+"\n", hex.EncodeToString(buf[:20]),
				base64.StdEncoding.EncodeToString(buf[:r.IntN(len(buf))]), r.IntN(100000))
		case 4:
			fmt.Fprintf(&b, "GET https://api.example.com/v1/items/%d?page=%d&q=%s HTTP/1.1\n", r.IntN(1e6), r.IntN(50),
				url.QueryEscape(words[r.IntN(len(words))]+" "+words[r.IntN(len(words))]))
		default:
			fmt.Fprintf(&b, "\t%-20s %8d %s\n", words[r.IntN(len(words))], r.IntN(1e7), strings.Repeat("-", r.IntN(20)))
		}
	}
	s := b.String()[:size]
	for i, sec := range secrets {
		at := (i + 1) * size / (len(secrets) + 2)
		s = s[:at] + sec + s[at+len(sec):]
	}
	return s
}

// redactLiteral is Redact as it was before encoded forms (issue 19): each
// secret's literal value only. It is the baseline of BenchmarkRedact100KiB.
func redactLiteral(s string, secrets []string) string {
	var spans []span
	for _, sec := range secrets {
		if sec == "" || len(sec) > len(s) {
			continue
		}
		for off := 0; off < len(s); {
			i := strings.Index(s[off:], sec)
			if i < 0 {
				break
			}
			spans = append(spans, span{off + i, off + i + len(sec)})
			off += i + 1
		}
	}
	if len(spans) == 0 {
		return s
	}
	return replace(s, spans)
}

// BenchmarkRedact100KiB is the redaction of a 100 KiB result with five
// resolved secrets, the building of the Redactor included: literal values
// only (the code before issue 19) and every encoded form.
//
// "interleaved" runs both in each iteration, in alternating order, times
// each, and reports the ratios encoded/literal of the medians
// ("median-ratio") and of the means ("mean-ratio", which also carries the
// garbage collection each one's allocations cause). On a shared machine
// whose load changes from second to second, these ratios are far steadier
// than two ns/op measured one after the other.
func BenchmarkRedact100KiB(b *testing.B) {
	s := benchResult(benchSecrets)
	want := redactLiteral(s, benchSecrets)
	if got := Redact(s, benchSecrets); got != want {
		b.Fatal("the two redactions disagree on the benchmark's result")
	}
	b.Run("literal only (before)", func(b *testing.B) {
		b.SetBytes(int64(len(s)))
		b.ReportAllocs()
		for b.Loop() {
			_ = redactLiteral(s, benchSecrets)
		}
	})
	b.Run("encoded forms", func(b *testing.B) {
		b.SetBytes(int64(len(s)))
		b.ReportAllocs()
		for b.Loop() {
			_ = Redact(s, benchSecrets)
		}
	})
	b.Run("interleaved", func(b *testing.B) {
		var lit, enc []time.Duration
		timed := func(f func(string, []string) string) time.Duration {
			t0 := time.Now()
			_ = f(s, benchSecrets)
			return time.Since(t0)
		}
		for i := 0; b.Loop(); i++ {
			if i%2 == 0 {
				lit = append(lit, timed(redactLiteral))
				enc = append(enc, timed(Redact))
			} else {
				enc = append(enc, timed(Redact))
				lit = append(lit, timed(redactLiteral))
			}
		}
		median := func(d []time.Duration) float64 {
			slices.Sort(d)
			return float64(d[len(d)/2])
		}
		mean := func(d []time.Duration) float64 {
			var sum time.Duration
			for _, x := range d {
				sum += x
			}
			return float64(sum) / float64(len(d))
		}
		b.ReportMetric(mean(enc)/mean(lit), "mean-ratio")
		b.ReportMetric(median(enc)/median(lit), "median-ratio")
		b.ReportMetric(median(lit), "literal-median-ns")
		b.ReportMetric(median(enc), "encoded-median-ns")
	})
}

// BenchmarkNewRedactor is building the redactor of the five secrets.
func BenchmarkNewRedactor(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = NewRedactor(slices.Clone(benchSecrets))
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
