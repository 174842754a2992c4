package shape

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/require"
)

// formSamples are secrets with every kind of character the escapers treat
// apart.
var formSamples = []string{
	"ghp_R8aQk2LmZ0xV7tY4pWc9Ns3Jd6Hf1Be5Ug0K",
	"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY+==",
	`p@ss w0rd "quoted" \back\ <tag> & co; a=b?c#d%e`,
	"tab\there\nnewline\r\x01\x1f\x7f",
	"pâté-😀-\u2028-\u2029-日本",
	"invalid \xff\xfe utf-8",
}

// Whatever standard encoder wrote a secret, the decoded view reads it as
// the secret or one of its decoded forms.
func TestDecodedViewReadsStandardEncodings(t *testing.T) {
	t.Parallel()
	pythonQuote := func(s string) string { // urllib.parse.quote: '/' kept
		return strings.ReplaceAll(url.PathEscape(s), "%2F", "/")
	}
	encoders := map[string]func(string) string{
		"url.QueryEscape": url.QueryEscape,
		"url.PathEscape":  url.PathEscape,
		"python quote":    pythonQuote,
		"encoding/json": func(s string) string {
			b, err := json.Marshal(s)
			require.NoError(t, err)
			return string(b[1 : len(b)-1])
		},
		"encoding/json without HTML escaping": func(s string) string {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			require.NoError(t, enc.Encode(s))
			return strings.TrimSuffix(b.String(), "\n")[1 : b.Len()-2]
		},
		"html.EscapeString": html.EscapeString,
		"every character as \\uXXXX": func(s string) string {
			var b strings.Builder
			for _, u := range utf16.Encode([]rune(s)) {
				fmt.Fprintf(&b, `\u%04X`, u)
			}
			return b.String()
		},
		"every character as &#N;": func(s string) string {
			var b strings.Builder
			for _, r := range s {
				fmt.Fprintf(&b, "&#%d;", r)
			}
			return b.String()
		},
	}
	for _, secret := range formSamples {
		want := append([]string{secret}, decodedForms(secret, kindOf(secret))...)
		for name, enc := range encoders {
			got := unescapeString(enc(secret), schemeAll)
			require.Contains(t, want, got, "%s of %q: %q", name, secret, enc(secret))
		}
	}
}

// Each base64 run is the part of an encoding at that alignment that the
// secret alone decides: it is found in the encoding of the secret between
// any bytes, and it changes when any byte of the secret does.
func TestBase64RunsAreStable(t *testing.T) {
	t.Parallel()
	secret := formSamples[1]
	var f formSet
	f.add(secret, kindOf(secret))
	var runs []pattern
	for _, p := range f.pats {
		if p.lead || p.trail { // every run of this secret (43 bytes, not a multiple of 3)
			runs = append(runs, p)
		}
	}
	require.GreaterOrEqual(t, len(runs), 3, "three alignments, in one or two alphabets")
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		for pre := range 6 {
			for _, b := range []byte{0x00, 0xff, 0x3e} {
				e := enc.EncodeToString(append(bytes.Repeat([]byte{b}, pre), secret+"\x00\xfb\xff"[:pre%4]...))
				found := false
				for _, p := range runs {
					found = found || strings.Contains(e, p.text)
				}
				require.True(t, found, "no run of %q in %s (prefix %d × %#x)", secret, e, pre, b)
			}
		}
	}
}

// A form's hexadecimal digits match in either case, and nothing else does.
func TestPatternCase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		p     pattern
		in    string
		match bool
	}{
		{"hex lower", pattern{text: "0a1b2c", hex: true}, "0a1b2c", true},
		{"hex upper", pattern{text: "0a1b2c", hex: true}, "0A1B2C", true},
		{"hex mixed", pattern{text: "0a1b2c", hex: true}, "0A1b2C", true},
		{"hex other", pattern{text: "0a1b2c", hex: true}, "0a1b2d", false},
		{"exact", pattern{text: "AbCdEf"}, "abcdef", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.match, tt.p.at(tt.in, 0))
		})
	}
}

// A call with many secrets gets several groups, each with a long step; every
// secret's forms are still found.
func TestManySecretsMakeGroups(t *testing.T) {
	t.Parallel()
	var secrets []string
	for i := range 300 {
		secrets = append(secrets, fmt.Sprintf("secret-%03d/with+odd chars", i))
	}
	r := NewRedactor(secrets)
	require.Greater(t, len(r.groups), 1)
	for _, g := range r.groups {
		require.LessOrEqual(t, len(g.pats), maxGroupForms+22)
		require.GreaterOrEqual(t, g.step, 20)
		require.LessOrEqual(t, g.step, maxStep)
	}
	var in, want []string
	for _, i := range []int{0, 150, 299} {
		in = append(in, base64.StdEncoding.EncodeToString([]byte(secrets[i])), hex.EncodeToString([]byte(secrets[i])), url.QueryEscape(secrets[i]))
		want = append(want, Redacted, Redacted, Redacted)
	}
	require.Equal(t, strings.Join(want, " "), r.Redact(strings.Join(in, " ")))
}

// A long secret (a key file) gets a step of maxStep, not its length: its
// tables stay small, and its forms are still found.
func TestLongSecret(t *testing.T) {
	t.Parallel()
	key := "-----BEGIN PRIVATE KEY-----\n" + strings.Repeat("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7", 40) + "\n-----END PRIVATE KEY-----\n"
	r := NewRedactor([]string{key})
	require.Len(t, r.groups, 1)
	require.Equal(t, maxStep, r.groups[0].step)
	require.LessOrEqual(t, len(r.groups[0].keys), maxStep*len(r.groups[0].pats))
	js, err := json.Marshal(map[string]string{"key": key})
	require.NoError(t, err)
	b64 := base64.RawURLEncoding.EncodeToString([]byte("x" + key)) // the first character holds only bits of "x"
	in := "a " + b64 + " b " + string(js) + " c " + hex.EncodeToString([]byte(key))
	require.Equal(t, "a "+b64[:1]+"[REDACTED] b {\"key\":\"[REDACTED]\"} c [REDACTED]", r.Redact(in))
}
