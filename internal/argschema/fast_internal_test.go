package argschema

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// subsetSchemas are schemas within the fast subset (echo's, and one with
// every keyword of the subset).
var subsetSchemas = []string{
	`{"type":"object","properties":{"text":{"type":"string","description":"returned unchanged"},"sleep_ms":{"type":"integer","minimum":0,"maximum":600000},
	  "progress":{"type":"array","items":{"type":"object","properties":{"message":{"type":"string"},"percent":{"type":"number","minimum":0,"maximum":100},
	  "audience":{"type":"string","enum":["internal","user","dashboard"]}},"required":["message"],"additionalProperties":false}}},
	  "required":["text"],"additionalProperties":false}`,
	`{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"t","properties":{"n":{"type":"null"},"b":{"type":"boolean"},
	  "i":{"minimum":-5},"e":{"enum":["a","b"]},"o":{"type":"object","additionalProperties":true,"properties":{"x":{"type":"integer","maximum":3}}},
	  "l":{"type":"array"},"any":{}},"required":["b"]}`,
}

func compileInternal(t testing.TB, schema string) *Schema {
	t.Helper()
	s, err := Compile("t", json.RawMessage(schema))
	require.NoError(t, err)
	return s
}

func TestFastSubset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		schema string
		subset bool
	}{
		{"echo", subsetSchemas[0], true},
		{"every keyword of the subset", subsetSchemas[1], true},
		{"empty", ``, true},
		{"format", `{"properties":{"e":{"type":"string","format":"email"}}}`, false},
		{"pattern", `{"properties":{"e":{"type":"string","pattern":"^a"}}}`, false},
		{"type list", `{"properties":{"e":{"type":["string","null"]}}}`, false},
		{"fractional bound", `{"properties":{"e":{"type":"number","maximum":1.5}}}`, false},
		{"enum of numbers", `{"properties":{"e":{"enum":[1,2]}}}`, false},
		{"additionalProperties schema", `{"additionalProperties":{"type":"string"}}`, false},
		{"boolean subschema", `{"properties":{"e":true}}`, false},
		{"ref", `{"$defs":{"a":{"type":"string"}},"properties":{"e":{"$ref":"#/$defs/a"}}}`, false},
		{"another draft", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`, false},
		{"nested $schema", `{"properties":{"e":{"$schema":"https://json-schema.org/draft/2020-12/schema"}}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.subset, compileInternal(t, tc.schema).fast != nil)
		})
	}
}

func TestFastAnswersValidCalls(t *testing.T) {
	t.Parallel()
	s := compileInternal(t, subsetSchemas[0])
	for _, tc := range []struct {
		args string
		fast bool // the subset answers (valid for certain)
	}{
		{`{"text":"hi"}`, true},
		{`{"text":"hi","sleep_ms":10}`, true},
		{`{"text":"hi","sleep_ms":600000,"progress":[{"message":"m","percent":50,"audience":"user"}]}`, true},
		{`{"text":"hi","sleep_ms":10.0}`, false},                             // valid, but left to the library
		{`{"text":"hi","progress":[{"message":"m","percent":50.5}]}`, false}, // the same
		{`{"text":"hi","sleep_ms":600001}`, false},
		{`{"text":"hi","sleep_ms":-1}`, false},
		{`{"sleep_ms":1}`, false},
		{`{"text":1}`, false},
		{`{"text":"hi","other":1}`, false},
		{`{"text":"hi","progress":[{"percent":5}]}`, false},
		{`{"text":"hi","progress":[{"message":"m","audience":"x"}]}`, false},
	} {
		v, err := decode([]byte(tc.args))
		require.NoError(t, err)
		require.Equal(t, tc.fast, s.fast.validArgs([]byte(tc.args)), tc.args)
		if tc.fast {
			require.NoError(t, s.sch.Validate(v), tc.args)
		}
	}
}

// FuzzFastAgreesWithLibrary checks the subset's one claim: what it calls
// valid, the library calls valid.
func FuzzFastAgreesWithLibrary(f *testing.F) {
	var schemas []*Schema
	for _, sc := range subsetSchemas {
		schemas = append(schemas, compileInternal(f, sc))
	}
	f.Add(`{"text":"hi","sleep_ms":10}`)
	f.Add(`{"text":"hi","sleep_ms":1e1,"progress":[{"message":"m","percent":100,"audience":"dashboard"}]}`)
	f.Add(`{"b":true,"n":null,"i":-5,"e":"a","o":{"x":3,"y":"z"},"l":[1,"a"],"any":{"q":[]}}`)
	f.Add(`{"b":false,"i":-9223372036854775809,"o":{"x":-0}}`)
	f.Add(`{"text":"a","text":1}`)
	f.Add(`{"b":true,"e":"\u0061","i":-9223372036854775808}`)
	f.Fuzz(func(t *testing.T, args string) {
		v, err := decode([]byte(args))
		if err != nil {
			for i, s := range schemas {
				if s.fast.validArgs([]byte(args)) {
					t.Fatalf("schema %d: the subset reads %q as valid, decode refuses it: %v", i, args, err)
				}
			}
			return
		}
		for i, s := range schemas {
			if s.fast.validArgs([]byte(args)) {
				if err := s.sch.Validate(v); err != nil {
					t.Fatalf("schema %d: the subset accepts %s, the library refuses it: %v", i, args, err)
				}
			}
		}
	})
}

func TestFastReadOnceEdges(t *testing.T) {
	t.Parallel()
	s := compileInternal(t, subsetSchemas[1])
	for _, tc := range []struct {
		args string
		fast bool
	}{
		{`{"b":true}`, true},
		{`{"b":true,"e":"\u0061"}`, true},                    // an escaped enum value
		{`{"b":true,"\u0062":false}`, true},                  // an escaped member name
		{`{"b":true,"o":{"x":-9223372036854775808}}`, true},  // the smallest int64
		{`{"b":true,"o":{"x":-9223372036854775809}}`, false}, // past it: the library's
		{`{"b":true,"o":{"x":3,"y":[1,{"z":null}]}}`, true},  // open object, skipped values
		{`{"b":true,"o":{"x":4}}`, false},
		{`{"b":true,"e":"c"}`, false},
		{`{"b":true,"e":1}`, false},
		{`{"b":true,"n":0}`, false},
		{`{"b":true} {}`, false},    // data after the value
		{`[{"b":true}]`, false},     // not an object
		{`{"b":true,"b":1}`, false}, // a repeated member: every occurrence must be valid
		{`{"i":1}`, false},          // b is required
	} {
		require.Equal(t, tc.fast, s.fast.validArgs([]byte(tc.args)), tc.args)
	}
}
