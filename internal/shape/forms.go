package shape

import (
	"bytes"
	"encoding/base64"
	"slices"
	"strings"
	"unicode/utf8"
)

// MinEncodedLen is the length in bytes from which a secret's encoded forms
// are redacted too (docs/capabilities.md, "Result shaping"). A shorter
// secret is redacted where it appears literally, and only there: its
// encodings are too short to tell from ordinary text.
const MinEncodedLen = 8

// pattern is one form of a secret the redactor looks for: a fixed string,
// in which hexadecimal digits may also match in upper case.
type pattern struct {
	// text is the form, hexadecimal digits in lower case.
	text string
	// hex says the form is hexadecimal: its digits match in either case.
	hex bool
	// lead and trail are set for the stable run of a base64 encoding whose
	// first (last) character is preceded (followed) by one that holds bits
	// of the secret and bits of its neighbour: that character is redacted
	// too when the input has one there, and '=' padding after the last.
	lead, trail bool
}

// at reports whether the form is in s at offset i (i+len(p.text) <= len(s)).
func (p *pattern) at(s string, i int) bool {
	t := s[i : i+len(p.text)]
	return t == p.text || p.hex && equalHexFold(t, p.text)
}

// occurrence returns what is redacted of the form found in s at start:
// the form and, for a base64 run, the character on either side that holds
// bits of the secret and '=' padding.
func (p *pattern) occurrence(s string, start int) span {
	end := start + len(p.text)
	if p.lead && start > 0 && isBase64(s[start-1]) {
		start--
	}
	if p.trail && end < len(s) && isBase64(s[end]) {
		end++
		for k := 0; k < 2 && end < len(s) && s[end] == '='; k++ {
			end++
		}
	}
	return span{start, end}
}

// equalHexFold reports whether t is the lower-case hexadecimal form but
// for the case of its digits.
func equalHexFold(t, form string) bool {
	for k := range len(form) {
		if !sameDigit(t[k], form[k]) {
			return false
		}
	}
	return true
}

// sameDigit reports whether c is the lower-case digit d in either case.
func sameDigit(c, d byte) bool { return c == d || isHexLetter(d) && c == d&^0x20 }

const lowerHex = "0123456789abcdef"

// formSet builds the patterns of several secrets in one string: a few
// allocations in all, however many forms (redaction builds one per call).
type formSet struct {
	arena strings.Builder
	pats  []pattern
	first int    // the current secret's first form in pats
	tmp   []byte // the form being built
	src   []byte // scratch for base64
}

// secretKind says which characters of a secret its forms depend on.
type secretKind struct {
	ascii   bool // no byte over 0x7f
	valid   bool // valid UTF-8
	space   bool // has a space
	escapes bool // has a '%', '\\' or '&', which may start an escape
}

func kindOf(secret string) secretKind {
	return secretKind{
		ascii:   !strings.ContainsFunc(secret, func(r rune) bool { return r >= utf8.RuneSelf }),
		valid:   utf8.ValidString(secret),
		space:   strings.IndexByte(secret, ' ') >= 0,
		escapes: strings.ContainsAny(secret, "%\\&"),
	}
}

// size is about the bytes and the number of the forms of a secret of n
// bytes of kind k (at most).
func (k secretKind) size(n int) (bytes, forms int) {
	bytes, forms = 12*n+12, 9 // value, reverse, hex, 6 base64 runs
	if !k.ascii {
		bytes, forms = bytes+n, forms+1
	}
	if k.escapes {
		bytes, forms = bytes+7*n, forms+7
	}
	if k.space {
		bytes, forms = bytes+n, forms+1
	}
	if !k.valid {
		bytes, forms = bytes+6*n, forms+2
	}
	return bytes, forms
}

