package shape

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// dryRunStringLimit is the number of code points a string value keeps in the
// dry-run text.
const dryRunStringLimit = 500

// DryRun returns the result value of a dry-run call:
// "[dry-run] <name> would be called with: <args JSON>". The args JSON is
// compact, has the keys of every object sorted (byte order, as
// [encoding/json] sorts map keys), keeps numbers exactly as written, does not
// escape <, > and &, and shortens every string value at any depth that is
// longer than 500 code points to its first 500 code points followed by
// "...[truncated, <n> chars]" (n the original length in code points). Object
// keys are never shortened. Empty or all-whitespace args are shown as {}.
// It returns an error when args is not a single valid JSON value.
func DryRun(name string, args json.RawMessage) (string, error) {
	v, err := decodeArgs(args)
	if err != nil {
		return "", fmt.Errorf("dry run of %s: %w", name, err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(shortenStrings(v)); err != nil {
		return "", fmt.Errorf("dry run of %s: encode args: %w", name, err)
	}
	return "[dry-run] " + name + " would be called with: " + string(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// decodeArgs decodes one JSON value with json.Number for numbers. Empty input
// decodes to an empty object.
func decodeArgs(args json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("args are not valid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("args are not valid JSON: unexpected data after the top-level value")
	}
	return v, nil
}

// shortenStrings shortens, in place, every string value longer than
// dryRunStringLimit code points and returns the value.
func shortenStrings(v any) any {
	switch v := v.(type) {
	case string:
		n := utf8.RuneCountInString(v)
		if n <= dryRunStringLimit {
			return v
		}
		return v[:prefixBytes(v, dryRunStringLimit)] + "...[truncated, " + strconv.Itoa(n) + " chars]"
	case map[string]any:
		for k, e := range v {
			v[k] = shortenStrings(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = shortenStrings(e)
		}
		return v
	default:
		return v
	}
}

// prefixBytes returns the byte length of the first n code points of s (all of
// s when it has fewer).
func prefixBytes(s string, n int) int {
	if n <= 0 {
		return 0
	}
	count := 0
	for i := range s {
		if count == n {
			return i
		}
		count++
	}
	return len(s)
}
