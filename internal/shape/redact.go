package shape

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/capstanhq/capstan/tool"
)

// Redacted replaces every secret value in what leaves the worker.
const Redacted = "[REDACTED]"

// Redact replaces every occurrence in s of each non-empty value of secrets
// by [Redacted], and for a value of at least [MinEncodedLen] bytes every
// occurrence of its encoded forms too (see [Redactor]). Occurrences are
// found in s as given, never inside an earlier replacement. Occurrences that
// overlap (of one secret or of several, of one form or of several) are
// replaced together by a single [Redacted], so no byte of any of them
// survives; occurrences that merely touch are replaced one by one ("abab"
// with secret "ab" becomes "[REDACTED][REDACTED]"). Where one secret
// contains another, the longer one is therefore removed whole.
//
// Redact builds a [Redactor] for every call: to redact several strings
// with the same secrets, build one with [NewRedactor].
func Redact(s string, secrets []string) string {
	if s == "" || !slices.ContainsFunc(secrets, func(s string) bool { return s != "" }) {
		return s
	}
	return NewRedactor(secrets).Redact(s)
}

// RedactResult returns res with [Redact] applied to its value, its error
// message and every string (keys included) inside Structured, at any depth,
// building one [Redactor] for all of them. See [Redactor.RedactResult].
func RedactResult(res tool.Result, secrets []string) tool.Result {
	if !slices.ContainsFunc(secrets, func(s string) bool { return s != "" }) {
		return res
	}
	return NewRedactor(secrets).RedactResult(res)
}

// RedactResult returns res with [Redactor.Redact] applied to its value, its
// error message and every string (keys included) inside Structured, at any
// depth. Structured is copied, never changed in place. Booleans and numbers
// are kept as they are; a value of any other type (a struct,
// json.RawMessage, ...) is replaced by its JSON form decoded into maps,
// slices, strings and json.Number, then redacted, so what the wire would
// carry holds no secret. Two keys that become equal once redacted collapse
// into one. A panic of a value's MarshalJSON is raised again as its
// message, redacted: the worker logs it and keeps it for the dead letter.
func (r *Redactor) RedactResult(res tool.Result) tool.Result {
	if r == nil {
		return res
	}
	res.Value = r.Redact(res.Value)
	res.Error = r.Redact(res.Error)
	if res.Structured != nil {
		res.Structured = r.redactAny(res.Structured).(map[string]any)
	}
	return res
}

// redactAny returns a copy of v with every string redacted.
func (r *Redactor) redactAny(v any) any {
	switch v := v.(type) {
	case string:
		return r.Redact(v)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[r.Redact(k)] = r.redactAny(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = r.redactAny(e)
		}
		return out
	case []string:
		out := make([]string, len(v))
		for i, e := range v {
			out[i] = r.Redact(e)
		}
		return out
	case map[string]string:
		out := make(map[string]string, len(v))
		for k, e := range v {
			out[r.Redact(k)] = r.Redact(e)
		}
		return out
	case nil, bool, float64, float32, int, int8, int16, int32, int64,
		uint, uint8, uint16, uint32, uint64, json.Number:
		return v
	default:
		b, err := r.marshal(v)
		if err != nil {
			return v // the wire cannot carry it either
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var generic any
		if err := dec.Decode(&generic); err != nil {
			return v
		}
		return r.redactAny(generic)
	}
}

// marshal is json.Marshal. A panic of a MarshalJSON method (whose message
// may quote a secret) is raised again as its message, redacted.
func (r *Redactor) marshal(v any) (_ []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			panic(r.Redact(fmt.Sprint(p)))
		}
	}()
	return json.Marshal(v)
}
