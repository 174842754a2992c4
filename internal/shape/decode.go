package shape

import (
	"html"
	"math/bits"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
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
	switch ref { // those HTML escapers write, without a map lookup
	case "&amp;":
		return append(dst, '&'), j + 1
	case "&lt;":
		return append(dst, '<'), j + 1
	case "&gt;":
		return append(dst, '>'), j + 1
	case "&quot;":
		return append(dst, '"'), j + 1
	case "&nbsp;":
		return append(dst, "\u00a0"...), j + 1
	}
	if r, ok := (*knownRefs.Load())[ref]; ok {
		return append(dst, r...), j + 1
	}
	// The html package's table: a known name (with its ';') becomes one or
	// two code points; an unknown one is kept, or loses only a legacy
	// prefix (&ampx; -> "&x;"), which is no reference of the whole.
	r := html.UnescapeString(ref)
	if r == ref || len(r) > 1 && r[len(r)-1] == ';' {
		return dst, -1
	}
	learnRef(ref, r)
	return append(dst, r...), j + 1
}

// knownRefs maps the named references met so far (at most the html
// package's table, some 2,200 names) to what they stand for: reading one
// again costs a lookup, not a call of the html package. The map is never
// changed: learnRef replaces it.
var (
	knownRefs atomic.Pointer[map[string]string]
	learning  sync.Mutex
)

func init() { knownRefs.Store(&map[string]string{}) }

