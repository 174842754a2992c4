package protocol

import "github.com/capstanhq/capstan/wire"

// MaxTokenLen is the longest token allowed in a subject.
const MaxTokenLen = wire.MaxTokenLen

// ValidToken reports whether s may be used as a subject token (wire.ValidToken).
func ValidToken(s string) bool { return wire.ValidToken(s) }

// CheckToken returns an error naming what (e.g. "call_id") when s is not a
// valid token (wire.CheckToken).
func CheckToken(what, s string) error { return wire.CheckToken(what, s) }
