package shape

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
)

// escapedSecrets are three secrets of a call: a GitHub token, an API key
// and an AWS secret key (with '/', which escapers treat apart).
var escapedSecrets = []string{
	"ghp_R8aQk2LmZ0xV7tY4pWc9Ns3Jd6Hf1Be5Ug0K",
	"sk-proj-Tq9vX2mB7cL4nR8sK1wE6yH3jP0aZ5dF-uG7iO2tV9bN4xM1",
	"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
}

// escapedResult is a 100 KiB tool result of the kind dense says:
//   - "plain": prose, JSON lines with hex ids, table rows: no '%', '\\' or
//     '&' at all (the decoded view's fast path);
//   - "mixed": the same with, one line in three, an HTML paragraph with
//     character references, a JSON line with \" and \u escapes, or a
//     request line with a %-escaped query;
//   - "dense": escapes on every line.
//
// Each secret appears once, escaped (Python's quote, \u escapes, HTML
// references), except in "plain", where it is literal.
func escapedResult(kind string) string {
	const size = 100 << 10
	r := rand.New(rand.NewPCG(3, 4))
	words := strings.Fields("the a of to and in is that for on with as was by it be at this from are or an tool call " +
		"worker result agent secret token request response server client error value data stream capstan nats policy")
	word := func() string { return words[r.IntN(len(words))] }
	var b strings.Builder
	buf := make([]byte, 20)
	for b.Len() < size {
		escaped := kind == "dense" || kind == "mixed" && r.IntN(3) == 0
		switch n := r.IntN(3); {
		case !escaped && n == 0:
			for range 12 {
				b.WriteString(word() + " ")
			}
			b.WriteString(".\n")
		case !escaped && n == 1:
			for i := range buf {
				buf[i] = byte(r.Uint32())
			}
			fmt.Fprintf(&b, `{"id":"%s","name":"%s","n":%d}`+"\n", hex.EncodeToString(buf), word(), r.IntN(100000))
		case !escaped:
			fmt.Fprintf(&b, "\t%-20s %8d %s\n", word(), r.IntN(1e7), strings.Repeat("-", r.IntN(20)))
		case n == 0:
			fmt.Fprintf(&b, "<p>%s &amp; %s &lt;%s&gt; it&#39;s %s&nbsp;%s &quot;%s&quot;</p>\n", word(), word(), word(), word(), word(), word())
		case n == 1:
			fmt.Fprintf(&b, `{"msg":"%s \"%s\" caf\u00e9 %s\n%s\/%s","n":%d}`+"\n", word(), word(), word(), word(), word(), r.IntN(100000))
		default:
			fmt.Fprintf(&b, "GET /v1/items?q=%s&path=%s HTTP/1.1\n", url.QueryEscape(word()+" "+word()), url.PathEscape("a/"+word()+"/b c"))
		}
	}
	s := b.String()[:size]
	for i, sec := range escapedSecrets {
		if kind != "plain" {
			switch i {
			case 0:
				sec = strings.ReplaceAll(sec, "_", `\u005F`)
			case 1:
				sec = strings.ReplaceAll(sec, "-", "&#45;")
			case 2:
				sec = strings.ReplaceAll(sec, "/", "%2F")
			}
		}
		at := (i + 1) * size / (len(escapedSecrets) + 2)
		s = s[:at] + " " + sec + " " + s[at+len(sec)+2:]
	}
	return s
}

// BenchmarkRedactEscaped is the redaction of a 100 KiB result with three
// secrets (building the redactor included) on each kind of escapedResult:
// docs/benchmarks.md, "Redaction of escaped forms".
func BenchmarkRedactEscaped(b *testing.B) {
	for _, kind := range []string{"plain", "mixed", "dense"} {
		s := escapedResult(kind)
		b.Run(kind, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			b.ReportAllocs()
			for b.Loop() {
				_ = Redact(s, escapedSecrets)
			}
		})
	}
}
