package shape

import (
	"html"
	"sort"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The decoded view (docs/capabilities.md, "Result shaping"): a text with
// escapes in it is also searched with every escape replaced by what it
// stands for, so that a secret written with any mix of escaped and literal
// characters is found and its original span redacted. An escape is one of
//   - %XX, two hexadecimal digits in either case: one byte;
//   - a JSON escape: \uXXXX (either case; a surrogate pair as one code
//     point), \" \\ \/ \b \f \n \r \t;
//   - an HTML character reference ending in ';': &#NN; (decimal), &#xHH;
//     or &#XHH; (hexadecimal), standing for that code point, or a named
//     one (&plus; &amp; &sol; ...) as the standard library's html package
//     knows them.
//
// The text is read once, left to right: what an escape stands for is never
// read again (%2541 is "%41", not "A"), and an escape-looking sequence that
// is not one of these stays as it is.

// scheme is a set of escape kinds.
type scheme uint8

const (
	schemePercent scheme = 1 << iota // %XX
	schemeJSON                       // \uXXXX and \" \\ ...
	schemeHTML                       // &#NN; &#xHH; &name;
	schemeAll     = schemePercent | schemeJSON | schemeHTML
)

// maxEntityName bounds the name of a named character reference (the
// longest the html package knows has 31 letters).
const maxEntityName = 32

// unescapeAt appends to dst what the escape of a scheme in which that
// starts at s[i] stands for, and returns its end; end is -1, and dst
// unchanged, when no such escape starts at i.
func unescapeAt(dst []byte, s string, i int, which scheme) (_ []byte, end int) {
	switch s[i] {
	case '%':
		if which&schemePercent != 0 && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			return append(dst, unhex(s[i+1])<<4|unhex(s[i+2])), i + 3
		}
	case '\\':
		if which&schemeJSON != 0 {
			return unescapeJSON(dst, s, i)
		}
	case '&':
		if which&schemeHTML != 0 {
			return unescapeHTML(dst, s, i)
		}
	}
	return dst, -1
}

// unescapeJSON is unescapeAt for a JSON escape at s[i] == '\\'. A lone
// surrogate is no escape: it stands for no character of a secret.
func unescapeJSON(dst []byte, s string, i int) ([]byte, int) {
	if i+1 >= len(s) {
		return dst, -1
	}
	switch c := s[i+1]; c {
	case '"', '\\', '/':
		return append(dst, c), i + 2
	case 'b':
		return append(dst, '\b'), i + 2
	case 'f':
		return append(dst, '\f'), i + 2
	case 'n':
		return append(dst, '\n'), i + 2
	case 'r':
		return append(dst, '\r'), i + 2
	case 't':
		return append(dst, '\t'), i + 2
	case 'u':
		r, ok := hex4(s, i+2)
		switch {
		case !ok || utf16.IsSurrogate(r) && r >= 0xdc00:
			return dst, -1
		case !utf16.IsSurrogate(r):
			return utf8.AppendRune(dst, r), i + 6
		}
		// A high surrogate: a low one must follow.
		if i+7 < len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
			if lo, ok := hex4(s, i+8); ok && 0xdc00 <= lo && lo <= 0xdfff {
				return utf8.AppendRune(dst, utf16.DecodeRune(r, lo)), i + 12
			}
		}
	}
	return dst, -1
}

// unescapeHTML is unescapeAt for a character reference at s[i] == '&'.
func unescapeHTML(dst []byte, s string, i int) ([]byte, int) {
	j := i + 1
	if j < len(s) && s[j] == '#' {
		j++
		base := int64(10)
		if j < len(s) && s[j]|0x20 == 'x' {
			base = 16
			j++
		}
		digits := j
		var r int64
		for ; j < len(s) && j-digits < 10 && (base == 16 && isHex(s[j]) || '0' <= s[j] && s[j] <= '9'); j++ {
			r = r*base + int64(unhex(s[j]))
		}
		if j == digits || j >= len(s) || s[j] != ';' || r > utf8.MaxRune || utf16.IsSurrogate(rune(r)) {
			return dst, -1
		}
		return utf8.AppendRune(dst, rune(r)), j + 1
	}
	for ; j < len(s) && j-i <= maxEntityName && isAlnum(s[j]); j++ {
	}
	if j == i+1 || !isLetter(s[i+1]) || j >= len(s) || s[j] != ';' {
		return dst, -1
	}
	ref := s[i : j+1]
	// The html package's table: a known name (with its ';') becomes one or
	// two code points; an unknown one is kept, or loses only a legacy
	// prefix (&ampx; -> "&x;"), which is no reference of the whole.
	r := html.UnescapeString(ref)
	if r == ref || len(r) > 1 && r[len(r)-1] == ';' {
		return dst, -1
	}
	return append(dst, r...), j + 1
}

// hex4 returns the value of the four hexadecimal digits at s[i:].
func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		if !isHex(c) {
			return 0, false
		}
		r = r<<4 | rune(unhex(c))
	}
	return r, true
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || isHexLetter(c) }

