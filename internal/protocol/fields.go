package protocol

import (
	"encoding/json"
	"io"

	"github.com/capstanhq/capstan/internal/jsonscan"
)

// topLevelFields splits a JSON object into its members in one pass over
// data, validating all of it: each value is the member's JSON text, a
// slice of data (not a copy). It accepts what encoding/json's Unmarshal
// into a map[string]json.RawMessage accepts, with the same result: a later
// duplicate member wins, and invalid UTF-8 is tolerated (the string
// decoders replace it). ok is false when data is not one JSON object,
// alone but for whitespace.
//
// encoding/json reads the body twice (once to validate it, once to split
// it), and every byte of the call's args with it; this is the call
// decoder's main cost.
func topLevelFields(data []byte) (fields map[string]json.RawMessage, ok bool) {
	dec, release := jsonscan.Decoder(data)
	defer release()
	if t, err := dec.ReadToken(); err != nil || t.Kind() != '{' {
		return nil, false
	}
	fields = make(map[string]json.RawMessage, 8)
	for dec.PeekKind() != '}' {
		name, err := dec.ReadToken()
		if err != nil {
			return nil, false
		}
		key := name.String()
		v, err := dec.ReadValue()
		if err != nil {
			return nil, false
		}
		end := dec.InputOffset()
		fields[key] = json.RawMessage(data[end-int64(len(v)) : end : end])
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, false
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, false
	}
	return fields, true
}
