package shape_test

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
)

// sentinel is the secret of the attack in issue 19: a server echoed the
// Authorization header back in base64, reversed and letter-spaced.
const sentinel = "Bearer SENTINELSECRET"

// odd is a secret with characters that URL and JSON escape, and non-ASCII.
const odd = `k/ey+<&>"\é=`

func reversed(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}

func spaced(s, sep string) string { return strings.Join(strings.Split(s, ""), sep) }

func jsonBody(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

func escapeEvery(s, format string) string {
	var b strings.Builder
	for _, r := range s {
		if r > 0xffff {
			panic("test secret outside the BMP")
		}
		fmt.Fprintf(&b, format, r)
	}
	return b.String()
}

func TestRedactEncodedForms(t *testing.T) {
	t.Parallel()
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name, in, want string
		secrets        []string
	}{
		{"the attack's base64", "echo: QmVhcmVyIFNFTlRJTkVMU0VDUkVU", "echo: [REDACTED]", []string{sentinel}},
		{"the attack's base64, the secret after the scheme", "echo: QmVhcmVyIFNFTlRJTkVMU0VDUkVU", "echo: QmVhcmVyI[REDACTED]", []string{"SENTINELSECRET"}},
		{"literal", "got " + sentinel + "!", "got [REDACTED]!", []string{sentinel}},
		{"base64 standard", "x " + b64([]byte(odd)) + " y", "x [REDACTED] y", []string{odd}},
		{"base64 URL", "x " + base64.URLEncoding.EncodeToString([]byte(odd)) + " y", "x [REDACTED] y", []string{odd}},
		{"base64 unpadded", "x " + base64.RawStdEncoding.EncodeToString([]byte(odd)) + " y", "x [REDACTED] y", []string{odd}},
		{"base64 URL unpadded", "x " + base64.RawURLEncoding.EncodeToString([]byte(odd)) + " y", "x [REDACTED] y", []string{odd}},
		{"base64 of a header", `{"echo":"` + b64([]byte("Authorization: "+sentinel)) + `"}`,
			`{"echo":"` + b64([]byte("Authorization: " + sentinel))[:20] + `[REDACTED]"}`, []string{sentinel}},
		{"hex lower", "id " + hex.EncodeToString([]byte(sentinel)), "id [REDACTED]", []string{sentinel}},
		{"hex upper", "id " + strings.ToUpper(hex.EncodeToString([]byte(sentinel))), "id [REDACTED]", []string{sentinel}},
		{"hex mixed case", "id 4265617265722053454E54494e454c534543524554", "id [REDACTED]", []string{sentinel}},
		{"hex inside longer hex", "sum ff00" + hex.EncodeToString([]byte(sentinel)) + "00ff", "sum ff00[REDACTED]00ff", []string{sentinel}},
		{"query escaping", "?q=" + url.QueryEscape(sentinel) + "&x", "?q=[REDACTED]&x", []string{sentinel}},
		{"path escaping", "/a/" + url.PathEscape(odd) + "/b", "/a/[REDACTED]/b", []string{odd}},
		{"query escaping of odd", "?q=" + url.QueryEscape(odd), "?q=[REDACTED]", []string{odd}},
		{"escapes in lower case", "?q=" + strings.ToLower(url.QueryEscape(odd)), "?q=[REDACTED]", []string{odd}},
		{"every byte escaped", "?q=" + escapeEvery(sentinel, "%%%02X"), "?q=[REDACTED]", []string{sentinel}},
		{"RFC 3986 escaping", "?q=k%2Fey%2B%3C%26%3E%22%5C%C3%A9%3D", "?q=[REDACTED]", []string{odd}},
		{"encoding/json", `{"v":"` + jsonBody(odd) + `"}`, `{"v":"[REDACTED]"}`, []string{odd}},
		{"JSON without HTML escaping", `{"v":"k/ey+<&>\"\\é="}`, `{"v":"[REDACTED]"}`, []string{odd}},
		{"JSON with escaped slash", `{"v":"k\/ey+\u003c\u0026\u003e\"\\é="}`, `{"v":"[REDACTED]"}`, []string{odd}},
		{"JSON ASCII only", `{"v":"k/ey+<&>\"\\\u00e9="}`, `{"v":"[REDACTED]"}`, []string{odd}},
		{"JSON every character", `{"v":"` + escapeEvery(sentinel, `\u%04x`) + `"}`, `{"v":"[REDACTED]"}`, []string{sentinel}},
		{"JSON every character upper", `{"v":"` + escapeEvery(odd, `\u%04X`) + `"}`, `{"v":"[REDACTED]"}`, []string{odd}},
		{"reversed", "olleh " + reversed(sentinel), "olleh [REDACTED]", []string{sentinel}},
		{"reversed code points", "x terces-étâp", "x [REDACTED]", []string{"pâté-secret"}},
		{"reversed bytes", "x " + reversed("pâté-secret"), "x [REDACTED]", []string{"pâté-secret"}},
		{"letter-spaced", "say " + spaced(sentinel, " ") + " now", "say [REDACTED] now", []string{sentinel}},
		{"letter-spaced with dashes", spaced(sentinel, "-"), "[REDACTED]", []string{sentinel}},
		{"letter-spaced by lines", "a\n" + spaced(sentinel, "\n") + "\nb", "a\n[REDACTED]\nb", []string{sentinel}},
		{"letter-spaced reversed", "[" + spaced(reversed(sentinel), ".") + "]", "[[REDACTED]]", []string{sentinel}},
		{"every form at once", strings.Join([]string{sentinel, b64([]byte(sentinel)), hex.EncodeToString([]byte(sentinel)),
			url.QueryEscape(sentinel), reversed(sentinel), spaced(sentinel, "_")}, " | "),
			"[REDACTED] | [REDACTED] | [REDACTED] | [REDACTED] | [REDACTED] | [REDACTED]", []string{sentinel}},
		{"two secrets", "a=" + b64([]byte(sentinel)) + " b=" + hex.EncodeToString([]byte(odd)), "a=[REDACTED] b=[REDACTED]", []string{odd, sentinel}},

		// Shorter than MinEncodedLen: the value only, as before.
		{"short literal", "pass=hunter2", "pass=[REDACTED]", []string{"hunter2"}},
		{"short base64 kept", "pass=" + b64([]byte("hunter2")), "pass=aHVudGVyMg==", []string{"hunter2"}},
		{"short hex kept", "pass=68756e74657232", "pass=68756e74657232", []string{"hunter2"}},
		{"short reversed kept", "pass=2retnuh", "pass=2retnuh", []string{"hunter2"}},
		{"seven bytes", "1234567 " + hex.EncodeToString([]byte("1234567")), "[REDACTED] 31323334353637", []string{"1234567"}},
		{"eight bytes", "12345678 " + hex.EncodeToString([]byte("12345678")), "[REDACTED] [REDACTED]", []string{"12345678"}},

		// Nothing else is touched.
		{"a prefix is not the secret", "Bearer SENTINEL and " + b64([]byte("Bearer SENTINEL")), "Bearer SENTINEL and QmVhcmVyIFNFTlRJTkVM", []string{sentinel}},
		{"other base64", "blob " + b64([]byte("Bearer SENTINELSECRE!")), "blob QmVhcmVyIFNFTlRJTkVMU0VDUkUh", []string{sentinel}},
		{"half the hex", "id 4265617265722053454e54494e45", "id 4265617265722053454e54494e45", []string{sentinel}},
		{"letter-spaced other text", "a b c d e f g h i j k l m n o p q r s t u v w x y z", "a b c d e f g h i j k l m n o p q r s t u v w x y z", []string{sentinel}},
		{"separators differ", "B E-A R-E R S-E N T I N E L S E C R E T", "B E-A R-E R S-E N T I N E L S E C R E T", []string{sentinel}},
		{"case changed", strings.ToLower(sentinel), strings.ToLower(sentinel), []string{sentinel}},
		{"plain text", "Capstan runs LLM-agent tool calls at scale.", "Capstan runs LLM-agent tool calls at scale.", []string{sentinel, odd}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := shape.Redact(tt.in, tt.secrets)
			require.Equal(t, tt.want, got)
			require.Equal(t, got, shape.Redact(got, tt.secrets), "idempotent")
		})
	}
}

