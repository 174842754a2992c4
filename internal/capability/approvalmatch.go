package capability

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
)

// This file compares a call's arguments with the values of an approval
// rule's When (Approval.Needs).

// member is one top-level member of a JSON object, its value undecoded.
type member struct {
	name  string
	value json.RawMessage
}

// objectMembers returns the top-level members of args in order, duplicates
// kept; ok is false when args is not exactly one JSON object.
func objectMembers(args json.RawMessage) (members []member, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		name, ok := t.(string)
		if !ok {
			return nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		members = append(members, member{name: name, value: v})
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false // trailing data
	}
	return members, true
}

// whenKind tells the JSON types a When value compares with apart.
type whenKind byte

const (
	kindNone whenKind = iota
	kindString
	kindNumber
	kindBool
)

// valueIn reports whether the JSON value raw equals one of values.
func valueIn(raw json.RawMessage, values []any) bool {
	kind, text := argValue(raw)
	if kind == kindNone {
		return false
	}
	for _, v := range values {
		if k, t := whenValue(v); k == kind && t == text {
			return true
		}
	}
	return false
}

// argValue returns the kind of the JSON value raw and its comparable text:
// the unescaped string, the normalised number (normNumber), "true" or
// "false"; kindNone for null, arrays, objects and invalid JSON.
func argValue(raw json.RawMessage) (whenKind, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return kindNone, ""
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return kindNone, ""
		}
		return kindString, s
	case c == 't' && string(raw) == "true", c == 'f' && string(raw) == "false":
		return kindBool, string(raw)
	case c == '-' || (c >= '0' && c <= '9'):
		if n, ok := normNumber(string(raw)); ok {
			return kindNumber, n
		}
	}
	return kindNone, ""
}

// whenValue returns the kind and comparable text of a When value: a
// string, json.Number or bool as Parse reads them, or an int, int64 or
// float64 of an Approval built in code; kindNone for anything else (which
// never matches).
func whenValue(v any) (whenKind, string) {
	var num string
	switch v := v.(type) {
	case string:
		return kindString, v
	case bool:
		return kindBool, strconv.FormatBool(v)
	case json.Number:
		num = string(v)
	case int:
		num = strconv.Itoa(v)
	case int64:
		num = strconv.FormatInt(v, 10)
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return kindNone, ""
		}
		num = strconv.FormatFloat(v, 'g', -1, 64)
	default:
		return kindNone, ""
	}
	if n, ok := normNumber(num); ok {
		return kindNumber, n
	}
	return kindNone, ""
}

// maxExponent bounds the exponent of a number normNumber accepts, far
// beyond any float64 and far from int overflow.
const maxExponent = 1 << 40

// normNumber returns the JSON number s in a canonical form, so that two
// numbers are equal exactly when their forms are: "0" for zero (-0 too),
// else an optional "-", the significant digits without leading or trailing
// zeros, "e" and the exponent (1, 1.0, 10e-1 and 0.1e1 are all "1e0").
// ok is false when s is not a JSON number or its exponent is beyond
// ±2^40.
func normNumber(s string) (string, bool) {
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	intPart, rest := leadingDigits(s)
	if intPart == "" || (len(intPart) > 1 && intPart[0] == '0') {
		return "", false
	}
	var frac string
	if strings.HasPrefix(rest, ".") {
		frac, rest = leadingDigits(rest[1:])
		if frac == "" {
			return "", false
		}
	}
	exp := int64(0)
	if rest != "" {
		if rest[0] != 'e' && rest[0] != 'E' {
			return "", false
		}
		rest = rest[1:]
		sign := ""
		if rest != "" && (rest[0] == '+' || rest[0] == '-') {
			sign, rest = rest[:1], rest[1:]
		}
		digits, tail := leadingDigits(rest)
		if digits == "" || tail != "" {
			return "", false
		}
		e, err := strconv.ParseInt(sign+digits, 10, 64)
		if err != nil || e > maxExponent || e < -maxExponent {
			return "", false
		}
		exp = e
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= int64(len(frac))
	if digits == "" {
		return "0", true
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += int64(len(digits) - len(trimmed))
	out := trimmed + "e" + strconv.FormatInt(exp, 10)
	if neg {
		out = "-" + out
	}
	return out, true
}

// leadingDigits splits s after its leading ASCII digits.
func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i], s[i:]
}
