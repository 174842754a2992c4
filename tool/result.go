package tool

// Code is the failure class of a result; the values equal the wire codes.
type Code string

// The four result codes.
const (
	CodeInputInvalid    Code = "input_invalid"
	CodeNotAvailable    Code = "not_available"
	CodeExecutionFailed Code = "execution_failed"
	CodeStaleWrite      Code = "STALE_WRITE"
)

// Result is what Execute returns: either ok with a value, or a failure with a
// code and a message for the LLM.
type Result struct {
	OK bool
	// Value is the LLM-ready text of an ok result.
	Value string
	// Structured is an optional machine-readable payload (a JSON object); it
	// survives the budget trim.
	Structured map[string]any
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
