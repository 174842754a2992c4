package shape

import (
	"math/bits"
	"slices"
	"strings"
)

// Redactor removes the secret values a call resolved, and the encoded forms
// of those of at least [MinEncodedLen] bytes, from text that leaves the
// worker. It is built once for a set of secrets and is safe for concurrent
// use; the nil *Redactor redacts nothing.
//
// Forms of a secret s (docs/capabilities.md, "Result shaping"):
//   - s itself (the only form of a shorter secret);
//   - s reversed (bytes, and code points when they differ);
//   - hexadecimal, in either case;
//   - base64 in the standard and URL alphabets, padded or not, at any
//     offset within a longer encoded string: for each of the three byte
//     alignments, the run of characters that encodes only bits of s, and
//     with it the character on either side that mixes bits of s with its
//     neighbours', and any '=' padding;
//   - letter-spaced: s or s reversed with one and the same byte between
//     every two of its bytes ("s-e-c-r-e-t", "s e c r e t").
//
// The forms of a secret of MinEncodedLen bytes or more are also looked for
// in the decoded view of the text (decode.go): every %XX, JSON escape
// (\uXXXX, surrogate pairs, \" \\ \/ \n ...) and HTML character reference
// (&#43; &#x2B; &plus;) replaced by what it stands for, so that any mix of
// escaped and literal characters, of one scheme or several, is found; what
// is redacted is the span of the text the occurrence was decoded from,
// every escape one of whose bytes it holds included. The forms also
// include what the secret reads as in the decoded view when an escaper
// left escape-like text of the secret as it is, wrote a space as '+', or
// invalid UTF-8 as U+FFFD ([decodedForms]).
//
// Occurrences that overlap are replaced by one [Redacted], occurrences that
// touch by one each (see [Redact]).
type Redactor struct {
	given  []string // the secrets it was built for, as given
	short  []string // distinct secrets under MinEncodedLen bytes: literal only
	groups []*group // the others, at most maxGroupForms forms in each group
	// reach bounds the length of an occurrence of the groups' forms (with
	// the base64 characters around a run, and letter-spaced): the context
	// of an escape in the decoded view.
	reach int
	// inForm holds the bytes of the groups' forms (hexadecimal digits in
	// either case, and the base64 alphabet): an escape that stands for
	// none of them ends the context of others in the decoded view.
	inForm [256]bool
}

// group holds the forms of some secrets of MinEncodedLen bytes or more and
// the filter that finds them.
type group struct {
	spaced  []string // the secrets and their reverses
	minLong int      // length of the shortest secret
	pats    []pattern

	// The filter: every occurrence of a form of length L is sampled at
	// exactly one position i (a multiple of step) with i-start in [0, step),
	// since step <= L-gram+1. Entry e is the gram at offset e%step of
	// pats[e/step], for offsets [0, step), indexed by its case-folded value
	// in a chained hash table.
	step  int
	shift uint8    // bucket of key k: k*hashMul >> shift
	heads []uint16 // by bucket: 1 + its first entry, 0 for none
	keys  []uint32 // by entry: its case-folded gram
	next  []uint16 // by entry: 1 + the next entry of its bucket, 0 for none
}

const (
	// gram is the length of the substrings the filter samples.
	gram = 4
	// foldCase sets bit 5 of four bytes: an ASCII letter becomes lower case
	// (other bytes may change too; a match is then checked exactly).
	foldCase = 0x20202020
	hashMul  = 0x9E3779B1
	// maxEntries keeps entry numbers in a uint16.
	maxEntries = 1<<16 - 1
	// maxStep bounds the step: past it, the entries (forms × step) to
	// build cost more than the samples (text length / step) saved.
	maxStep = 64
	// maxGroupForms bounds the forms of a group (about 50 secrets), so
	// that step, at most maxEntries/forms, stays long.
	maxGroupForms = 1024
)

type span struct{ start, end int }

// NewRedactor returns the redactor of secrets. Empty secrets and
// duplicates are ignored.
func NewRedactor(secrets []string) *Redactor {
	r := &Redactor{given: slices.Clone(secrets)}
	var long []string
	for i, s := range secrets {
		switch {
		case s == "" || slices.Contains(secrets[:i], s):
		case len(s) < MinEncodedLen:
			r.short = append(r.short, s)
		default:
			long = append(long, s)
		}
	}
	for len(long) > 0 {
		var g *group
		g, long = newGroup(long)
		r.groups = append(r.groups, g)
		for _, p := range g.pats {
			r.reach = max(r.reach, len(p.text)+3)
			for i := range len(p.text) {
				r.inForm[p.text[i]] = true
				if p.hex {
					r.inForm[p.text[i]&^0x20] = true
				}
			}
		}
		for _, s := range g.spaced {
			r.reach = max(r.reach, 2*len(s)-1)
		}
	}
	if len(r.groups) > 0 {
		// The characters around a base64 run, and its padding.
		for _, c := range []byte(base64Chars) {
			r.inForm[c] = true
		}
	}
	return r
}

