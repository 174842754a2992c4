package tool

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"

	jsonv1 "github.com/go-json-experiment/json/v1"
)

// ExecuteFunc is the type of Tool.Execute.
type ExecuteFunc = func(ctx context.Context, args json.RawMessage, c *Context) (Result, error)

// Typed returns an Execute function that decodes the call's arguments into
// a new A (usually a struct with json tags matching the tool's Schema) and
// calls fn with it:
//
//	type weatherArgs struct {
//		City string `json:"city"`
//	}
//
//	Execute: tool.Typed(func(ctx context.Context, a weatherArgs, c *tool.Context) (tool.Result, error) {
//		return tool.OK("sunny in " + a.City), nil
//	}),
//
// The worker validates the arguments against Schema before Execute runs, so
// decoding fails only when Schema and A disagree or Execute is called
// directly; then the result is InvalidArguments naming the field
// ("args.start_line must be an integer, got string") and fn is not called.
// Empty or null arguments leave A zero. CheckSchema tests that Schema and A
// agree.
func Typed[A any](fn func(ctx context.Context, args A, c *Context) (Result, error)) ExecuteFunc {
	decode := decodeArgs
	if holdsNumber(reflect.TypeFor[A]()) {
		decode = decodeArgsStd
	}
	return func(ctx context.Context, raw json.RawMessage, c *Context) (Result, error) {
		var a A
		if len(raw) > 0 {
			if msg, ok := decode(raw, &a); !ok {
				return InvalidArguments(msg), nil
			}
		}
		return fn(ctx, a, c)
	}
}

// InvalidArguments returns the input_invalid result of arguments the tool
// refuses, "invalid arguments: " followed by msg, the wording of the
// worker's schema check ("args.path is required and must not be empty").
func InvalidArguments(msg string) Result {
	return Fail(CodeInputInvalid, "invalid arguments: "+msg)
}

// decodeArgs unmarshals raw into v and returns the message of a failure.
// It reads raw in one pass with go-json-experiment's v1 API, which keeps
// encoding/json's semantics but for one type: encoding/json.Number, which
// encoding/json alone decodes from a number. Typed uses decodeArgsStd for
// argument types that hold one (holdsNumber).
func decodeArgs(raw json.RawMessage, v any) (msg string, ok bool) {
	err := jsonv1.Unmarshal(raw, v)
	if err == nil {
		return "", true
	}
	var te *jsonv1.UnmarshalTypeError
	if !errors.As(err, &te) {
		return "args must be a JSON object: " + err.Error(), false
	}
	return typeErrorMessage(te.Field, te.Type, te.Value), false
}

// decodeArgsStd is decodeArgs on encoding/json (two passes over raw).
func decodeArgsStd(raw json.RawMessage, v any) (msg string, ok bool) {
	err := json.Unmarshal(raw, v)
	if err == nil {
		return "", true
	}
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return "args must be a JSON object: " + err.Error(), false
	}
	return typeErrorMessage(te.Field, te.Type, te.Value), false
}

// typeErrorMessage says which field of the arguments has the wrong kind.
func typeErrorMessage(field string, t reflect.Type, value string) string {
	if field == "" {
		return "args must be an object, got " + value
	}
	return "args." + field + " must be " + kindName(t) + ", got " + value
}

// holdsNumber reports whether a value of type t can hold an
// encoding/json.Number anywhere (fields, elements, map keys and values,
// through pointers).
func holdsNumber(t reflect.Type) bool { return holdsNumberSeen(t, map[reflect.Type]bool{}) }

func holdsNumberSeen(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == reflect.TypeFor[json.Number]() {
		return true
	}
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return holdsNumberSeen(t.Elem(), seen)
	case reflect.Map:
		return holdsNumberSeen(t.Key(), seen) || holdsNumberSeen(t.Elem(), seen)
	case reflect.Struct:
		for f := range t.Fields() {
			if holdsNumberSeen(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// kindName names the JSON kind of a Go type with its article: "a string",
// "an integer", ... (goKind's kinds).
func kindName(t reflect.Type) string {
	k := goKind(t)
	switch k[0] {
	case 'a', 'e', 'i', 'o', 'u':
		return "an " + k
	}
	return "a " + k
}