// TestRedactBase64AtEveryOffset embeds the secret in a longer byte string
// at every alignment, encodes it in each alphabet, padded or not, and
// checks that every character that holds a bit of the secret is gone,
// padding included, and nothing else.
func TestRedactBase64AtEveryOffset(t *testing.T) {
	t.Parallel()
	encodings := map[string]*base64.Encoding{
		"std": base64.StdEncoding, "url": base64.URLEncoding, "raw std": base64.RawStdEncoding, "raw url": base64.RawURLEncoding,
	}
	for _, secret := range []string{sentinel, odd, "12345678", "\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7"} {
		for name, enc := range encodings {
			for pre := range 7 {
				for post := range 4 {
					t.Run(fmt.Sprintf("%q %s %d+%d", secret, name, pre, post), func(t *testing.T) {
						t.Parallel()
						data := strings.Repeat("\xfb", pre) + secret + strings.Repeat("\xff", post)
						e := enc.EncodeToString([]byte(data))
						first := 8 * pre / 6                  // first character with a bit of the secret
						last := (8*(pre+len(secret)) + 5) / 6 // after the last one
						want := "<" + e[:first] + shape.Redacted + strings.TrimLeft(e[last:], "=") + ">"
						require.Equal(t, want, shape.Redact("<"+e+">", []string{secret}), "%s", e)
					})
				}
			}
		}
	}
}

