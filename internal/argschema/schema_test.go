package argschema_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/argschema"
)

// echoSchema is the schema of the echo tool of tools.md.
const echoSchema = `{
	"type": "object",
	"required": ["text"],
	"additionalProperties": false,
	"properties": {
		"text": {"type": "string"},
		"sleep_ms": {"type": "integer", "minimum": 0, "maximum": 600000},
		"progress": {
			"type": "array",
			"items": {
				"type": "object",
				"required": ["message"],
				"properties": {
					"message": {"type": "string"},
					"percent": {"type": "number", "minimum": 0, "maximum": 100},
					"audience": {"enum": ["internal", "user", "dashboard"]}
				}
			}
		}
	}
}`

func mustCompile(t testing.TB, schema string) *argschema.Schema {
	t.Helper()
	s, err := argschema.Compile("echo", json.RawMessage(schema))
	require.NoError(t, err)
	return s
}

func TestValidateEcho(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, echoSchema)
	tests := []struct {
		name string
		args string
		want string // "" means valid
	}{
		{"valid", `{"text":"hi"}`, ""},
		{"valid full", `{"text":"hi","sleep_ms":600000,"progress":[{"message":"m","percent":50.5,"audience":"user"}]}`, ""},
		{"required", `{}`, "invalid arguments: args.text is required (required)"},
		{"empty args are an empty object", ``, "invalid arguments: args.text is required (required)"},
		{"type", `{"text":5}`, "invalid arguments: args.text must be a string, got number (type)"},
		{"maximum", `{"text":"hi","sleep_ms":600001}`, "invalid arguments: args.sleep_ms must be at most 600000 (maximum)"},
		{"minimum", `{"text":"hi","sleep_ms":-1}`, "invalid arguments: args.sleep_ms must be at least 0 (minimum)"},
		{"integer", `{"text":"hi","sleep_ms":1.5}`, "invalid arguments: args.sleep_ms must be an integer, got number (type)"},
		{"integer-valued decimal is an integer", `{"text":"hi","sleep_ms":10.0}`, ""},
		{"nested path", `{"text":"hi","progress":[{"message":"m"},{"message":"m","percent":101}]}`, "invalid arguments: args.progress[1].percent must be at most 100 (maximum)"},
		{"nested required", `{"text":"hi","progress":[{"percent":1}]}`, "invalid arguments: args.progress[0].message is required (required)"},
		{"enum", `{"text":"hi","progress":[{"message":"m","audience":"all"}]}`, `invalid arguments: args.progress[0].audience must be one of "internal", "user", "dashboard" (enum)`},
		{"additionalProperties", `{"text":"hi","colour":"red"}`, "invalid arguments: args.colour is not allowed (additionalProperties)"},
		{
			"several problems sorted, shallow first",
			`{"sleep_ms":"x","progress":[{"percent":-1}],"extra":1}`,
			"invalid arguments: args.extra is not allowed (additionalProperties); args.sleep_ms must be an integer, got string (type); args.text is required (required); and 2 more",
		},
		{"not an object: array", `[1]`, "invalid arguments: args must be an object, got array (type)"},
		{"not an object: string", `"hi"`, "invalid arguments: args must be an object, got string (type)"},
		{"not an object: null", `null`, "invalid arguments: args must be an object, got null (type)"},
		{"not an object: number", `42`, "invalid arguments: args must be an object, got number (type)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := s.Validate(json.RawMessage(tt.args))
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, argschema.ErrInvalidArguments)
			require.EqualError(t, err, tt.want)
		})
	}
}

func TestValidateInvalidJSON(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, echoSchema)
	for _, args := range []string{`{"text":`, `{"text":"a"} {}`, `{'text':'a'}`} {
		err := s.Validate(json.RawMessage(args))
		require.ErrorIs(t, err, argschema.ErrInvalidArguments, args)
		require.ErrorContains(t, err, "invalid arguments: args must be a JSON object, got invalid JSON: ", args)
	}
}

func TestValidateRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		schema string
		args   string
		want   string
	}{
		{"type union", `{"properties":{"x":{"type":["string","null"]}}}`, `{"x":true}`, "args.x must be a string or null, got boolean (type)"},
		{"type three", `{"properties":{"x":{"type":["object","array","integer"]}}}`, `{"x":"s"}`, "args.x must be an integer, an array or an object, got string (type)"},
		{"exclusiveMinimum", `{"properties":{"x":{"exclusiveMinimum":0}}}`, `{"x":0}`, "args.x must be greater than 0 (exclusiveMinimum)"},
		{"exclusiveMaximum", `{"properties":{"x":{"exclusiveMaximum":1.5}}}`, `{"x":1.5}`, "args.x must be less than 1.5 (exclusiveMaximum)"},
		{"minimum decimal", `{"properties":{"x":{"minimum":0.05}}}`, `{"x":0.01}`, "args.x must be at least 0.05 (minimum)"},
		{"maximum negative decimal", `{"properties":{"x":{"maximum":-2.5}}}`, `{"x":0}`, "args.x must be at most -2.5 (maximum)"},
		{"multipleOf", `{"properties":{"x":{"multipleOf":0.5}}}`, `{"x":0.7}`, "args.x must be a multiple of 0.5 (multipleOf)"},
		{"big integer exact", `{"properties":{"x":{"maximum":9007199254740992}}}`, `{"x":9007199254740993}`, "args.x must be at most 9007199254740992 (maximum)"},
		{"big integer within bound", `{"properties":{"x":{"maximum":9007199254740993}}}`, `{"x":9007199254740993}`, ""},
		{"huge integer", `{"properties":{"x":{"maximum":100000000000000000000000000000}}}`, `{"x":100000000000000000000000000001}`, "args.x must be at most 100000000000000000000000000000 (maximum)"},
		{"minLength", `{"properties":{"x":{"minLength":3}}}`, `{"x":"ab"}`, "args.x must be at least 3 characters long, got 2 (minLength)"},
		{"minLength one", `{"properties":{"x":{"minLength":1}}}`, `{"x":""}`, "args.x must be at least 1 character long, got 0 (minLength)"},
		{"maxLength counts code points", `{"properties":{"x":{"maxLength":2}}}`, `{"x":"ééé"}`, "args.x must be at most 2 characters long, got 3 (maxLength)"},
		{"maxLength multi-byte within", `{"properties":{"x":{"maxLength":3}}}`, `{"x":"é😀é"}`, ""},
		{"minItems", `{"properties":{"x":{"minItems":2}}}`, `{"x":[1]}`, "args.x must have at least 2 items, got 1 (minItems)"},
		{"maxItems", `{"properties":{"x":{"maxItems":1}}}`, `{"x":[1,2,3]}`, "args.x must have at most 1 item, got 3 (maxItems)"},
		{"uniqueItems", `{"properties":{"x":{"uniqueItems":true}}}`, `{"x":[1,2,1]}`, "args.x must not contain equal items, but items 0 and 2 are equal (uniqueItems)"},
		{"minProperties", `{"minProperties":2}`, `{"a":1}`, "args must have at least 2 properties, got 1 (minProperties)"},
		{"maxProperties", `{"properties":{"x":{"maxProperties":1}}}`, `{"x":{"a":1,"b":2}}`, "args.x must have at most 1 property, got 2 (maxProperties)"},
		{"enum single", `{"properties":{"x":{"enum":["only"]}}}`, `{"x":"other"}`, `args.x must be "only" (enum)`},
		{"enum mixed", `{"properties":{"x":{"enum":[1,"a",null,true]}}}`, `{"x":2}`, `args.x must be one of 1, "a", null, true (enum)`},
		{"const", `{"properties":{"x":{"const":"v1"}}}`, `{"x":"v2"}`, `args.x must be "v1" (const)`},
		{"const object", `{"properties":{"x":{"const":{"a":[1]}}}}`, `{"x":1}`, `args.x must be {"a":[1]} (const)`},
		{"pattern", `{"properties":{"x":{"pattern":"^[a-z]+\\d$"}}}`, `{"x":"A"}`, `args.x must match the pattern "^[a-z]+\\d$" (pattern)`},
		{"format email", `{"properties":{"x":{"format":"email"}}}`, `{"x":"nope"}`, "args.x must be a valid email (format)"},
		{"format date-time", `{"properties":{"x":{"format":"date-time"}}}`, `{"x":"yesterday"}`, "args.x must be a valid date-time (format)"},
		{"format uri valid", `{"properties":{"x":{"format":"uri"}}}`, `{"x":"https://example.com/a"}`, ""},
		{"unknown format ignored", `{"properties":{"x":{"format":"colour"}}}`, `{"x":"nope"}`, ""},
		{"format ignores other types", `{"properties":{"x":{"format":"email"}}}`, `{"x":5}`, ""},
		{"required several", `{"required":["b","a"]}`, `{}`, "args.a is required (required); args.b is required (required)"},
		{"required capped at three", `{"required":["a","b","c","d","e"]}`, `{}`, "args.a is required (required); args.b is required (required); args.c is required (required); and 2 more"},
		{"additionalProperties false in nested", `{"properties":{"o":{"type":"object","additionalProperties":false}}}`, `{"o":{"k":1}}`, "args.o.k is not allowed (additionalProperties)"},
		{"additionalProperties schema", `{"additionalProperties":{"type":"string"}}`, `{"k":1}`, "args.k must be a string, got number (type)"},
		{"false schema", `{"properties":{"x":false}}`, `{"x":1}`, "args.x is not allowed (false schema)"},
		{"dependentRequired", `{"dependentRequired":{"a":["b"]}}`, `{"a":1}`, `args.b is required when "a" is present (dependentRequired)`},
		{"draft-07 dependencies", `{"$schema":"http://json-schema.org/draft-07/schema#","dependencies":{"a":["b"]}}`, `{"a":1}`, `args.b is required when "a" is present (dependencies)`},
		{"propertyNames", `{"propertyNames":{"pattern":"^[a-z]+$"}}`, `{"Bad":1}`, `args has an invalid property name "Bad" (propertyNames)`},
		{"contains", `{"properties":{"x":{"contains":{"type":"string"}}}}`, `{"x":[1,2]}`, "args.x must contain at least one matching item (contains)"},
		{"minContains", `{"properties":{"x":{"contains":{"type":"string"},"minContains":2}}}`, `{"x":["a",1]}`, "args.x must contain at least 2 matching items, got 1 (minContains)"},
		{"maxContains", `{"properties":{"x":{"contains":{"type":"string"},"maxContains":1}}}`, `{"x":["a","b"]}`, "args.x must contain at most 1 matching item, got 2 (maxContains)"},
		{"not", `{"properties":{"x":{"not":{"type":"string"}}}}`, `{"x":"s"}`, "args.x must not match the schema given in not (not)"},
		{"prefixItems and items false", `{"properties":{"x":{"prefixItems":[{"type":"string"}],"items":false}}}`, `{"x":["a",1]}`, "args.x[1] is not allowed (false schema)"},
		{"anyOf of types", `{"properties":{"x":{"anyOf":[{"type":"string"},{"type":"number"}]}}}`, `{"x":true}`, "args.x must be a string or a number, got boolean (type)"},
		{"anyOf with one alternative of the right type", `{"properties":{"x":{"anyOf":[{"type":"string"},{"type":"object","required":["id"]}]}}}`, `{"x":{}}`, "args.x.id is required (required)"},
		{"anyOf generic", `{"properties":{"x":{"anyOf":[{"type":"string","minLength":5},{"type":"string","pattern":"^a"}]}}}`, `{"x":"bc"}`, "args.x does not match any of the allowed alternatives (anyOf)"},
		{"oneOf none", `{"properties":{"x":{"oneOf":[{"type":"string"},{"type":"integer"}]}}}`, `{"x":null}`, "args.x must be a string or an integer, got null (type)"},
		{"oneOf several", `{"properties":{"x":{"oneOf":[{"type":"number"},{"type":"integer"}]}}}`, `{"x":1}`, "args.x must match exactly one of the allowed alternatives, but matched alternatives 0 and 1 (oneOf)"},
		{"oneOf through refs", `{"$defs":{"s":{"type":"string"},"n":{"type":"number"}},"properties":{"x":{"oneOf":[{"$ref":"#/$defs/s"},{"$ref":"#/$defs/n"}]}}}`, `{"x":[]}`, "args.x must be a string or a number, got array (type)"},
		{"ref", `{"$defs":{"pos":{"type":"integer","minimum":1}},"properties":{"x":{"$ref":"#/$defs/pos"}}}`, `{"x":0}`, "args.x must be at least 1 (minimum)"},
		{"allOf", `{"allOf":[{"required":["a"]},{"properties":{"a":{"type":"string"}}}]}`, `{"a":1}`, "args.a must be a string, got number (type)"},
		{"if then", `{"if":{"properties":{"k":{"const":"url"}}},"then":{"required":["url"]}}`, `{"k":"url"}`, "args.url is required (required)"},
		{"odd key", `{"properties":{"a b":{"type":"string"}}}`, `{"a b":1}`, `args["a b"] must be a string, got number (type)`},
		{"numeric key in object", `{"properties":{"m":{"additionalProperties":{"type":"string"}}}}`, `{"m":{"0":1}}`, `args.m["0"] must be a string, got number (type)`},
		{"deep array path", `{"properties":{"g":{"items":{"items":{"type":"integer"}}}}}`, `{"g":[[1],[2,"x"]]}`, "args.g[1][1] must be an integer, got string (type)"},
		{"quote in key", `{"additionalProperties":false}`, `{"a\"b":1}`, `args["a\"b"] is not allowed (additionalProperties)`},
		{"duplicates reported once", `{"allOf":[{"required":["a"]},{"required":["a"]}]}`, `{}`, "args.a is required (required)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustCompile(t, tt.schema)
			err := s.Validate(json.RawMessage(tt.args))
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, argschema.ErrInvalidArguments)
			require.EqualError(t, err, "invalid arguments: "+tt.want)
		})
	}
}

