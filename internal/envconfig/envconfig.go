// Package envconfig parses a binary's Config from environment variables with
// caarlos0/env, reading them through a getenv function (so tests never touch
// the real environment) and reporting errors that name the variable.
package envconfig

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Error lists configuration problems, each "VARIABLE: reason".
type Error struct{ Problems []string }

// Error joins the problems with "; ".
func (e *Error) Error() string { return strings.Join(e.Problems, "; ") }

// Parse fills dst (a pointer to a struct with `env` tags) from getenv; an
// empty value counts as unset. A parse failure is an *Error naming each
// variable, its value and what was expected.
func Parse(dst any, getenv func(string) string) error {
	vars := map[string]string{}
	fields := map[string]reflect.StructField{}
	collect(reflect.TypeOf(dst).Elem(), func(f reflect.StructField, key string) {
		fields[f.Name] = f
		if v := getenv(key); v != "" {
			vars[key] = v
		}
	})
	err := env.ParseWithOptions(dst, env.Options{Environment: vars})
	if err == nil {
		return nil
	}
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return &Error{Problems: []string{err.Error()}}
	}
	msgs := make([]string, 0, len(agg.Errors))
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if f, ok := fields[pe.Name]; ok {
				key := tagKey(f)
				msgs = append(msgs, fmt.Sprintf("%s: %q %s", key, vars[key], expected(f.Type)))
				continue
			}
		}
		msgs = append(msgs, e.Error())
	}
	return &Error{Problems: msgs}
}

func collect(t reflect.Type, fn func(reflect.StructField, string)) {
	for i := range t.NumField() {
		f := t.Field(i)
		if key := tagKey(f); key != "" {
			fn(f, key)
		} else if f.Type.Kind() == reflect.Struct {
			collect(f.Type, fn)
		}
	}
}

func tagKey(f reflect.StructField) string {
	tag, _, _ := strings.Cut(f.Tag.Get("env"), ",")
	return tag
}

func expected(t reflect.Type) string {
	switch {
	case t == reflect.TypeOf(time.Duration(0)):
		return "is not a duration (use Go format, e.g. 30s or 1m30s)"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "is not an integer"
	case t.Kind() == reflect.Bool:
		return "is not a boolean (true or false)"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "is not a number"
	}
	return "is not a valid " + t.String()
}
