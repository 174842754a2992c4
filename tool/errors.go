package tool

import (
	"errors"
	"strconv"
	"strings"
)

// Denial sentinels. Accessors return a *DenialError that matches one of these
// with errors.Is, so callers tell a policy denial from a breakage.
var (
	ErrHostNotAllowed    = errors.New("HOST_NOT_ALLOWED")
	ErrPathNotReachable  = errors.New("PATH_NOT_REACHABLE")
	ErrSecretNotDeclared = errors.New("SECRET_NOT_DECLARED")
	// ErrSecretDestination refuses a request that would send a secret to a
	// host the personality's secrets.send_to does not bind it to:
	// "SECRET_DESTINATION: this secret may not be sent to <host>".
	ErrSecretDestination = errors.New("SECRET_DESTINATION")
	ErrBinaryNotAllowed  = errors.New("BINARY_NOT_ALLOWED")
	ErrEnvNotAllowed     = errors.New("ENV_NOT_ALLOWED")
	ErrKVKeyInvalid      = errors.New("KV_KEY_INVALID")
)

// ErrUnavailable reports that a capability's backend (the bus that carries
// progress events, the KV store, the secrets backend) cannot answer now: an
// infrastructure fault, not a verdict on the call. A tool that gets such an
// error from an accessor or from Emit should return it (wrapped is fine):
// the worker then hands the call back for redelivery with backoff instead of
// answering it, and after MaxDeliver deliveries dead-letters it.
var ErrUnavailable = errors.New("capability backend unavailable")

// DenialError is a capability denial: a stable code (one of the sentinels) and
// a detail. Its message is "<CODE>: <detail>".
type DenialError struct {
	Kind   error
	Detail string
}

// Deny returns a *DenialError of kind (a sentinel) with detail.
func Deny(kind error, detail string) *DenialError { return &DenialError{Kind: kind, Detail: detail} }

// Error returns "<CODE>: <detail>".
func (e *DenialError) Error() string { return e.Kind.Error() + ": " + e.Detail }

// Is matches the sentinel of the denial's kind.
func (e *DenialError) Is(target error) bool { return target == e.Kind }

// DenialCode returns the stable code of err when it is a capability denial.
func DenialCode(err error) (string, bool) {
	var d *DenialError
	if errors.As(err, &d) {
		return d.Kind.Error(), true
	}
	for _, s := range []error{ErrHostNotAllowed, ErrPathNotReachable, ErrSecretNotDeclared, ErrSecretDestination, ErrBinaryNotAllowed, ErrEnvNotAllowed, ErrKVKeyInvalid} {
		if errors.Is(err, s) || strings.HasPrefix(err.Error(), s.Error()+": ") {
			return s.Error(), true
		}
	}
	return "", false
}

// ErrSecretValueInvalid is wrapped by the *SecretHeaderError of a secret
// header whose resolved value cannot be sent in an HTTP header (it holds a
// line break, NUL or another control character). The message never holds
// the value.
var ErrSecretValueInvalid = errors.New("the secret's value cannot be sent in an HTTP header: it contains a line break, NUL or another control character")

// SecretHeaderError reports a secret header of a Request (Request.SecretHeaders)
// that could not be built: an invalid header name or template, a ref
// without a value (the secrets backend's error, wrapped so errors.Is
// matches it, e.g. an unavailable backend), or a value that cannot be sent
// in a header (ErrSecretValueInvalid). Nothing was sent. It never holds a
// ref or a value. Policy refusals are not SecretHeaderErrors but
// *DenialErrors (SECRET_NOT_DECLARED, SECRET_DESTINATION).
type SecretHeaderError struct {
	// Header is the header name as the request gave it.
	Header string
	Err    error
}

// Error returns `secret header "<Header>": <Err>`.
func (e *SecretHeaderError) Error() string {
	return "secret header " + strconv.Quote(e.Header) + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *SecretHeaderError) Unwrap() error { return e.Err }

// ErrLimitReached is matched (errors.Is) by the *LimitError a Runner
// returns when a ceiling of the call killed one of its processes.
var ErrLimitReached = errors.New("process limit reached")

// LimitError is returned by Runner.Run, with the result captured so far,
// when the call's memory ceiling killed one of its processes. Its message
// is the spec's: "Process killed: <limit> reached", for example
// "Process killed: memory limit 512MiB reached"; a tool that does not
// handle it ends execution_failed with that message.
type LimitError struct {
	// Limit names the ceiling and its size: "memory limit 512MiB".
	Limit string
}

// Error returns "Process killed: <Limit> reached".
func (e *LimitError) Error() string { return "Process killed: " + e.Limit + " reached" }

// Is reports whether target is ErrLimitReached.
func (e *LimitError) Is(target error) bool { return target == ErrLimitReached }