// add appends the forms of secret (at least MinEncodedLen bytes, of kind
// k), without duplicates: the value, its reverse, hex, the stable runs of
// its base64 encodings at each of the three byte alignments in both
// alphabets, and the values that an escaped form of it has in the decoded
// view when they differ from the value (see [decodedForms]). It returns
// the reverse.
func (f *formSet) add(secret string, k secretKind) (reversed string) {
	f.first = len(f.pats)
	f.keep(append(f.tmp[:0], secret...), false, false, false)

	f.tmp = f.tmp[:0]
	for i := len(secret) - 1; i >= 0; i-- {
		f.tmp = append(f.tmp, secret[i])
	}
	reversed = f.keep(f.tmp, false, false, false)
	if !k.ascii && k.valid {
		f.tmp = f.tmp[:0]
		for i := len(secret); i > 0; {
			_, size := utf8.DecodeLastRuneInString(secret[:i])
			f.tmp = append(f.tmp, secret[i-size:i]...)
			i -= size
		}
		f.keep(f.tmp, false, false, false)
	}

	f.tmp = f.tmp[:0]
	for i := range len(secret) {
		f.tmp = append(f.tmp, lowerHex[secret[i]>>4], lowerHex[secret[i]&15])
	}
	f.keep(f.tmp, true, false, false)

	for a := range 3 {
		f.base64Runs(secret, a)
	}
	for _, v := range decodedForms(secret, k) {
		f.keep(append(f.tmp[:0], v...), false, false, false)
	}
	return reversed
}

// decodedForms returns what else than secret an escaped form of it may
// read as in the decoded view, where the escapes of the text are replaced
// but nothing else is:
//   - a secret with escape-like text in it ("%41", "&amp;", `\n`) that an
//     encoder left as it is reads with that text replaced too: for each set
//     of escape schemes, the secret with the escapes of those replaced;
//   - a space written '+' (form encoding, url.QueryEscape);
//   - each byte of invalid UTF-8 written as U+FFFD (`\ufffd` in JSON).
func decodedForms(secret string, k secretKind) []string {
	var forms []string
	add := func(v string) {
		if v != secret && !slices.Contains(forms, v) {
			forms = append(forms, v)
		}
	}
	bases := []string{secret}
	if !k.valid {
		// U+FFFD for each invalid byte: what a JSON encoder writes. Its
		// escape-like text is then decoded by the view too, and a byte
		// that decoding yields may be invalid on its own ("%80"): both
		// orders are forms.
		bases = append(bases, string([]rune(secret)))
	}
	for _, b := range bases {
		add(b)
		if !k.escapes {
			continue
		}
		for which := scheme(1); which <= schemeAll; which++ {
			u := unescapeString(b, which)
			add(u)
			if !k.valid {
				add(string([]rune(u)))
			}
		}
	}
	if k.space {
		add(strings.ReplaceAll(secret, " ", "+"))
		if !k.valid {
			add(strings.ReplaceAll(string([]rune(secret)), " ", "+"))
		}
	}
	return forms
}

// base64Runs adds the run of characters of a base64 encoding of a longer
// byte string that depends only on secret when secret starts at a byte
// offset congruent to a modulo 3, in the standard and the URL alphabet: the
// characters whose six bits all come from secret. The character before it
// (when a > 0) and the one after it (when the secret does not end on a
// character boundary) mix bits of secret and of its neighbours.
func (f *formSet) base64Runs(secret string, a int) {
	f.src = append(append(f.src[:0], "\x00\x00"[:a]...), secret...)
	f.tmp = base64.StdEncoding.AppendEncode(f.tmp[:0], f.src)
	startBit, endBit := 8*a, 8*(a+len(secret))
	first, last := (startBit+5)/6, endBit/6 // characters [first, last)
	run := f.tmp[first:last]
	lead, trail := startBit%6 != 0, endBit%6 != 0
	f.keep(run, false, lead, trail)
	if bytes.ContainsAny(run, "+/") { // the URL alphabet differs in these two
		for i, c := range run {
			switch c {
			case '+':
				run[i] = '-'
			case '/':
				run[i] = '_'
			}
		}
		f.keep(run, false, lead, trail)
	}
}

// keep adds form as a form of the current secret, unless it is one
// already, and returns it as stored.
func (f *formSet) keep(form []byte, hex, lead, trail bool) string {
	f.tmp = form[:0] // keep any growth of the scratch buffer
	for _, p := range f.pats[f.first:] {
		if p.text == string(form) && p.hex == hex && p.lead == lead && p.trail == trail {
			return p.text
		}
	}
	// The strings of the arena stay valid (and unchanged) should it grow.
	off := f.arena.Len()
	f.arena.Write(form)
	text := f.arena.String()[off:]
	f.pats = append(f.pats, pattern{text: text, hex: hex, lead: lead, trail: trail})
	return text
}

func isHexLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'f' }
