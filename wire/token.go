package wire

import "fmt"

// MaxTokenLen is the longest token allowed in a subject.
const MaxTokenLen = 128

// ValidToken reports whether s may be used as a subject token (a call id,
// batch id, tool name, personality or pool): it matches
// ^[A-Za-z0-9_-]{1,128}$, so no '.', '*', '>' or white space can reach a
// subject.
func ValidToken(s string) bool {
	if len(s) == 0 || len(s) > MaxTokenLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// CheckToken returns an error naming what (e.g. "call_id") when s is not a
// valid token.
func CheckToken(what, s string) error {
	if ValidToken(s) {
		return nil
	}
	if s == "" {
		return fmt.Errorf("%s must not be empty", what)
	}
	return fmt.Errorf("%s %q must match ^[A-Za-z0-9_-]{1,128}$", what, truncateForError(s))
}

func truncateForError(s string) string {
	const limit = 64
	r := []rune(s)
	if len(r) <= limit {
		return s
	}
	return string(r[:limit]) + "..."
}