// unhex returns the value of the hexadecimal digit c (or decimal digit).
func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c | 0x20 - 'a' + 10
}

func isLetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

func isAlnum(c byte) bool { return isLetter(c) || '0' <= c && c <= '9' }

// unescapeString returns s with the escapes of the schemes in which
// replaced, read left to right as in the decoded view.
func unescapeString(s string, which scheme) string {
	var b []byte
	last := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '%' && c != '\\' && c != '&' {
			continue
		}
		n := len(b)
		b = append(b, s[last:i]...)
		var end int
		if b, end = unescapeAt(b, s, i, which); end < 0 {
			b = b[:n]
			continue
		}
		last, i = end, end-1
	}
	if b == nil {
		return s
	}
	return string(append(b, s[last:]...))
}

// escape is an escape of a text in its decoded view.
type escape struct {
	start, end int // its bytes in the text
	at, n      int // the bytes it stands for in the view
}

// region is a part of a text with escapes in it and the context around
// them, and its decoded view.
type region struct {
	start, end  int // in the text
	at, atEnd   int // in the view
	first, last int // its escapes: escapes[first:last]
}

// decodedView is the decoded view of the parts of a text around its
// escapes: each escape, with reach bytes of text on either side, in one
// region (escapes whose contexts meet share one).
type decodedView struct {
	view    string
	escapes []escape
	regions []region
}

// newDecodedView returns the decoded view of s's escapes, each with reach
// bytes of context on either side; it has no regions when s has no escape.
func newDecodedView(s string, reach int) *decodedView {
	dv := &decodedView{}
	var side []byte            // what the escapes stand for, one after the other
	next := [3]int{-2, -2, -2} // of '%', '\\', '&' from i on; -1: none, -2: to look for
	for i := 0; ; {
		p := -1
		for k, c := range [3]byte{'%', '\\', '&'} {
			if next[k] == -2 || next[k] >= 0 && next[k] < i {
				if next[k] = strings.IndexByte(s[i:], c); next[k] >= 0 {
					next[k] += i
				}
			}
			if next[k] >= 0 && (p < 0 || next[k] < p) {
				p = next[k]
			}
		}
		if p < 0 {
			break
		}
		at := len(side)
		var end int
		if side, end = unescapeAt(side, s, p, schemeAll); end < 0 {
			i = p + 1
			continue
		}
		dv.escapes = append(dv.escapes, escape{start: p, end: end, at: at, n: len(side) - at})
		i = end
	}
	if len(dv.escapes) == 0 {
		return dv
	}

	// The regions, and their views one after the other.
	buf := make([]byte, 0, min(len(s), len(side)+2*reach*len(dv.escapes)))
	for k := range dv.escapes {
		e := &dv.escapes[k]
		if k == 0 || e.start-dv.escapes[k-1].end > 2*reach {
			if k > 0 {
				dv.closeRegion(s, k, reach, &buf)
			}
			start := max(0, e.start-reach)
			dv.regions = append(dv.regions, region{start: start, at: len(buf), first: k})
			buf = append(buf, s[start:e.start]...)
		} else {
			buf = append(buf, s[dv.escapes[k-1].end:e.start]...)
		}
		from := e.at
		e.at = len(buf)
		buf = append(buf, side[from:from+e.n]...)
	}
	dv.closeRegion(s, len(dv.escapes), reach, &buf)
	dv.view = string(buf)
	return dv
}

// closeRegion ends the last region after escapes[:last] with reach bytes
// of context.
func (dv *decodedView) closeRegion(s string, last, reach int, buf *[]byte) {
	rg := &dv.regions[len(dv.regions)-1]
	from := dv.escapes[last-1].end
	rg.end, rg.last = min(len(s), from+reach), last
	*buf = append(*buf, s[from:rg.end]...)
	rg.atEnd = len(*buf)
}

// text returns the view of rg.
func (dv *decodedView) text(rg *region) string { return dv.view[rg.at:rg.atEnd] }

// original returns the span of the text that the bytes [start, end) of
// rg's view (end > start) come from: an escape one of whose bytes is in
// the span is in it whole.
func (dv *decodedView) original(rg *region, start, end int) span {
	from, _ := dv.source(rg, rg.at+start)
	_, to := dv.source(rg, rg.at+end-1)
	return span{from, to}
}

// source returns the bytes of the text that byte v of the view comes from:
// an escape, or one byte.
func (dv *decodedView) source(rg *region, v int) (start, end int) {
	escapes := dv.escapes[rg.first:rg.last]
	k := sort.Search(len(escapes), func(k int) bool { return escapes[k].at > v }) - 1
	if k < 0 {
		o := rg.start + v - rg.at
		return o, o + 1
	}
	e := &escapes[k]
	if v < e.at+e.n {
		return e.start, e.end
	}
	o := e.end + v - (e.at + e.n)
	return o, o + 1
}
