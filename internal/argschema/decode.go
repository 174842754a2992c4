package argschema

import (
	"encoding/json"
	"errors"
	"io"

	"github.com/capstanhq/capstan/internal/jsonscan"
	"github.com/go-json-experiment/json/jsontext"
)

// decode reads one JSON value into the form the validator takes (objects
// as map[string]any, arrays as []any, numbers as json.Number, so that
// integers keep every digit), in one pass over data. It accepts what
// jsonschema.UnmarshalJSON accepts, with the same result: a later duplicate
// member wins, and invalid UTF-8 in a string becomes U+FFFD. Data after the
// value, but for whitespace, is an error.
//
// jsonschema.UnmarshalJSON reads through encoding/json's Decoder, which
// scans every byte twice; args are the largest part of most calls.
func decode(data []byte) (any, error) {
	dec, release := jsonscan.Decoder(data)
	defer release()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		if err == nil {
			err = errors.New("invalid character after the top-level value")
		}
		return nil, err
	}
	return v, nil
}

func decodeValue(dec *jsontext.Decoder) (any, error) {
	t, err := dec.ReadToken()
	if err != nil {
		return nil, err
	}
	switch t.Kind() {
	case '{':
		m := make(map[string]any)
		for dec.PeekKind() != '}' {
			name, err := dec.ReadToken()
			if err != nil {
				return nil, err
			}
			key := name.String()
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			m[key] = v
		}
		_, err := dec.ReadToken()
		return m, err
	case '[':
		a := make([]any, 0, 4)
		for dec.PeekKind() != ']' {
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.ReadToken()
		return a, err
	case '"':
		return t.String(), nil
	case '0':
		return json.Number(t.String()), nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	default: // 'n'
		return nil, nil
	}
}
