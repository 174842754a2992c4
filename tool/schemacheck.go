package tool

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// CheckSchema reports whether an object schema and the arguments type A of
// a Typed tool describe the same top-level fields: every property of the
// schema is a JSON field of A and the other way round, with compatible
// kinds (string, integer, number, boolean, array, object; a float field
// for an integer property is fine), and every
// required property is a field of A. It returns nil or an error listing
// every difference. A tool's test calls it so that the explicit schema and
// the struct cannot drift apart:
//
//	require.NoError(t, tool.CheckSchema[weatherArgs](weather.Tool().Schema))
func CheckSchema[A any](schema json.RawMessage) error {
	t := reflect.TypeFor[A]()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return fmt.Errorf("arguments type %s is not a struct", t)
	}
	var s struct {
		Properties map[string]struct {
			Type json.RawMessage `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if len(schema) > 0 {
		if err := json.Unmarshal(schema, &s); err != nil {
			return fmt.Errorf("schema: %w", err)
		}
	}
	fields := jsonFields(t)
	var problems []string
	for name, p := range s.Properties {
		f, ok := fields[name]
		if !ok {
			problems = append(problems, fmt.Sprintf("schema property %q is no field of %s", name, t))
			continue
		}
		if kinds := schemaTypes(p.Type); len(kinds) > 0 && !compatible(kinds, goKind(f.Type)) {
			problems = append(problems, fmt.Sprintf("schema property %q is %s, field %s.%s is %s (%s)", name, strings.Join(kinds, " or "), t, f.Name, goKind(f.Type), f.Type))
		}
	}
	for name, f := range fields {
		if _, ok := s.Properties[name]; !ok {
			problems = append(problems, fmt.Sprintf("field %s.%s (json %q) is not in the schema's properties", t, f.Name, name))
		}
	}
	for _, name := range s.Required {
		if _, ok := fields[name]; !ok {
			problems = append(problems, fmt.Sprintf("required property %q is no field of %s", name, t))
		}
	}
	slices.Sort(problems)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// jsonFields returns the exported fields of struct t by JSON name,
// following embedded structs as encoding/json does (one level is enough
// for argument types).
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	fields := map[string]reflect.StructField{}
	for f := range t.Fields() {
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for n, sf := range jsonFields(ft) {
					fields[n] = sf
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f
	}
	return fields
}

// compatible reports whether a field of Go kind k decodes every value of
// the schema types kinds: the same kind, any JSON value for an interface or
// json.RawMessage, and integers for a float (which lets a tool accept 1e4
// as a whole number and check it itself).
func compatible(kinds []string, k string) bool {
	return k == "any" || slices.Contains(kinds, k) || (k == "number" && slices.Contains(kinds, "integer"))
}

// schemaTypes reads a schema's "type": a string or an array of strings,
// without "null".
func schemaTypes(raw json.RawMessage) []string {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(raw, &many)
	return slices.DeleteFunc(many, func(s string) bool { return s == "null" })
}

// goKind is the JSON Schema type a Go type decodes from.
func goKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[json.RawMessage]() {
		return "any"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	case reflect.Interface:
		return "any"
	}
	return t.Kind().String()
}
