package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"
	"unicode/utf8"
)

// DecodeError reports why a call body was refused. Field names the offending
// field ("" when the body as a whole is bad). CallID is the call's id when it
// could be read and is a valid token: then the call is answered with an
// input_invalid result; otherwise it is undecodable and goes to the DLQ only.
type DecodeError struct {
	CallID string
	// BatchID is the call's batch_id when it could be read and is a valid
	// token, else "": the result then goes to
	// <p>.result.<personality>.<call>.<call>.
	BatchID string
	Field   string
	Reason  string
}

// Error returns a message readable by an LLM, e.g.
// `invalid call: field "timeout_ms" must be an integer greater than 0`.
func (e *DecodeError) Error() string {
	if e.Field == "" {
		return "invalid call: " + e.Reason
	}
	return fmt.Sprintf("invalid call: field %q %s", e.Field, e.Reason)
}

// Undecodable reports whether the call has no usable call_id, so no result can be sent.
func (e *DecodeError) Undecodable() bool { return e.CallID == "" }

// DecodeCall decodes and checks a call body strictly: every known field must
// have its documented type and range; unknown fields are ignored. The error is
// always a *DecodeError.
func DecodeCall(data []byte) (Call, error) {
	if len(data) > MaxCallBytes {
		return Call{}, &DecodeError{Reason: fmt.Sprintf("call is %d bytes, more than the 1 MiB limit", len(data))}
	}
	fields, ok := topLevelFields(data)
	if !ok {
		return Call{}, &DecodeError{Reason: "body must be a JSON object"}
	}
	d := decoder{fields: fields}
	var c Call
	// call_id first: every later error carries it so the call can be answered.
	c.CallID = d.str("call_id", true)
	if d.err != nil {
		return Call{}, d.err
	}
	if !ValidToken(c.CallID) {
		return Call{}, &DecodeError{Field: "call_id", Reason: "must match ^[A-Za-z0-9_-]{1,128}$"}
	}
	d.callID = c.CallID
	c.BatchID = d.token("batch_id", false)
	if d.err == nil {
		d.batchID = c.BatchID
	}
	c.Tool = d.token("tool", true)
	c.Args = d.object("args", true)
	c.SessionID = d.str("session_id", true)
	c.SessionKey = d.str("session_key", false)
	c.Platform = d.str("platform", false)
	c.WorkingDir = d.str("working_dir", false)
	if c.WorkingDir != "" && !filepath.IsAbs(c.WorkingDir) {
		d.fail("working_dir", "must be an absolute path")
	}
	c.PersonalityID = d.token("personality_id", false)
	c.AgentID = d.str("agent_id", false)
	c.TeamID = d.str("team_id", false)
	c.MemoryScopeID = d.str("memory_scope_id", false)
	c.CurrentTurn = d.integer("current_turn", 0)
	c.MessageCount = d.integer("message_count", 0)
	c.ResultBudgetChars = d.integer("result_budget_chars", 1)
	c.DryRun = d.boolean("dry_run")
	c.Deadline = d.time("deadline")
	c.TimeoutMS = d.integer("timeout_ms", 1)
	c.ExcludeTools = d.strings("exclude_tools")
	c.NarrowTools = d.strings("narrow_tools")
	if d.err != nil {
		return Call{}, d.err
	}
	return c, nil
}

// EncodeCall marshals a call; it is the inverse of DecodeCall for valid calls.
func EncodeCall(c *Call) ([]byte, error) { return json.Marshal(c) }

type decoder struct {
	fields  map[string]json.RawMessage
	callID  string
	batchID string
	err     *DecodeError
}

func (d *decoder) fail(field, reason string) {
	if d.err == nil {
		d.err = &DecodeError{CallID: d.callID, BatchID: d.batchID, Field: field, Reason: reason}
	}
}

// raw returns the field's JSON, or nil when absent or null.
func (d *decoder) raw(field string, required bool) json.RawMessage {
	v, ok := d.fields[field]
	if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
		if required {
			d.fail(field, "is required")
		}
		return nil
	}
	return v
}

func (d *decoder) str(field string, required bool) string {
	v := d.raw(field, required)
	if v == nil {
		return ""
	}
	s, ok := plainString(v)
	if !ok && json.Unmarshal(v, &s) != nil {
		d.fail(field, "must be a string")
		return ""
	}
	if required && s == "" {
		d.fail(field, "must not be empty")
	}
	return s
}

func (d *decoder) token(field string, required bool) string {
	s := d.str(field, required)
	if s != "" && !ValidToken(s) {
		d.fail(field, "must match ^[A-Za-z0-9_-]{1,128}$")
	}
	return s
}

func (d *decoder) object(field string, required bool) json.RawMessage {
	v := d.raw(field, required)
	if v == nil {
		return nil
	}
	// The body as a whole was validated as JSON by DecodeCall, so a value
	// that starts with '{' is an object: no need to decode it again.
	v = bytes.TrimSpace(v)
	if v[0] != '{' {
		d.fail(field, "must be a JSON object")
		return nil
	}
	return v
}

// plainString returns the string of a JSON string literal taken from a
// validated document when it needs no decoding: no escape and valid UTF-8
// (json.Unmarshal would replace invalid bytes). ok is false otherwise, and
// the caller decodes it with json.Unmarshal.
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	body := v[1 : len(v)-1]
	if bytes.IndexByte(body, '\\') >= 0 || !utf8.Valid(body) {
		return "", false
	}
	return string(body), true
}

func (d *decoder) integer(field string, min int64) int64 {
	v := bytes.TrimSpace(d.raw(field, false))
	if len(v) == 0 {
		return 0
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var n json.Number
	reason := "must be an integer greater than 0"
	if min == 0 {
		reason = "must be an integer of at least 0"
	}
	if v[0] == '"' || dec.Decode(&n) != nil {
		d.fail(field, reason)
		return 0
	}
	i, err := n.Int64()
	if err != nil || i < min {
		d.fail(field, reason)
		return 0
	}
	return i
}

func (d *decoder) boolean(field string) bool {
	v := d.raw(field, false)
	if v == nil {
		return false
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		d.fail(field, "must be true or false")
	}
	return b
}

func (d *decoder) time(field string) *time.Time {
	v := d.raw(field, false)
	if v == nil {
		return nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		d.fail(field, "must be an RFC 3339 time string")
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		d.fail(field, "must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
		return nil
	}
	return &t
}

func (d *decoder) strings(field string) []string {
	v := d.raw(field, false)
	if v == nil {
		return nil
	}
	var ss []string
	if err := json.Unmarshal(v, &ss); err != nil {
		d.fail(field, "must be an array of strings")
		return nil
	}
	if ss == nil {
		ss = []string{}
	}
	return ss
}

// AsDecodeError returns err as a *DecodeError when it is one.
func AsDecodeError(err error) (*DecodeError, bool) {
	var de *DecodeError
	ok := errors.As(err, &de)
	return de, ok
}
