// Package argschema compiles the JSON Schema of a tool's arguments and
// validates call arguments against it (pipeline step 8), with error messages
// an LLM can act on: each names the failing field as a path from args
// (args.progress[0].percent) and the rule that failed (maximum).
package argschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// ErrInvalidArguments is matched (errors.Is) by every error Validate returns.
// Its text, "invalid arguments", starts every such error message.
var ErrInvalidArguments = errors.New("invalid arguments")

// maxReported is how many problems one error message lists.
const maxReported = 3

// Schema is a compiled tool argument schema. It is immutable and safe for
// concurrent use.
type Schema struct {
	tool string
	sch  *jsonschema.Schema
	// fast answers for the valid calls of a schema within its subset
	// (fastNode); nil for a schema outside it.
	fast *fastNode
}

// Compile compiles the argument schema of toolName. Schemas without $schema
// are read as draft 2020-12; an empty schema means any object. The format
// keyword is asserted (an args value "x" fails {"format": "email"}); unknown
// formats are ignored. A schema must be self-contained: $ref may point inside
// it and to the standard meta-schemas, never to files or URLs. Errors name the
// tool. Compile is meant to run once per tool at start-up.
func Compile(toolName string, schema json.RawMessage) (*Schema, error) {
	if len(bytes.TrimSpace(schema)) == 0 {
		schema = json.RawMessage(`{"type":"object"}`)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("tool %s: argument schema is not valid JSON: %w", toolName, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	const loc = "capstan://tool/args.json" // hierarchical, so relative refs resolve (and are refused)
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("tool %s: argument schema: %w", toolName, err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("tool %s: invalid argument schema: %w", toolName, err)
	}
	// A $ref cycle is only seen while validating; look for one up front.
	var verr *jsonschema.ValidationError
	if errors.As(sch.Validate(map[string]any{}), &verr) && hasRefCycle(verr) {
		return nil, fmt.Errorf("tool %s: invalid argument schema: %s", toolName, verr.Error())
	}
	return &Schema{tool: toolName, sch: sch, fast: compileFast(doc)}, nil
}

// hasRefCycle reports whether e or one of its causes is a $ref cycle.
func hasRefCycle(e *jsonschema.ValidationError) bool {
	if _, ok := e.ErrorKind.(*kind.RefCycle); ok {
		return true
	}
	return slices.ContainsFunc(e.Causes, hasRefCycle)
}

// noLoader refuses every external schema reference.
type noLoader struct{}

// Load refuses url.
func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema %s is not allowed: tool schemas must be self-contained", url)
}

// Validate checks args, which must be one JSON object (empty args count as
// {}). Numbers are compared exactly, so big integers are not rounded. The
// error matches [ErrInvalidArguments] and reads
//
//	invalid arguments: <field> <what is wrong> (<rule>)
//
// for example "invalid arguments: args.sleep_ms must be at most 600000
// (maximum)" or "invalid arguments: args.text is required (required)". When
// several problems exist they are sorted (shallower fields first, then by
// text) and the first three are joined by "; ", followed by "; and <n> more"
// when there are others.
func (s *Schema) Validate(args json.RawMessage) error {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage(`{}`)
	}
	if s.fast != nil && s.fast.validArgs(args) {
		return nil
	}
	v, err := decode(args)
	if err != nil {
		return fmt.Errorf("%w: args must be a JSON object, got invalid JSON: %v", ErrInvalidArguments, err)
	}
	if _, ok := v.(map[string]any); !ok {
		return fmt.Errorf("%w: args must be an object, got %s (type)", ErrInvalidArguments, jsonTypeOf(v))
	}
	err = s.sch.Validate(v)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return fmt.Errorf("%w: %v", ErrInvalidArguments, err)
	}
	probs := problems(verr, v)
	if len(probs) == 0 { // cannot happen: a failed validation has a cause
		return fmt.Errorf("%w: args do not match the schema of %s", ErrInvalidArguments, s.tool)
	}
	msgs := make([]string, 0, maxReported+1)
	for i, p := range probs {
		if i == maxReported {
			msgs = append(msgs, fmt.Sprintf("and %d more", len(probs)-maxReported))
			break
		}
		msgs = append(msgs, p.String())
	}
	return fmt.Errorf("%w: %s", ErrInvalidArguments, strings.Join(msgs, "; "))
}

// jsonTypeOf names the JSON type of a decoded value.
func jsonTypeOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	default:
		return fmt.Sprintf("%T", v)
	}
}