func TestCompile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		schema  string
		wantErr string // substring; "" means it compiles
	}{
		{"empty", ``, ""},
		{"whitespace", "  \n", ""},
		{"empty object", `{}`, ""},
		{"boolean true", `true`, ""},
		{"draft 7", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`, ""},
		{"invalid JSON", `{"type":`, "tool echo: argument schema is not valid JSON"},
		{"invalid schema", `{"type":5}`, "tool echo: invalid argument schema"},
		{"invalid pattern", `{"properties":{"x":{"pattern":"(?<=a)b"}}}`, "tool echo: invalid argument schema"},
		{"remote ref refused", `{"$ref":"https://example.com/schema.json"}`, "tool schemas must be self-contained"},
		{"file ref refused", `{"$ref":"file:///etc/passwd"}`, "tool schemas must be self-contained"},
		{"relative ref refused", `{"$ref":"other.json"}`, "tool schemas must be self-contained"},
		{"missing local ref", `{"$ref":"#/$defs/nope"}`, "tool echo: invalid argument schema"},
		{"ref cycle", `{"$ref":"#"}`, "reference cycle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := argschema.Compile("echo", json.RawMessage(tt.schema))
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestEmptySchemaAcceptsAnyObject(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{``, `{}`} {
		s := mustCompile(t, schema)
		require.NoError(t, s.Validate(json.RawMessage(`{"anything":[1,{"x":null}]}`)))
		require.NoError(t, s.Validate(json.RawMessage(`{}`)))
		require.EqualError(t, s.Validate(json.RawMessage(`[]`)), "invalid arguments: args must be an object, got array (type)")
	}
}

func TestValidateConcurrent(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, echoSchema)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if (g+i)%2 == 0 {
					require.NoError(t, s.Validate(json.RawMessage(fmt.Sprintf(`{"text":"t%d","sleep_ms":%d}`, i, i))))
					continue
				}
				err := s.Validate(json.RawMessage(`{"sleep_ms":"x","progress":[{"percent":-1}],"extra":1}`))
				require.EqualError(t, err, "invalid arguments: args.extra is not allowed (additionalProperties); args.sleep_ms must be an integer, got string (type); args.text is required (required); and 2 more")
			}
		}()
	}
	wg.Wait()
}
