package pipeline

import (
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/wire"
)

// skeletonMax bounds a result's encoding without its text and its
// structured payload: ids are tokens of at most 128 characters, the
// worker id at most 256, the rest codes, numbers and field names.
const skeletonMax = 2 << 10

// EncodedLen is the size of r's encoded body.
func EncodedLen(r *wire.Result) int {
	data, err := r.MarshalJSON()
	if err != nil {
		return 1 << 62
	}
	return len(data)
}

// setText puts s into the value (ok results, with the truncation flags) or
// the error message of r.
func setText(r *wire.Result, s string, truncated bool, original int) {
	if !r.OK {
		r.Error = s
		return
	}
	r.Value, r.Truncated, r.OriginalChars = s, truncated, 0
	if truncated {
		r.OriginalChars = original
	}
}

// FitText sets text, cut to budget code points (0: no budget) and then as
// far as needed, as r's value (ok) or error message so that r encodes to at
// most limit bytes. finish turns the cut text into what is published (the
// untrusted wrap, template-token stripping, or nothing) and may make it
// longer; its last call is with the text published. The structured payload
// is kept when its JSON is at most structuredMax and at most half of limit
// (the text, what the LLM reads, always has the other half), and left out
// otherwise, or when even an empty text does not fit beside it; leaving it
// out sets StructuredOmitted. FitText reports false when not even an empty
// text fits (r's text is then unchanged).
func FitText(r *wire.Result, text string, budget int, finish func(string) string, limit, structuredMax int) bool {
	if finish == nil {
		finish = func(s string) string { return s }
	}
	if len(r.Structured) > min(structuredMax, limit/2) {
		r.Structured, r.StructuredOmitted = nil, true
	}
	if fitTextOnly(r, text, budget, finish, limit) {
		return true
	}
	if r.Structured != nil {
		r.Structured, r.StructuredOmitted = nil, true
		return fitTextOnly(r, text, budget, finish, limit)
	}
	return false
}

// fitTextOnly is fitText with the structured payload as it is.
func fitTextOnly(r *wire.Result, text string, budget int, finish func(string) string, limit int) bool {
	body, truncated, original := shape.Trim(text, budget)
	probe := *r
	s := finish(body)
	setText(&probe, s, truncated, original)
	// Most results are far below the limit: a text encodes to at most six
	// bytes per byte, and the other fields (tokens, codes, numbers, the
	// worker id) take well under skeletonMax, so no encoding is needed.
	if 6*len(s)+len(r.Structured)+skeletonMax <= limit || EncodedLen(&probe) <= limit {
		*r = probe
		return true
	}
	// The room of the text's JSON string: the encoded result with a
	// one-character text, less that text's three bytes. The text is cut
	// from here on: the truncation flags take their room too.
	setText(&probe, "x", true, original)
	avail := limit - (EncodedLen(&probe) - 3)
	target := avail
	for range 32 {
		if target < 2 {
			break
		}
		body, truncated, original = shape.TrimFit(text, budget, target)
		s = finish(body)
		n := shape.JSONStringLen(s)
		if n <= avail {
			setText(r, s, truncated, original)
			return true
		}
		target -= max(n-avail, 16)
	}
	return false
}
