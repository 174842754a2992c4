package argschema

import (
	"encoding/json"
	"io"
	"slices"
	"strconv"

	"github.com/capstanhq/capstan/internal/jsonscan"
	"github.com/go-json-experiment/json/jsontext"
)

// fastNode is one schema of the subset of JSON Schema most tool argument
// schemas are written in: a single type; properties, required and
// additionalProperties (true or false); items; minimum and maximum as
// integers; enum of strings; and annotations. validArgs answers only "valid
// for certain": a false means "the library decides" (Schema.Validate then
// runs it, for the verdict and the message). So the subset never changes
// what is accepted or refused, nor a message; it spares the valid calls
// of the common schemas the library's generic walk (the library compares
// every number as a big.Rat parsed from its fmt.Sprint, and copies every
// string it checks).
type fastNode struct {
	typ      string // a JSON Schema type name; "" for any
	props    map[string]*fastNode
	required []string
	closed   bool // additionalProperties: false
	items    *fastNode
	min, max *int64
	enum     []string
}

// annotations are keywords that do not take part in validation.
var annotations = map[string]bool{
	"description": true, "title": true, "default": true, "examples": true, "$comment": true,
	"deprecated": true, "readOnly": true, "writeOnly": true,
}

// draft2020 is the only $schema the subset takes (the default draft).
const draft2020 = "https://json-schema.org/draft/2020-12/schema"

// compileFast returns the subset's form of a schema document (as
// jsonschema.UnmarshalJSON read it), or nil when the schema uses anything
// outside the subset (the library then validates every call).
func compileFast(doc any) *fastNode {
	m, ok := doc.(map[string]any)
	if !ok {
		return nil
	}
	if v, ok := m["$schema"]; ok && v != draft2020 {
		return nil
	}
	return fastSchema(m, true)
}

func fastSchema(doc any, root bool) *fastNode {
	m, ok := doc.(map[string]any)
	if !ok {
		return nil // a boolean schema
	}
	n := &fastNode{}
	for k, v := range m {
		switch {
		case annotations[k], root && k == "$schema":
		case k == "type":
			t, ok := v.(string)
			if !ok || !slices.Contains([]string{"object", "array", "string", "integer", "number", "boolean", "null"}, t) {
				return nil
			}
			n.typ = t
		case k == "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			n.props = make(map[string]*fastNode, len(props))
			for name, p := range props {
				if n.props[name] = fastSchema(p, false); n.props[name] == nil {
					return nil
				}
			}
		case k == "required":
			req, ok := v.([]any)
			if !ok {
				return nil
			}
			for _, r := range req {
				name, ok := r.(string)
				if !ok {
					return nil
				}
				n.required = append(n.required, name)
			}
		case k == "additionalProperties":
			b, ok := v.(bool)
			if !ok {
				return nil
			}
			n.closed = !b
		case k == "items":
			if n.items = fastSchema(v, false); n.items == nil {
				return nil
			}
		case k == "minimum", k == "maximum":
			num, ok := v.(json.Number)
			if !ok {
				return nil
			}
			i, err := strconv.ParseInt(string(num), 10, 64)
			if err != nil {
				return nil
			}
			if k == "minimum" {
				n.min = &i
			} else {
				n.max = &i
			}
		case k == "enum":
			vals, ok := v.([]any)
			if !ok {
				return nil
			}
			n.enum = make([]string, 0, len(vals))
			for _, e := range vals {
				s, ok := e.(string)
				if !ok {
					return nil
				}
				n.enum = append(n.enum, s)
			}
		default:
			return nil
		}
	}
	return n
}

// validArgs reports whether args, one JSON document, is valid for certain;
// false means "not known to be": invalid, or outside the subset's reach (a
// number that is not an integer literal, checked against a bound or as an
// integer; a member repeated with an occurrence that is not valid, where
// decode keeps the last). It reads args once without building their
// value: no map, slice or string is allocated for it.
func (n *fastNode) validArgs(args []byte) bool {
	dec, release := jsonscan.Decoder(args)
	defer release()
	if dec.PeekKind() != '{' || !n.validNext(dec) {
		return false
	}
	_, err := dec.ReadToken()
	return err == io.EOF
}

// validNext is validArgs for the next value of dec, which it reads.
func (n *fastNode) validNext(dec *jsontext.Decoder) bool {
	k := dec.PeekKind()
	switch n.typ {
	case "":
	case "object":
		if k != '{' {
			return false
		}
	case "array":
		if k != '[' {
			return false
		}
	case "string":
		if k != '"' {
			return false
		}
	case "integer", "number":
		if k != '0' {
			return false
		}
	case "boolean":
		if k != 't' && k != 'f' {
			return false
		}
	case "null":
		if k != 'n' {
			return false
		}
	}
	if n.enum != nil && k != '"' {
		return false
	}
	switch k {
	case '{':
		return n.validObject(dec)
	case '[':
		if _, err := dec.ReadToken(); err != nil {
			return false
		}
		for dec.PeekKind() != ']' {
			if n.items != nil {
				if !n.items.validNext(dec) {
					return false
				}
			} else if dec.SkipValue() != nil {
				return false
			}
		}
		_, err := dec.ReadToken()
		return err == nil
	case '"':
		raw, err := dec.ReadValue()
		if err != nil {
			return false
		}
		if n.enum == nil {
			return true
		}
		var buf [64]byte
		s, err := jsontext.AppendUnquote(buf[:0], raw)
		return err == nil && slices.ContainsFunc(n.enum, func(e string) bool { return e == string(s) })
	case '0':
		raw, err := dec.ReadValue()
		if err != nil {
			return false
		}
		if n.typ != "integer" && n.min == nil && n.max == nil {
			return true
		}
		i, ok := parseInteger(raw)
		return ok && (n.min == nil || i >= *n.min) && (n.max == nil || i <= *n.max)
	case 't', 'f', 'n':
		_, err := dec.ReadToken()
		return err == nil
	}
	return false
}

// validObject is validNext for an object.
func (n *fastNode) validObject(dec *jsontext.Decoder) bool {
	if len(n.required) > 64 {
		return false
	}
	if _, err := dec.ReadToken(); err != nil {
		return false
	}
	var seen uint64
	var buf [64]byte
	for dec.PeekKind() != '}' {
		raw, err := dec.ReadValue()
		if err != nil {
			return false
		}
		name, err := jsontext.AppendUnquote(buf[:0], raw)
		if err != nil {
			return false
		}
		for i, r := range n.required {
			if r == string(name) {
				seen |= 1 << i
			}
		}
		p, ok := n.props[string(name)]
		switch {
		case ok:
			if !p.validNext(dec) {
				return false
			}
		case n.closed:
			return false
		default:
			if dec.SkipValue() != nil {
				return false
			}
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return false
	}
	return seen == 1<<len(n.required)-1
}

// parseInteger is strconv.ParseInt of a JSON number's literal, without
// the error's allocation: false for a literal that is not an integer (a
// fraction or an exponent) or does not fit an int64.
func parseInteger(raw []byte) (int64, bool) {
	neg := len(raw) > 0 && raw[0] == '-'
	if neg {
		raw = raw[1:]
	}
	if len(raw) == 0 || len(raw) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case neg && u <= 1<<63:
		return int64(-u), true
	case !neg && u < 1<<63:
		return int64(u), true
	}
	return 0, false
}
