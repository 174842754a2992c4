package shape

import (
	"strconv"
	"unicode/utf8"
)

// JSONStringLen returns the length in bytes of s encoded as a JSON string by
// encoding/json with HTML escaping (as json.Marshal encodes it), quotes
// included: "<", ">", "&", control characters other than \b \f \n \r \t,
// U+2028, U+2029 and each byte of invalid UTF-8 take six bytes, a quote, a
// backslash and \b \f \n \r \t two.
func JSONStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c, size := jsonRuneLen(s[i:])
		n += c
		i += size
	}
	return n
}

// jsonRuneLen returns the encoded length of the first code point (or
// invalid byte) of s, and its length in s.
func jsonRuneLen(s string) (encoded, size int) {
	if b := s[0]; b < utf8.RuneSelf {
		switch {
		case b == '\\' || b == '"' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
			return 2, 1
		case b < 0x20 || b == '<' || b == '>' || b == '&':
			return 6, 1
		}
		return 1, 1
	}
	r, size := utf8.DecodeRuneInString(s)
	switch {
	case r == utf8.RuneError && size == 1:
		return 6, 1
	case r == '\u2028' || r == '\u2029':
		return 6, size
	}
	return size, size
}

// TrimFit applies a result budget like Trim and, at the same time, a size
// limit: the returned text, encoded as a JSON string (JSONStringLen, quotes
// included), takes at most maxJSON bytes. When s has at most budget code
// points (or budget <= 0) and fits maxJSON, it is returned unchanged.
// Otherwise it is cut to its longest prefix of at most budget code points
// that, followed by Trim's marker "\n[truncated — <N> chars total]" (N the
// length of s in code points), fits maxJSON; truncated is true. When not
// even the marker fits, the result is "" with truncated true. original is
// the length of s in code points in every case. TrimFit never splits a code
// point.
func TrimFit(s string, budget, maxJSON int) (out string, truncated bool, original int) {
	original = utf8.RuneCountInString(s)
	if (budget <= 0 || original <= budget) && JSONStringLen(s) <= maxJSON {
		return s, false, original
	}
	marker := "\n[truncated — " + strconv.Itoa(original) + " chars total]"
	room := maxJSON - JSONStringLen(marker) // the marker's quotes are the text's
	if room < 0 {
		return "", true, original
	}
	used, count, end := 0, 0, 0
	for end < len(s) && (budget <= 0 || count < budget) {
		c, size := jsonRuneLen(s[end:])
		if used+c > room {
			break
		}
		used += c
		end += size
		count++
	}
	return s[:end] + marker, true, original
}