// newGroup returns the group of the first secrets of long (distinct, of
// MinEncodedLen bytes or more) and the secrets left for another group.
func newGroup(long []string) (*group, []string) {
	g := &group{}
	kinds := make([]secretKind, len(long))
	size, forms, n := 0, 0, 0
	for i, s := range long {
		kinds[i] = kindOf(s)
		b, f := kinds[i].size(len(s))
		if i > 0 && forms+f > maxGroupForms {
			break
		}
		size, forms, n = size+b, forms+f, i+1
	}
	var fs formSet
	fs.arena.Grow(size)
	fs.pats = make([]pattern, 0, forms)
	for i, s := range long[:n] {
		g.spaced = append(g.spaced, s, fs.add(s, kinds[i]))
		if g.minLong == 0 || len(s) < g.minLong {
			g.minLong = len(s)
		}
	}
	g.pats = fs.pats
	g.index()
	return g, long[n:]
}

// With returns a redactor of secrets: r itself when it was built for the
// same list, else a new one. A call's secrets only grow, so a caller that
// keeps the last redactor builds one per new secret.
func (r *Redactor) With(secrets []string) *Redactor {
	if r != nil && slices.Equal(r.given, secrets) {
		return r
	}
	return NewRedactor(secrets)
}

// index builds the filter over g.pats.
func (g *group) index() {
	minLen := len(g.pats[0].text)
	for _, p := range g.pats {
		minLen = min(minLen, len(p.text))
	}
	// A smaller step is as good for finding forms, with more samples and
	// fewer entries: a long secret (a key file, a service account) would
	// otherwise cost tables of 20 entries per byte at every call.
	g.step = max(1, min(minLen-gram+1, maxStep, maxEntries/len(g.pats)))
	n := len(g.pats) * g.step
	size := 1 << max(6, bits.Len(uint(2*n))) // a load factor under 1/2
	g.shift = uint8(32 - bits.TrailingZeros(uint(size)))
	g.heads = make([]uint16, size)
	g.keys = make([]uint32, n)
	g.next = make([]uint16, n)
	e := 0
	for _, p := range g.pats {
		for off := range g.step {
			key := load4(p.text, off) | foldCase
			h := key * hashMul >> g.shift
			g.keys[e], g.next[e] = key, g.heads[h]
			e++
			g.heads[h] = uint16(e)
		}
	}
}

// Redact returns s with every occurrence of a form of r's secrets replaced
// by [Redacted]. Occurrences are found in s as given, never inside an
// earlier replacement.
func (r *Redactor) Redact(s string) string {
	if r == nil || s == "" {
		return s
	}
	spans := r.find(s)
	if len(spans) == 0 {
		return s
	}
	return replace(s, spans)
}

// find returns the occurrences of the forms of r's secrets in s and, for
// those of MinEncodedLen bytes or more, in the decoded view of s: each
// occurrence there is the span of s it was decoded from.
func (r *Redactor) find(s string) []span {
	spans := r.findText(s)
	if len(r.groups) == 0 {
		return spans
	}
	dv := newDecodedView(s, r.reach, &r.inForm)
	defer dv.release()
	var found []span
	for k := range dv.regions {
		rg := &dv.regions[k]
		view := dv.text(rg)
		for _, g := range r.groups {
			found = g.scan(view, found[:0])
			for _, sp := range found {
				spans = append(spans, dv.original(rg, sp.start, sp.end))
			}
		}
	}
	return spans
}

// findText returns the occurrences in s, as it is, of the forms of r's
// secrets.
func (r *Redactor) findText(s string) []span {
	var spans []span
	for _, sec := range r.short {
		if len(sec) > len(s) {
			continue
		}
		for off := 0; off < len(s); {
			i := strings.Index(s[off:], sec)
			if i < 0 {
				break
			}
			spans = append(spans, span{off + i, off + i + len(sec)})
			off += i + 1 // overlapping occurrences too
		}
	}
	for _, g := range r.groups {
		spans = g.scan(s, spans)
	}
	return spans
}