func TestRedactorWith(t *testing.T) {
	t.Parallel()
	var r *shape.Redactor
	require.Equal(t, sentinel, r.Redact(sentinel), "the nil redactor redacts nothing")
	r1 := r.With([]string{sentinel})
	require.Same(t, r1, r1.With([]string{sentinel}), "same secrets: the same redactor")
	r2 := r1.With([]string{sentinel, odd})
	require.NotSame(t, r1, r2)
	require.Equal(t, "[REDACTED] [REDACTED]", r2.Redact(reversed(sentinel)+" "+jsonBody(odd)))
}

// One redactor serves concurrent callers (run with -race).
func TestRedactorConcurrent(t *testing.T) {
	t.Parallel()
	r := shape.NewRedactor([]string{sentinel, odd, "short"})
	in := "short " + hex.EncodeToString([]byte(sentinel)) + " " + url.QueryEscape(odd)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				require.Equal(t, "[REDACTED] [REDACTED] [REDACTED]", r.Redact(in))
			}
		})
	}
	wg.Wait()
}

type echoed struct {
	Header string `json:"header"`
}

// explosive panics, quoting the secret in base64, when encoded.
type explosive struct{ secret string }

func (e explosive) MarshalJSON() ([]byte, error) {
	panic("cannot encode " + base64.StdEncoding.EncodeToString([]byte(e.secret)))
}

func TestRedactResultEncodedForms(t *testing.T) {
	t.Parallel()
	b64 := base64.StdEncoding.EncodeToString([]byte(sentinel))
	in := tool.Result{
		OK:    true,
		Value: "echo " + b64,
		Structured: map[string]any{
			"hex":                             hex.EncodeToString([]byte(sentinel)),
			reversed(sentinel):                true,
			"nested":                          []any{map[string]any{"q": url.QueryEscape(sentinel)}},
			"struct":                          echoed{Header: "Authorization: " + sentinel},
			"strings":                         []string{spaced(sentinel, " ")},
			"json":                            `{"auth":"` + escapeEvery(sentinel, `\u%04x`) + `"}`,
			"base64 of the authorization one": base64.URLEncoding.EncodeToString([]byte("Authorization: " + sentinel)),
		},
	}
	out := shape.RedactResult(in, []string{sentinel})
	require.Equal(t, "echo [REDACTED]", out.Value)
	require.Equal(t, map[string]any{
		"hex":                             "[REDACTED]",
		"[REDACTED]":                      true,
		"nested":                          []any{map[string]any{"q": "[REDACTED]"}},
		"struct":                          map[string]any{"header": "Authorization: [REDACTED]"},
		"strings":                         []string{"[REDACTED]"},
		"json":                            `{"auth":"[REDACTED]"}`,
		"base64 of the authorization one": base64.URLEncoding.EncodeToString([]byte("Authorization: " + sentinel))[:20] + "[REDACTED]",
	}, out.Structured)

	failed := shape.RedactResult(tool.Fail(tool.CodeExecutionFailed, "upstream said "+hex.EncodeToString([]byte(sentinel))), []string{sentinel})
	require.Equal(t, "upstream said [REDACTED]", failed.Error)

	// A value whose encoding panics: the panic goes on (the worker treats
	// it as its own fault) with the secret redacted from its message.
	poisoned := tool.Result{OK: true, Structured: map[string]any{"x": explosive{secret: sentinel}}}
	require.PanicsWithValue(t, "cannot encode [REDACTED]", func() { shape.RedactResult(poisoned, []string{sentinel}) })
}

