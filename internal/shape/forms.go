package shape

import (
	"bytes"
	"encoding/base64"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MinEncodedLen is the length in bytes from which a secret's encoded forms
// are redacted too (docs/capabilities.md, "Result shaping"). A shorter
// secret is redacted where it appears literally, and only there: its
// encodings are too short to tell from ordinary text.
const MinEncodedLen = 8

// pattern is one form of a secret the redactor looks for: a fixed string,
// whose hexadecimal digits (of hexadecimal, and of %XX and \uXXXX escapes)
// also match in upper case.
type pattern struct {
	// text is the form, hexadecimal digits in lower case.
	text string
	// fold says where the case-insensitive digits are.
	fold uint8
	// lead and trail are set for the stable run of a base64 encoding whose
	// first (last) character is preceded (followed) by one that holds bits
	// of the secret and bits of its neighbour: that character is redacted
	// too when the input has one there, and '=' padding after the last.
	lead, trail bool
}

// Where the case-insensitive hexadecimal digits of a form are.
const (
	foldNone uint8 = iota
	foldAll        // hexadecimal: everywhere
	foldURL        // the two digits after each '%'
	foldJSON       // the four digits of each \uXXXX
)

// at reports whether the form is in s at offset i (i+len(p.text) <= len(s)).
func (p *pattern) at(s string, i int) bool {
	t := s[i : i+len(p.text)]
	return t == p.text || p.fold != foldNone && equalDigitsFold(t, p.text, p.fold)
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

// equalDigitsFold reports whether t is form but for the case of the
// hexadecimal digits that fold names.
func equalDigitsFold(t, form string, fold uint8) bool {
	for k := 0; k < len(form); {
		switch {
		case fold == foldAll:
			if !sameDigit(t[k], form[k]) {
				return false
			}
			k++
		case fold == foldURL && form[k] == '%' && k+2 < len(form):
			if t[k] != '%' || !sameDigit(t[k+1], form[k+1]) || !sameDigit(t[k+2], form[k+2]) {
				return false
			}
			k += 3
		case fold == foldJSON && form[k] == '\\' && k+5 < len(form) && form[k+1] == 'u':
			if t[k:k+2] != form[k:k+2] {
				return false
			}
			for d := k + 2; d < k+6; d++ {
				if !sameDigit(t[d], form[d]) {
					return false
				}
			}
			k += 6
		case fold == foldJSON && form[k] == '\\' && k+1 < len(form):
			if t[k:k+2] != form[k:k+2] { // \" \\ \n ...
				return false
			}
			k += 2
		default:
			if t[k] != form[k] {
				return false
			}
			k++
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
	ascii     bool // no byte over 0x7f
	urlPlain  bool // letters, digits and "-._~" only: URL escapings keep them
	jsonPlain bool // no character a JSON encoder escapes
}

func kindOf(secret string) secretKind {
	k := secretKind{ascii: true, urlPlain: true, jsonPlain: true}
	for i := range len(secret) {
		c := rune(secret[i])
		k.ascii = k.ascii && c < utf8.RuneSelf
		k.urlPlain = k.urlPlain && unreserved(c)
		k.jsonPlain = k.jsonPlain && !jsonEscapes(c)
	}
	return k
}

// size is about the bytes and the number of the forms of a secret of n
// bytes of kind k.
func (k secretKind) size(n int) (bytes, forms int) {
	bytes, forms = 21*n+8, 11 // value, reverse, hex, 6 base64 runs, every byte %XX, every \uXXXX
	if !k.urlPlain {
		bytes, forms = bytes+9*n, forms+3
	}
	if !k.jsonPlain {
		bytes, forms = bytes+12*n, forms+6
	}
	if !k.ascii {
		bytes, forms = bytes+n, forms+1
	}
	return bytes, forms
}

// add appends the forms of secret (at least MinEncodedLen bytes, of kind
// k), without duplicates: the value, its reverse, hex, the stable runs of
// its base64 encodings at each of the three byte alignments in both
// alphabets, its URL escapings and its JSON escapings. It returns the
// reverse.
func (f *formSet) add(secret string, k secretKind) (reversed string) {
	f.first = len(f.pats)
	f.keep(append(f.tmp[:0], secret...), foldNone, false, false)

	f.tmp = f.tmp[:0]
	for i := len(secret) - 1; i >= 0; i-- {
		f.tmp = append(f.tmp, secret[i])
	}
	reversed = f.keep(f.tmp, foldNone, false, false)
	if !k.ascii && utf8.ValidString(secret) {
		f.tmp = f.tmp[:0]
		for i := len(secret); i > 0; {
			_, size := utf8.DecodeLastRuneInString(secret[:i])
			f.tmp = append(f.tmp, secret[i-size:i]...)
			i -= size
		}
		f.keep(f.tmp, foldNone, false, false)
	}

	f.tmp = f.tmp[:0]
	for i := range len(secret) {
		f.tmp = append(f.tmp, lowerHex[secret[i]>>4], lowerHex[secret[i]&15])
	}
	f.keep(f.tmp, foldAll, false, false)

	for a := range 3 {
		f.base64Runs(secret, a)
	}

	// A secret of letters, digits and "-._~" is its own URL escaping but
	// for every byte escaped; one without characters JSON escapes is its
	// own JSON escaping but for every character escaped.
	modes := []urlMode{urlEvery, urlQuery, urlPath, urlUnreserved}
	if k.urlPlain {
		modes = modes[:1]
	}
	for _, mode := range modes {
		f.keep(appendURL(f.tmp[:0], secret, mode), foldURL, false, false)
	}
	opts := []jsonOpts{
		{every: true},    // a generic \uXXXX escaper
		{html: true}, {}, // encoding/json, with and without HTML escaping
		{html: true, slash: true}, {slash: true}, // and `\/`
		{ascii: true}, {ascii: true, slash: true}, // ASCII-only encoders
	}
	if k.jsonPlain {
		opts = opts[:1]
	}
	for _, o := range opts {
		f.keep(appendJSON(f.tmp[:0], secret, o), foldJSON, false, false)
	}
	return reversed
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
	f.keep(run, foldNone, lead, trail)
	if bytes.ContainsAny(run, "+/") { // the URL alphabet differs in these two
		for i, c := range run {
			switch c {
			case '+':
				run[i] = '-'
			case '/':
				run[i] = '_'
			}
		}
		f.keep(run, foldNone, lead, trail)
	}
}

// keep adds form as a form of the current secret, unless it is one
// already, and returns it as stored.
func (f *formSet) keep(form []byte, fold uint8, lead, trail bool) string {
	f.tmp = form[:0] // keep any growth of the scratch buffer
	if fold == foldURL && bytes.IndexByte(form, '%') < 0 || fold == foldJSON && !bytes.Contains(form, []byte(`\u`)) {
		fold = foldNone // no digits to fold: the same form as an exact one
	}
	for _, p := range f.pats[f.first:] {
		if p.text == string(form) && p.fold == fold && p.lead == lead && p.trail == trail {
			return p.text
		}
	}
	// The strings of the arena stay valid (and unchanged) should it grow.
	off := f.arena.Len()
	f.arena.Write(form)
	text := f.arena.String()[off:]
	f.pats = append(f.pats, pattern{text: text, fold: fold, lead: lead, trail: trail})
	return text
}

func isHexLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'f' }

type urlMode int

const (
	urlQuery      urlMode = iota // url.QueryEscape
	urlPath                      // url.PathEscape
	urlUnreserved                // all but RFC 3986's unreserved characters
	urlEvery                     // every byte
)

// unreserved reports whether r is one of RFC 3986's unreserved characters.
func unreserved(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.' || r == '~'
}

// appendURL appends s escaped as mode says, with lower-case hexadecimal
// digits (url.QueryEscape and url.PathEscape write upper case).
func appendURL(dst []byte, s string, mode urlMode) []byte {
	for i := range len(s) {
		c := s[i]
		keep := false
		switch {
		case mode == urlEvery:
		case unreserved(rune(c)):
			keep = true
		case mode == urlQuery && c == ' ':
			dst = append(dst, '+')
			continue
		case mode == urlPath:
			switch c {
			case '$', '&', '+', ':', '=', '@':
				keep = true
			}
		}
		if keep {
			dst = append(dst, c)
		} else {
			dst = append(dst, '%', lowerHex[c>>4], lowerHex[c&15])
		}
	}
	return dst
}

// jsonOpts says how appendJSON escapes.
type jsonOpts struct {
	html  bool // <, > and & as \u003c, \u003e, \u0026 (encoding/json's default)
	slash bool // '/' as `\/`
	ascii bool // every non-ASCII character as \uXXXX
	every bool // every character as \uXXXX
}

// appendJSON appends s as the body of a JSON string. Without options it
// writes what encoding/json writes with HTML escaping off: `\"`, `\\`, \b,
// \f, \n, \r, \t, other control characters, U+2028 and U+2029 as \u00XX or
// \u202X, and each byte of invalid UTF-8 as \ufffd.
func appendJSON(dst []byte, s string, o jsonOpts) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if o.every && c < utf8.RuneSelf {
			dst = append(dst, '\\', 'u', '0', '0', lowerHex[c>>4], lowerHex[c&15])
			i++
			continue
		}
		if c >= utf8.RuneSelf || o.every {
			r, size := utf8.DecodeRuneInString(s[i:])
			if o.every || o.ascii || r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				dst = appendUnicodeEscape(dst, r)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\' || c == '/' && o.slash:
			dst = append(dst, '\\', c)
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20 || o.html && (c == '<' || c == '>' || c == '&'):
			dst = appendUnicodeEscape(dst, rune(c))
		default:
			dst = append(dst, c)
		}
		i++
	}
	return dst
}

// jsonEscapes reports whether some JSON encoder escapes r in a string.
func jsonEscapes(r rune) bool {
	return r < 0x20 || r >= utf8.RuneSelf || r == '"' || r == '\\' || r == '/' || r == '<' || r == '>' || r == '&'
}

// appendUnicodeEscape appends r as \uXXXX, or as a surrogate pair of them.
func appendUnicodeEscape(dst []byte, r rune) []byte {
	u1, u2 := utf16.EncodeRune(r)
	if u1 == utf8.RuneError { // no surrogate pair needed
		u1, u2 = r, -1
	}
	for _, u := range [2]rune{u1, u2} {
		if u >= 0 {
			dst = append(dst, '\\', 'u', lowerHex[u>>12&15], lowerHex[u>>8&15], lowerHex[u>>4&15], lowerHex[u&15])
		}
	}
	return dst
}
