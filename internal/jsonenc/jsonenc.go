// Package jsonenc appends JSON values to a byte slice exactly as
// encoding/json's Marshal writes them, without reflection: the hand-written
// encoders of the messages every call produces (wire.Result, the audit
// record) are built from it. Each function documents the encoding/json
// behaviour it reproduces, errors included; the tests compare them with
// encoding/json byte for byte. It imports only the standard library.
package jsonenc

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"time"
	"unicode/utf8"
)

const hex = "0123456789abcdef"

// plain[b] is true for the bytes a string encodes as they are: printable
// ASCII but '"', '\\' and the HTML-sensitive '<', '>' and '&'
// (encoding/json's htmlSafeSet). Control bytes and every byte of a
// multi-byte sequence take the slow path.
var plain = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()

// AppendString appends s as a JSON string, as encoding/json writes a string
// (HTML escaping on, Marshal's default): '"' and '\\' escaped with a
// backslash; \b, \f, \n, \r and \t as such; the other control bytes and
// '<', '>', '&' as \u00XX; U+2028 and U+2029 as \u2028 and \u2029; each
// byte of invalid UTF-8 as \ufffd.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight plain bytes at a time (SWAR): none is a control byte,
		// non-ASCII, '"', '\\', '<', '>' or '&'. Each test is
		// (v - ones) &^ v, with a high bit set when some byte of v is zero
		// (or, for x - n*ones, below n), given bytes below 0x80, which the
		// first test, x itself, makes sure of.
		for ; i+8 <= len(s); i += 8 {
			x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
				uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
			q := x ^ '"'*ones
			bs := x ^ '\\'*ones
			amp := x ^ '&'*ones
			// '<' (0x3c) and '>' (0x3e) are the bytes b with b|2 == '>'.
			lt := (x | 2*ones) ^ '>'*ones
			if (x|(x-0x20*ones)&^x|(q-ones)&^q|(bs-ones)&^bs|(amp-ones)&^amp|(lt-ones)&^lt)&highs != 0 {
				break
			}
		}
		if i == len(s) {
			break
		}
		b := s[i]
		if plain[b] {
			i++
			continue
		}
		if b < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Bytes repeated eight times in a word, for AppendString's SWAR loop.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// AppendBool appends true or false.
func AppendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, "true"...)
	}
	return append(dst, "false"...)
}

// AppendFloat64 appends f as encoding/json writes a float64: the shortest
// decimal that reads back as f, in exponent form (e-7, not e-07) below 1e-6
// and from 1e21 in magnitude. NaN and ±Inf are an
// *json.UnsupportedValueError, as Marshal returns, and dst is returned
// unchanged.
func AppendFloat64(dst []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, &json.UnsupportedValueError{Value: reflect.ValueOf(f), Str: strconv.FormatFloat(f, 'g', -1, 64)}
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json does.
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, nil
}

var (
	timeType       = reflect.TypeFor[time.Time]()
	rawMessageType = reflect.TypeFor[json.RawMessage]()
)

// AppendTime appends t as encoding/json writes a time.Time field, through
// its MarshalJSON: a quoted RFC 3339 timestamp with nanoseconds, trailing
// zeros dropped. A time that MarshalJSON refuses (a year outside
// [0,9999], a zone offset of 24 hours or more) is MarshalJSON's error
// wrapped in a *json.MarshalerError, as Marshal returns it, and dst is
// returned unchanged.
func AppendTime(dst []byte, t time.Time) ([]byte, error) {
	n0 := len(dst)
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	// The checks of time.Time.MarshalJSON (appendStrictRFC3339), on the
	// same text: a year of exactly 4 digits, a zone hour below 24. When
	// they fail, MarshalJSON itself decides and says why.
	b := dst[n0+1:]
	if b[len("9999")] != '-' || b[len(b)-1] != 'Z' && strictZoneBad(b) {
		data, err := t.MarshalJSON()
		if err != nil {
			return dst[:n0], &json.MarshalerError{Type: timeType, Err: err}
		}
		return append(dst[:n0], data...), nil
	}
	return append(dst, '"'), nil
}

// strictZoneBad reports whether the numeric zone offset ending b is one
// that time.Time.MarshalJSON refuses.
func strictZoneBad(b []byte) bool {
	c := b[len(b)-len("Z07:00")]
	h := b[len(b)-len("07:00"):]
	return '0' <= c && c <= '9' || 10*(h[0]-'0')+(h[1]-'0') >= 24
}

// AppendRawMessage appends raw as encoding/json writes a non-empty
// json.RawMessage field (an empty one is null, or left out under
// omitempty): validated, compacted (the whitespace between tokens
// removed) and HTML-escaped ('<', '>', '&', U+2028 and U+2029 inside its
// strings as \u escapes); the bytes of its strings are otherwise kept,
// invalid UTF-8 included. Invalid JSON is the *json.SyntaxError wrapped in
// a *json.MarshalerError, as Marshal returns it, and dst is returned
// unchanged.
func AppendRawMessage(dst []byte, raw json.RawMessage) ([]byte, error) {
	if raw == nil {
		return append(dst, "null"...), nil
	}
	if !json.Valid(raw) {
		// Compact runs the scanner Valid runs: its error is Marshal's.
		return dst, &json.MarshalerError{Type: rawMessageType, Err: json.Compact(new(bytes.Buffer), raw)}
	}
	return appendCompactHTML(dst, raw), nil
}

// appendCompactHTML appends src, valid JSON, as encoding/json's compact
// with HTML escaping writes it.
func appendCompactHTML(dst, src []byte) []byte {
	start := 0
	inString := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			start = i + 1
		case c == 0xE2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8:
			// U+2028 or U+2029: E2 80 A8 or E2 80 A9.
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[src[i+2]&0xF])
			i += 2
			start = i + 1
		case inString:
			switch c {
			case '\\':
				// The escaped byte is ASCII and neither a quote that
				// ends the string nor one of the bytes escaped above.
				i++
			case '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			dst = append(dst, src[start:i]...)
			start = i + 1
		}
	}
	return append(dst, src[start:]...)
}