// bound is the secret of issue 26: an MCP echo server returned it as
// Python's urllib.parse.quote() writes it.
const bound = "S3ntinel/Bound+Value42"

// TestRedactDecodedView: a secret written with any mix of %XX, JSON escapes,
// HTML character references and literal characters is redacted, and
// nothing around it.
func TestRedactDecodedView(t *testing.T) {
	t.Parallel()
	secrets := []string{bound}
	tests := []struct{ name, in, want string }{
		{"python quote", "echo: S3ntinel/Bound%2BValue42 done", "echo: [REDACTED] done"},
		{"percent lower hex", "echo: S3ntinel/Bound%2bValue42 done", "echo: [REDACTED] done"},
		{"slash escaped too", "?t=S3ntinel%2FBound%2BValue42&x=1", "?t=[REDACTED]&x=1"},
		{"fully percent-encoded upper", "?t=" + escapeEvery(bound, "%%%02X"), "?t=[REDACTED]"},
		{"fully percent-encoded lower", "?t=" + escapeEvery(bound, "%%%02x"), "?t=[REDACTED]"},
		{"percent mixed case", "?t=%53%33ntinel/Bound%2b%56alue%34%32", "?t=[REDACTED]"},
		{"JSON \\u escapes mixed with literal", `{"t":"S3ntinel\u002FBound\u002bValue42"}`, `{"t":"[REDACTED]"}`},
		{"JSON \\u escapes upper", `{"t":"\u0053\u0033ntinel/Bound\u002BValue42"}`, `{"t":"[REDACTED]"}`},
		{"JSON every character", `"` + escapeEvery(bound, `\u%04X`) + `"`, `"[REDACTED]"`},
		{"JSON escaped slash", `{"t":"S3ntinel\/Bound+Value42"}`, `{"t":"[REDACTED]"}`},
		{"HTML decimal", "<p>S3ntinel/Bound&#43;Value42</p>", "<p>[REDACTED]</p>"},
		{"HTML hex", "<p>S3ntinel/Bound&#x2B;Value42</p>", "<p>[REDACTED]</p>"},
		{"HTML hex upper X", "<p>S3ntinel&#X2f;Bound&#X2b;Value42</p>", "<p>[REDACTED]</p>"},
		{"HTML named", "<p>S3ntinel&sol;Bound&plus;Value42</p>", "<p>[REDACTED]</p>"},
		{"HTML every character", "<p>" + escapeEvery(bound, "&#%d;") + "</p>", "<p>[REDACTED]</p>"},
		{"mixed schemes", `S3ntinel&sol;Bound%2B\u0056alue&#x34;2`, "[REDACTED]"},
		{"the first and last characters escaped", `%53` + bound[1:len(bound)-1] + `&#50;`, "[REDACTED]"},
		{"escapes around kept", `a%20b &amp; S3ntinel/Bound%2BValue42 \n c&lt;d`, `a%20b &amp; [REDACTED] \n c&lt;d`},
		{"twice", "S3ntinel/Bound%2BValue42|S3ntinel/Bound&#43;Value42", "[REDACTED]|[REDACTED]"},
		{"touching an escape", "%41S3ntinel/Bound%2BValue42%41", "%41[REDACTED]%41"},
		{"form encoding's space", "?q=" + url.QueryEscape("my s3cret value"), "?q=[REDACTED]"},

		// Escapes of escapes are read once, and other characters stay.
		{"escaped percent", "S3ntinel/Bound%252BValue42", "S3ntinel/Bound%252BValue42"},
		{"another character", "S3ntinel/Bound%2CValue42", "S3ntinel/Bound%2CValue42"},
		{"incomplete escape", "S3ntinel/Bound%2Value42", "S3ntinel/Bound%2Value42"},
		{"reference without semicolon", "S3ntinel/Bound&#43Value42", "S3ntinel/Bound&#43Value42"},
		{"unknown reference", "S3ntinel/Bound&plusx;Value42", "S3ntinel/Bound&plusx;Value42"},
		{"escapes elsewhere only", "a%2Bb &plus; \\u002B S3ntinel/Bound-Value42", "a%2Bb &plus; \\u002B S3ntinel/Bound-Value42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := secrets
			if strings.Contains(tt.name, "space") {
				secrets = []string{"my s3cret value"}
			}
			got := shape.Redact(tt.in, secrets)
			require.Equal(t, tt.want, got)
			require.Equal(t, got, shape.Redact(got, secrets), "idempotent")
		})
	}
}