// scan adds the occurrences in s of g.pats and of the letter-spaced long
// secrets to spans.
func (g *group) scan(s string, spans []span) []span {
	heads, keys, next := g.heads, g.keys, g.next
	shift, step := g.shift&31, g.step
	runs := spacedRuns{{last: -1}, {last: -1}}
	// Letter-spaced text is looked for at every other sample: a
	// letter-spaced secret (2L-1 >= 15 bytes) holds six bytes at a
	// multiple of 2*step, since step <= L-3.
	spaced := true
	i := 0
	for ; i+8 <= len(s); i += step {
		t := s[i : i+8]
		x := uint64(t[0]) | uint64(t[1])<<8 | uint64(t[2])<<16 | uint64(t[3])<<24 |
			uint64(t[4])<<32 | uint64(t[5])<<40 | uint64(t[6])<<48 | uint64(t[7])<<56
		key := uint32(x) | foldCase
		for e := heads[key*hashMul>>shift]; e != 0; e = next[e-1] {
			if keys[e-1] == key {
				spans = g.verify(s, i, int(e-1), spans)
			}
		}
		if spaced {
			// Three equal bytes two apart: a cheap test that ordinary
			// text seldom passes.
			if d := x ^ x>>16; d&0x00FF00FF == 0 || d&0xFF00FF00 == 0 {
				spans = g.spacedAt(s, i, x, &runs, spans)
			}
		}
		spaced = !spaced
	}
	for ; i+gram <= len(s); i += step { // the last samples, short of eight bytes
		x := loadTail(s, i)
		key := uint32(x) | foldCase
		for e := heads[key*hashMul>>shift]; e != 0; e = next[e-1] {
			if keys[e-1] == key {
				spans = g.verify(s, i, int(e-1), spans)
			}
		}
		if spaced && i+6 <= len(s) {
			spans = g.spacedAt(s, i, x, &runs, spans)
		}
		spaced = !spaced
	}
	return spans
}

// spacedRuns holds the last letter-spaced run handled, by parity of its
// separators' positions: a run is searched once, however many samples fall
// in it.
type spacedRuns [2]struct {
	c           byte
	first, last int
}

// spacedAt looks for letter-spaced text in the six bytes at i (x holds
// them, i+6 <= len(s)): three equal bytes two apart, each next to a
// different one. It searches each run it finds once.
func (g *group) spacedAt(s string, i int, x uint64, runs *spacedRuns, spans []span) []span {
	t, u := x^x>>16, x^x>>8 // byte k: s[i+k]^s[i+k+2], s[i+k]^s[i+k+1]
	even := t&0x00FF00FF == 0 && u&0x000000FF != 0 && u&0x00FF0000 != 0
	odd := t&0xFF00FF00 == 0 && u&0x0000FF00 != 0 && u&0xFF000000 != 0
	for _, sep := range [2]int{i, i + 1} {
		rn := &runs[sep&1]
		if sep == i && !even || sep > i && !odd || s[sep] == rn.c && rn.first <= sep && sep <= rn.last {
			continue
		}
		rn.c = s[sep]
		spans, rn.first, rn.last = g.letterSpaced(s, sep, spans)
	}
	return spans
}

// verify adds the occurrence of entry e's form that the gram at i would be
// part of, if it is in s.
func (g *group) verify(s string, i, e int, spans []span) []span {
	p := &g.pats[e/g.step]
	start := i - e%g.step
	if start < 0 || start+len(p.text) > len(s) || !p.at(s, start) {
		return spans
	}
	return append(spans, p.occurrence(s, start))
}

// letterSpaced adds the occurrences of g.spaced in the letter-spaced run
// whose separators are the bytes equal to s[sep] at sep±2k, and returns the
// positions of the run's first and last separators.
func (g *group) letterSpaced(s string, sep int, spans []span) (_ []span, first, last int) {
	c := s[sep]
	first, last = sep, sep
	for first >= 2 && s[first-2] == c {
		first -= 2
	}
	for last+2 < len(s) && s[last+2] == c {
		last += 2
	}
	lo, hi := first-1, last+1 // the run's characters: lo, lo+2, ..., hi
	if lo < 0 {
		lo += 2
	}
	if hi >= len(s) {
		hi -= 2
	}
	k := (hi-lo)/2 + 1
	if hi < lo || k < g.minLong {
		return spans, first, last
	}
	b := make([]byte, k)
	for j := range b {
		b[j] = s[lo+2*j]
	}
	chars := string(b)
	for _, sec := range g.spaced {
		for off := 0; off+len(sec) <= len(chars); {
			j := strings.Index(chars[off:], sec)
			if j < 0 {
				break
			}
			j += off
			spans = append(spans, span{lo + 2*j, lo + 2*(j+len(sec)-1) + 1})
			off = j + 1
		}
	}
	return spans, first, last
}

// replace returns s with each group of overlapping spans replaced by one
// [Redacted].
func replace(s string, spans []span) string {
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	b.Grow(len(s))
	last := 0 // end of the text already written
	for i := 0; i < len(spans); {
		start, end := spans[i].start, spans[i].end
		for i++; i < len(spans) && spans[i].start < end; i++ {
			end = max(end, spans[i].end)
		}
		b.WriteString(s[last:start])
		b.WriteString(Redacted)
		last = end
	}
	b.WriteString(s[last:])
	return b.String()
}

// base64Chars are the characters of both base64 alphabets and the padding.
const base64Chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_="

func isBase64(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_'
}

func load4(s string, i int) uint32 {
	_ = s[i+3]
	return uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
}

// loadTail returns the bytes of s from i on (at most eight) as a
// little-endian number.
func loadTail(s string, i int) uint64 {
	var x uint64
	for k := 0; k < 8 && i+k < len(s); k++ {
		x |= uint64(s[i+k]) << (8 * k)
	}
	return x
}
