package argschema_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/argschema"
)

func FuzzValidate(f *testing.F) {
	schemas := []*argschema.Schema{
		mustCompile(f, echoSchema),
		mustCompile(f, ``),
		mustCompile(f, `{"properties":{"x":{"anyOf":[{"type":"string","format":"email"},{"type":"object","required":["id"],"additionalProperties":{"type":"integer","maximum":10}}]},"l":{"type":"array","uniqueItems":true,"items":{"enum":[1,"a",null]},"maxItems":3}},"propertyNames":{"maxLength":5},"minProperties":1}`),
	}
	f.Add(`{"text":"hi"}`)
	f.Add(`{"text":5,"sleep_ms":600001,"progress":[{"percent":-1,"audience":"x"}],"more":1}`)
	f.Add(`{"x":{"id":1,"y":11},"l":[1,1,"b",2]}`)
	f.Add(`[1,2]`)
	f.Add(`{"a":`)
	f.Add(``)
	f.Fuzz(func(t *testing.T, args string) {
		isObject := false
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(args), &m) == nil && m != nil {
			isObject = true
		}
		for i, s := range schemas {
			err := s.Validate(json.RawMessage(args))
			if err == nil {
				if !isObject && strings.TrimSpace(args) != "" {
					t.Fatalf("schema %d accepted non-object args %q", i, args)
				}
				continue
			}
			if !errors.Is(err, argschema.ErrInvalidArguments) || !strings.HasPrefix(err.Error(), "invalid arguments: ") {
				t.Fatalf("schema %d: unexpected error %v", i, err)
			}
			if again := s.Validate(json.RawMessage(args)); again == nil || again.Error() != err.Error() {
				t.Fatalf("schema %d: not deterministic: %v then %v", i, err, again)
			}
		}
	})
}