// Other secrets in escaped forms: non-ASCII, beyond the BMP, with escape
// characters of their own, and the other forms of an escaped text.
func TestRedactDecodedViewSecrets(t *testing.T) {
	t.Parallel()
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct{ name, secret, in, want string }{
		{"surrogate pair", "pass😀word-123", `"pass\uD83D\uDE00word-123"`, `"[REDACTED]"`},
		{"surrogate pair lower", "pass😀word-123", `"pass\ud83d\ude00word-123"`, `"[REDACTED]"`},
		{"HTML non-BMP", "pass😀word-123", "pass&#x1F600;word-123 pass&#128512;word-123", "[REDACTED] [REDACTED]"},
		{"percent-encoded UTF-8", "pâté-secret", "p%C3%A2t%c3%a9-secret", "[REDACTED]"},
		{"JSON non-ASCII", "pâté-secret", `p\u00e2t\u00E9-secret`, "[REDACTED]"},
		{"HTML named non-ASCII", "pâté-secret", "p&acirc;t&eacute;-secret", "[REDACTED]"},
		{"a match inside an escape takes it whole", "\xa9-secret-tail", `caf\u00e9-secret-tail`, "caf[REDACTED]"},
		{"invalid UTF-8 as U+FFFD", "bad\xff\xfebytes-1", `"bad\ufffd\ufffdbytes-1"`, `"[REDACTED]"`},
		{"ampersand", "salt&pepper-42", "salt&amp;pepper-42 salt%26pepper-42 salt\\u0026pepper-42", "[REDACTED] [REDACTED] [REDACTED]"},
		{"escape-like text left as it is", "p%41ss&amp;w0rd", `p%41ss\u0026amp;w0rd`, "[REDACTED]"},
		{"escape-like text escaped", "p%41ss&amp;w0rd", `p%2541ss%26amp%3Bw0rd`, "[REDACTED]"},
		{"backslash", `C:\new\token`, `"C:\\new\\token"`, `"[REDACTED]"`},
		{"URL-escaped base64", "wJalrXUtnFEMI/K7MDENG", "k=" + url.QueryEscape(b64([]byte("wJalrXUtnFEMI/K7MDENG"))), "k=[REDACTED]"},
		{"JSON-escaped base64", "\xfb\xff\xfe-binary-key", `{"k":"` + strings.ReplaceAll(b64([]byte("\xfb\xff\xfe-binary-key")), "/", `\/`) + `"}`, `{"k":"[REDACTED]"}`},
		{"escaped reverse", "S3ntinel/Bound+Value42", "24eulaV%2BdnuoB/lenitn3S", "[REDACTED]"},
		{"short secret: literal only", "hunt+r2", "hunt%2Br2 hunt+r2", "hunt%2Br2 [REDACTED]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := shape.Redact(tt.in, []string{tt.secret})
			require.Equal(t, tt.want, got)
			require.Equal(t, got, shape.Redact(got, []string{tt.secret}), "idempotent")
		})
	}
}