// learnRef adds ref, which stands for r, to knownRefs.
func learnRef(ref, r string) {
	learning.Lock()
	defer learning.Unlock()
	old := *knownRefs.Load()
	if _, ok := old[ref]; ok {
		return
	}
	known := make(map[string]string, len(old)+1)
	for k, v := range old {
		known[k] = v
	}
	known[strings.Clone(ref)] = r
	knownRefs.Store(&known)
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

// escape is an escape of a text in its decoded view: its first byte in the
// text and the first byte it stands for in the view (its end and what it
// stands for are read again from the text when needed). Texts are shorter
// than 2 GiB.
type escape struct{ start, at int32 }

// region is a part of a text with escapes in it and the context around
// them, and its decoded view.
type region struct {
	start, end  int // in the text
	at, atEnd   int // in the view
	first, last int // its escapes: escapes[first:last]
}

// decodedView is the decoded view of the parts of a text around the
// escapes that may be part of a form: each such escape, with reach bytes
// of text on either side, in one region (escapes whose contexts meet share
// one). An escape that stands for bytes no form has cannot be part of an
// occurrence: it ends the context.
type decodedView struct {
	s       string // the text
	view    string
	escapes []escape
	regions []region
	buf     *viewBuffers
}

// viewBuffers are the buffers a decoded view is built in, kept for the
// next one.
type viewBuffers struct {
	view    []byte
	escapes []escape
	regions []region
}

var viewPool = sync.Pool{New: func() any { return new(viewBuffers) }}

// maxDecoded bounds the bytes an escape stands for (a named reference of
// two code points).
const maxDecoded = 8

// newDecodedView returns the decoded view of s's escapes that stand for
// at least one byte that inForm holds, each with reach bytes of context on
// either side; it has no regions when s has no such escape. s is read
// once, with a vectorised search for each of '%', '\\' and '&'. Call
// release when done with the view.
func newDecodedView(s string, reach int, inForm *[256]bool) *decodedView {
	bufs := viewPool.Get().(*viewBuffers)
	dv := &decodedView{s: s, buf: bufs, escapes: bufs.escapes[:0], regions: bufs.regions[:0]}
	var (
		view    = bufs.view[:0]
		scratch [maxDecoded]byte
		last    = -1 // end of the last escape of the open region; -1: none open
		cut     = 0  // end of the last escape that no form has
		intro   = introducers{s: s, next: [3]int{-2, -2, -2}}
	)
	closeRegion := func(end int) {
		rg := &dv.regions[len(dv.regions)-1]
		rg.end, rg.last = min(len(s), end), len(dv.escapes)
		view = append(view, s[last:rg.end]...)
		rg.atEnd = len(view)
		last = -1
	}
	for i := 0; ; {
		p := intro.from(i)
		if p < 0 {
			break
		}
		dec, end := unescapeAt(scratch[:0], s, p, schemeAll)
		if end < 0 {
			i = p + 1
			continue
		}
		i = end
		if !anyIn(dec, inForm) {
			if last >= 0 {
				closeRegion(min(p, last+reach))
			}
			cut = end
			continue
		}
		if last >= 0 && p-last > 2*reach {
			closeRegion(last + reach)
		}
		if last < 0 {
			start := max(p-reach, cut)
			if n := len(dv.regions); n > 0 {
				start = max(start, dv.regions[n-1].end)
			}
			dv.regions = append(dv.regions, region{start: start, at: len(view), first: len(dv.escapes)})
			view = append(view, s[start:p]...)
		} else {
			view = append(view, s[last:p]...)
		}
		dv.escapes = append(dv.escapes, escape{start: int32(p), at: int32(len(view))})
		view = append(view, dec...)
		last = end
	}
	if last >= 0 {
		closeRegion(last + reach)
	}
	dv.view = string(view)
	bufs.view = view
	return dv
}

// release gives the view's buffers back for another view.
func (dv *decodedView) release() {
	if cap(dv.buf.view) <= 1<<20 { // keep no buffer of a huge text
		dv.buf.escapes, dv.buf.regions = dv.escapes, dv.regions
		viewPool.Put(dv.buf)
	}
	dv.buf = nil
}

// anyIn reports whether set holds a byte of b.
func anyIn(b []byte, set *[256]bool) bool {
	for _, c := range b {
		if set[c] {
			return true
		}
	}
	return false
}

// introducers finds the bytes that may start an escape.
type introducers struct {
	s    string
	next [3]int // of '%', '\\', '&' from where last asked; -1: none, -2: to look for
}

// from returns the position of the first '%', '\\' or '&' of s from i on,
// or -1. Calls ask for increasing i.
func (in *introducers) from(i int) int {
	s := in.s
	// Where escapes are dense, the next one is near: a few words read
	// cost less than three calls of a vectorised search.
	for j := i; j < i+32 && j+8 <= len(s); j += 8 {
		x := uint64(s[j]) | uint64(s[j+1])<<8 | uint64(s[j+2])<<16 | uint64(s[j+3])<<24 |
			uint64(s[j+4])<<32 | uint64(s[j+5])<<40 | uint64(s[j+6])<<48 | uint64(s[j+7])<<56
		if m := hasByte(x, '%') | hasByte(x, '\\') | hasByte(x, '&'); m != 0 {
			return j + bits.TrailingZeros64(m)/8
		}
	}
	p := -1
	for k, c := range [3]byte{'%', '\\', '&'} {
		if in.next[k] == -2 || in.next[k] >= 0 && in.next[k] < i {
			if in.next[k] = strings.IndexByte(s[i:], c); in.next[k] >= 0 {
				in.next[k] += i
			}
		}
		if in.next[k] >= 0 && (p < 0 || in.next[k] < p) {
			p = in.next[k]
		}
	}
	return p
}

// hasByte has the top bit of each byte of x that is c set, and maybe of
// bytes after the first such (never before it).
func hasByte(x uint64, c byte) uint64 {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	y := x ^ ones*uint64(c)
	return (y - ones) &^ y & tops
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
	k := sort.Search(len(escapes), func(k int) bool { return int(escapes[k].at) > v }) - 1
	if k < 0 {
		o := rg.start + v - rg.at
		return o, o + 1
	}
	e := escapes[k]
	var scratch [maxDecoded]byte
	dec, end := unescapeAt(scratch[:0], dv.s, int(e.start), schemeAll)
	if v < int(e.at)+len(dec) {
		return int(e.start), end
	}
	o := end + v - (int(e.at) + len(dec))
	return o, o + 1
}
