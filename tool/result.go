package tool

import "github.com/capstanhq/capstan/wire"

// Code is the failure class of a result: wire.Code, the type of a
// client.Result's Code too.
type Code = wire.Code

// The four result codes (wire.CodeInputInvalid, ...).
const (
	CodeInputInvalid    = wire.CodeInputInvalid
	CodeNotAvailable    = wire.CodeNotAvailable
	CodeExecutionFailed = wire.CodeExecutionFailed
	CodeStaleWrite      = wire.CodeStaleWrite
)

// Result is what Execute returns: either ok with a value, or a failure with a
// code and a message for the LLM.
type Result struct {
	OK bool
	// Value is the LLM-ready text of an ok result.
	Value string
	// Structured is an optional machine-readable payload (a JSON object); it
	// survives the budget trim, but not a result message that would be too
	// large: a payload over the worker's structured limit (256 KiB encoded
	// by default), or one that does not fit beside the value, is left out
	// of the message and, where blobs are allowed, stored by reference
	// (docs/protocol.md, "Result size").
	Structured map[string]any
	// Full is, when not empty, the complete output of which Value is a cut
	// (for example the whole text of a page whose Value stops at max_chars).
	// It is never shown to the LLM: the worker stores it by reference (a
	// blob) when blobs are allowed for the call and it is large enough
	// (docs/protocol.md, "Large outputs by reference"), after redacting it
	// like Value. Without Full, the blob of a cut value is Value itself as
	// the tool returned it (before the reducer and the budget trim).
	Full string
	// CostUSD is the cost attributed to the call, if any.
	CostUSD *float64
	// Code and Error describe a failure.
	Code  Code
	Error string
}

// OK returns a successful result with value.
func OK(value string) Result { return Result{OK: true, Value: value} }

// Fail returns a failed result with code and message.
func Fail(code Code, msg string) Result { return Result{Code: code, Error: msg} }
