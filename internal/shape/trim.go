package shape

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// Trim applies a result budget (pipeline step 14) to a value or an error
// message. When s has more than budget code points it returns the first budget
// code points followed by "\n[truncated — <N> chars total]" (em dash U+2014, N
// the original length in code points, digits without separators) and
// truncated=true. Otherwise, and always when budget <= 0, it returns s
// unchanged and truncated=false. original is the length of s in code points in
// every case. Trim never splits a code point.
func Trim(s string, budget int) (out string, truncated bool, original int) {
	original = utf8.RuneCountInString(s)
	if budget <= 0 || original <= budget {
		return s, false, original
	}
	return s[:prefixBytes(s, budget)] + "\n[truncated — " + strconv.Itoa(original) + " chars total]", true, original
}

// Budget returns the budget of one call: the smaller of resultBudgetChars (the
// call's share of the turn budget) and maxResultChars (the tool's cap),
// ignoring a value <= 0; it returns 0, meaning no trim, when neither is set.
// A resultBudgetChars larger than the largest int is treated as the largest int.
func Budget(resultBudgetChars int64, maxResultChars int) int {
	rb := 0
	if resultBudgetChars > 0 {
		rb = int(min(resultBudgetChars, int64(math.MaxInt)))
	}
	switch {
	case rb > 0 && maxResultChars > 0:
		return min(rb, maxResultChars)
	case rb > 0:
		return rb
	case maxResultChars > 0:
		return maxResultChars
	default:
		return 0
	}
}
