package wire

// Code is the failure class of a result (Result.Code, tool.Result.Code).
type Code string

// The four result codes of docs/protocol.md.
const (
	// CodeInputInvalid: the call or its arguments are wrong; asking again
	// the same way fails the same way.
	CodeInputInvalid Code = "input_invalid"
	// CodeNotAvailable: the call may not run here or now (personality,
	// toolset, permission, rate limit, availability, cancellation).
	CodeNotAvailable Code = "not_available"
	// CodeExecutionFailed: the tool ran and failed, or the call timed out.
	CodeExecutionFailed Code = "execution_failed"
	// CodeStaleWrite: a write was refused because the file changed since it
	// was last read in the session.
	CodeStaleWrite Code = "STALE_WRITE"
)

// Valid reports whether c is one of the four codes.
func (c Code) Valid() bool {
	switch c {
	case CodeInputInvalid, CodeNotAvailable, CodeExecutionFailed, CodeStaleWrite:
		return true
	}
	return false
}

// Audience is who a progress event is for; it is also a subject token, so
// a reader that may subscribe to one audience never receives another's
// events.
type Audience string

// The three audiences. An empty Audience in a tool's progress means
// AudienceInternal.
const (
	// AudienceInternal is for the agent backend; the default.
	AudienceInternal Audience = "internal"
	// AudienceUser is for the end user (an MCP client's progress, a chat UI).
	AudienceUser Audience = "user"
	// AudienceDashboard is for operators' dashboards.
	AudienceDashboard Audience = "dashboard"
)

// Valid reports whether a is one of the three audiences.
func (a Audience) Valid() bool {
	return a == AudienceInternal || a == AudienceUser || a == AudienceDashboard
}
