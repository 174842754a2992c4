package shape

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

// Redacted replaces every secret value in what leaves the worker.
const Redacted = "[REDACTED]"

// Redact replaces every occurrence of each non-empty value of secrets in s by
// [Redacted]. Occurrences are found in s as given, never inside an earlier
// replacement. Occurrences that overlap (of one secret or of several) are
// replaced together by a single [Redacted], so no byte of any secret survives;
// occurrences that merely touch are replaced one by one ("abab" with secret
// "ab" becomes "[REDACTED][REDACTED]"). Where one secret contains another, the
// longer one is therefore removed whole.
func Redact(s string, secrets []string) string {
	type span struct{ start, end int }
	var spans []span
	for _, sec := range secrets {
		if sec == "" || len(sec) > len(s) {
			continue
		}
		for off := 0; off < len(s); {
			i := strings.Index(s[off:], sec)
			if i < 0 {
				break
			}
			spans = append(spans, span{off + i, off + i + len(sec)})
			off += i + 1 // overlapping occurrences too
		}
	}
	if len(spans) == 0 {
		return s
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	b.Grow(len(s))
	last := 0 // end of the text already written
	for i := 0; i < len(spans); {
		start, end := spans[i].start, spans[i].end
		for i++; i < len(spans) && spans[i].start < end; i++ {
			end = max(end, spans[i].end)
		}
		b.WriteString(s[last:start])
		b.WriteString(Redacted)
		last = end
	}
	b.WriteString(s[last:])
	return b.String()
}

// RedactResult returns res with [Redact] applied to its value, its error
// message and every string (keys included) inside Structured, at any depth.
// Structured is copied, never changed in place. Booleans and numbers are kept
// as they are; a value of any other type (a struct, json.RawMessage, ...) is
// replaced by its JSON form decoded into maps, slices, strings and
// json.Number, then redacted, so what the wire would carry holds no secret.
// Two keys that become equal once redacted collapse into one.
func RedactResult(res tool.Result, secrets []string) tool.Result {
	if !slices.ContainsFunc(secrets, func(s string) bool { return s != "" }) {
		return res
	}
	res.Value = Redact(res.Value, secrets)
	res.Error = Redact(res.Error, secrets)
	if res.Structured != nil {
		res.Structured = redactAny(res.Structured, secrets).(map[string]any)
	}
	return res
}

// redactAny returns a copy of v with every string redacted.
func redactAny(v any, secrets []string) any {
	switch v := v.(type) {
	case string:
		return Redact(v, secrets)
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[Redact(k, secrets)] = redactAny(e, secrets)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = redactAny(e, secrets)
		}
		return out
	case []string:
		out := make([]string, len(v))
		for i, e := range v {
			out[i] = Redact(e, secrets)
		}
		return out
	case map[string]string:
		out := make(map[string]string, len(v))
		for k, e := range v {
			out[Redact(k, secrets)] = Redact(e, secrets)
		}
		return out
	case nil, bool, float64, float32, int, int8, int16, int32, int64,
		uint, uint8, uint16, uint32, uint64, json.Number:
		return v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return v // the wire cannot carry it either
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var generic any
		if err := dec.Decode(&generic); err != nil {
			return v
		}
		return redactAny(generic, secrets)
	}
}
