package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// ArgsSHA256 is the hash a decision names (approvals.md): the lower-case
// hex SHA-256 of the canonical JSON of
// {"args":…,"personality_id":…,"tool":…}, with args exactly as the call
// carried them (before any default is filled in). Canonical JSON here:
// object keys sorted by their UTF-8 bytes, no insignificant white space,
// numbers as sent (their text unchanged), strings escaped only where JSON
// must (", \, and control characters: \b \f \n \r \t, others \u00xx) and
// otherwise written as UTF-8, invalid UTF-8 replaced by U+FFFD. Absent
// args are null. It fails only on args that are not JSON.
func ArgsSHA256(personality, tool string, args json.RawMessage) (string, error) {
	var v any = nil
	if len(bytes.Trim(args, " \t\r\n")) > 0 {
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return "", fmt.Errorf("args: %w", err)
		}
		if dec.More() {
			return "", fmt.Errorf("args: more than one JSON value")
		}
	}
	var b bytes.Buffer
	writeCanonical(&b, map[string]any{"args": v, "personality_id": personality, "tool": tool})
	sum := sha256.Sum256(b.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// Canonical returns the canonical JSON of v (a value decoded with
// UseNumber), as ArgsSHA256 hashes it.
func Canonical(v any) []byte {
	var b bytes.Buffer
	writeCanonical(&b, v)
	return b.Bytes()
}

func writeCanonical(b *bytes.Buffer, v any) {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case json.Number:
		b.WriteString(string(v))
	case string:
		writeString(b, v)
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			writeCanonical(b, e)
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, k)
			b.WriteByte(':')
			writeCanonical(b, v[k])
		}
		b.WriteByte('}')
	default:
		// Unreachable for decoded JSON; hashed as its text so a bug
		// cannot make two values equal.
		writeString(b, fmt.Sprint(v))
	}
}

const hexDigits = "0123456789abcdef"

func writeString(b *bytes.Buffer, s string) {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
