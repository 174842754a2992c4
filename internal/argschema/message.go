package argschema

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// printer renders the library's messages for the fallback.
var printer = message.NewPrinter(language.English)

// maxEnumShown is how many allowed values an enum message lists.
const maxEnumShown = 20

// problem is one failed rule at one field, ready to print.
type problem struct {
	field []string // instance location of the field the message is about
	path  string   // field rendered from args, e.g. args.progress[0].percent
	text  string   // what is wrong and the rule, e.g. "must be at most 10 (maximum)"
}

// String returns "<path> <text>".
func (p problem) String() string { return p.path + " " + p.text }

// problems turns a validation error of instance v into sorted, deduplicated
// problems, one per failed rule (and per property for required and
// additionalProperties).
func problems(verr *jsonschema.ValidationError, v any) []problem {
	var out []problem
	collect(verr, func(field []string, text string) {
		out = append(out, problem{field: field, path: renderPath(v, field), text: text})
	})
	slices.SortFunc(out, func(a, b problem) int {
		return cmp.Or(cmp.Compare(len(a.field), len(b.field)), cmp.Compare(a.String(), b.String()))
	})
	return slices.CompactFunc(out, func(a, b problem) bool { return a.String() == b.String() })
}

// collect walks e down to the failures worth reporting and calls add for each.
func collect(e *jsonschema.ValidationError, add func(field []string, text string)) {
	loc := e.InstanceLocation
	child := func(name string) []string { return append(slices.Clip(loc), name) }
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf, *kind.Reference:
		if len(e.Causes) == 0 {
			add(loc, fallback(e))
		}
		for _, c := range e.Causes {
			collect(c, add)
		}
	case *kind.AnyOf:
		collectAlternatives(e, "anyOf", add)
	case *kind.OneOf:
		if len(k.Subschemas) >= 2 {
			add(loc, fmt.Sprintf("must match exactly one of the allowed alternatives, but matched alternatives %d and %d (oneOf)", k.Subschemas[0], k.Subschemas[1]))
			return
		}
		collectAlternatives(e, "oneOf", add)
	case *kind.Required:
		for _, m := range k.Missing {
			add(child(m), "is required (required)")
		}
	case *kind.DependentRequired:
		for _, m := range k.Missing {
			add(child(m), fmt.Sprintf("is required when %s is present (dependentRequired)", quote(k.Prop)))
		}
	case *kind.Dependency:
		for _, m := range k.Missing {
			add(child(m), fmt.Sprintf("is required when %s is present (dependencies)", quote(k.Prop)))
		}
	case *kind.AdditionalProperties:
		for _, p := range k.Properties {
			add(child(p), "is not allowed (additionalProperties)")
		}
	case *kind.FalseSchema:
		add(loc, "is not allowed (false schema)")
	default:
		add(loc, leafText(e))
	}
}

// collectAlternatives reports a failed anyOf/oneOf at e. Alternatives that
// failed only because the value has another type are set aside: when exactly
// one alternative is left, its own problems are reported; when none is left,
// one type problem lists every type allowed; otherwise one problem says that no
// alternative matched.
func collectAlternatives(e *jsonschema.ValidationError, rule string, add func([]string, string)) {
	var wants []string
	var got string
	var left []*jsonschema.ValidationError
	for _, c := range e.Causes {
		if t, ok := typeMismatch(c, e.InstanceLocation); ok {
			got = t.Got
			for _, w := range t.Want {
				if !slices.Contains(wants, w) {
					wants = append(wants, w)
				}
			}
			continue
		}
		left = append(left, c)
	}
	switch {
	case len(left) == 1:
		collect(left[0], add)
	case len(left) == 0 && len(wants) > 0:
		add(e.InstanceLocation, fmt.Sprintf("must be %s, got %s (type)", typeList(wants), got))
	default:
		add(e.InstanceLocation, fmt.Sprintf("does not match any of the allowed alternatives (%s)", rule))
	}
}

// typeMismatch reports whether alternative c failed only on the type of the
// value at loc, and returns that failure.
func typeMismatch(c *jsonschema.ValidationError, loc []string) (*kind.Type, bool) {
	for {
		if t, ok := c.ErrorKind.(*kind.Type); ok && slices.Equal(c.InstanceLocation, loc) {
			return t, true
		}
		if len(c.Causes) != 1 {
			return nil, false
		}
		switch c.ErrorKind.(type) {
		case *kind.Schema, *kind.Group, *kind.AllOf, *kind.Reference:
			c = c.Causes[0]
		default:
			return nil, false
		}
	}
}

// leafText describes one failed rule, after the field path.
func leafText(e *jsonschema.ValidationError) string {
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return fmt.Sprintf("must be %s, got %s (type)", typeList(k.Want), k.Got)
	case *kind.Minimum:
		return fmt.Sprintf("must be at least %s (minimum)", ratString(k.Want))
	case *kind.Maximum:
		return fmt.Sprintf("must be at most %s (maximum)", ratString(k.Want))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("must be greater than %s (exclusiveMinimum)", ratString(k.Want))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("must be less than %s (exclusiveMaximum)", ratString(k.Want))
	case *kind.MultipleOf:
		return fmt.Sprintf("must be a multiple of %s (multipleOf)", ratString(k.Want))
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %s long, got %d (minLength)", plural(k.Want, "character"), k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %s long, got %d (maxLength)", plural(k.Want, "character"), k.Got)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %s, got %d (minItems)", plural(k.Want, "item"), k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %s, got %d (maxItems)", plural(k.Want, "item"), k.Got)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %s, got %d (minProperties)", plural(k.Want, "property"), k.Got)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %s, got %d (maxProperties)", plural(k.Want, "property"), k.Got)
	case *kind.UniqueItems:
		return fmt.Sprintf("must not contain equal items, but items %d and %d are equal (uniqueItems)", k.Duplicates[0], k.Duplicates[1])
	case *kind.Enum:
		if len(k.Want) == 1 {
			return fmt.Sprintf("must be %s (enum)", jsonText(k.Want[0]))
		}
		shown := make([]string, 0, min(len(k.Want), maxEnumShown)+1)
		for i, w := range k.Want {
			if i == maxEnumShown {
				shown = append(shown, "...")
				break
			}
			shown = append(shown, jsonText(w))
		}
		return fmt.Sprintf("must be one of %s (enum)", strings.Join(shown, ", "))
	case *kind.Const:
		return fmt.Sprintf("must be %s (const)", jsonText(k.Want))
	case *kind.Pattern:
		return fmt.Sprintf("must match the pattern %s (pattern)", quote(k.Want))
	case *kind.Format:
		return fmt.Sprintf("must be a valid %s (format)", k.Want)
	case *kind.PropertyNames:
		return fmt.Sprintf("has an invalid property name %s (propertyNames)", quote(k.Property))
	case *kind.Contains:
		return "must contain at least one matching item (contains)"
	case *kind.MinContains:
		return fmt.Sprintf("must contain at least %s, got %d (minContains)", plural(k.Want, "matching item"), len(k.Got))
	case *kind.MaxContains:
		return fmt.Sprintf("must contain at most %s, got %d (maxContains)", plural(k.Want, "matching item"), len(k.Got))
	case *kind.AdditionalItems:
		return fmt.Sprintf("has %s more than allowed (additionalItems)", plural(k.Count, "item"))
	case *kind.Not:
		return "must not match the schema given in not (not)"
	default:
		return fallback(e)
	}
}

// fallback is the library's own message followed by the rule.
func fallback(e *jsonschema.ValidationError) string {
	rule := strings.Join(e.ErrorKind.KeywordPath(), "/")
	if rule == "" {
		rule = "schema"
	}
	return fmt.Sprintf("is invalid: %s (%s)", e.ErrorKind.LocalizedString(printer), rule)
}

// typeList is "a string", "a string or null", "a number, a string or null":
// the types in the library's order, null last.
func typeList(types []string) string {
	if i := slices.Index(types, "null"); i >= 0 && i < len(types)-1 {
		types = append(slices.Delete(slices.Clone(types), i, i+1), "null")
	}
	named := make([]string, len(types))
	for i, t := range types {
		switch t {
		case "null":
			named[i] = "null"
		case "integer", "object", "array":
			named[i] = "an " + t
		default:
			named[i] = "a " + t
		}
	}
	if len(named) <= 1 {
		return strings.Join(named, "")
	}
	return strings.Join(named[:len(named)-1], ", ") + " or " + named[len(named)-1]
}

// plural is "1 item", "2 items", "3 properties".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if base, ok := strings.CutSuffix(noun, "y"); ok {
		return strconv.Itoa(n) + " " + base + "ies"
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// ratString writes r exactly when it is a finite decimal (600000, 0.05,
// -2.5), else as the nearest float64.
func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	d := new(big.Int).Set(r.Denom())
	digits := 0
	for _, p := range []int64{2, 5} {
		n, m := 0, new(big.Int)
		bp := big.NewInt(p)
		for {
			q, rem := new(big.Int).QuoRem(d, bp, m)
			if rem.Sign() != 0 {
				break
			}
			d, n = q, n+1
		}
		digits = max(digits, n)
	}
	if d.Cmp(big.NewInt(1)) == 0 && digits <= 64 {
		return r.FloatString(digits)
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// jsonText writes a schema value as compact JSON without HTML escaping.
func jsonText(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// quote writes s as a JSON string: double quotes, control characters escaped.
func quote(s string) string { return jsonText(s) }

// identRE matches the keys rendered as .key in a field path.
var identRE = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

// renderPath renders an instance location in v as args, args.a.b, args.list[0]
// or args["odd key"]; a token is an index when the value it indexes is an
// array.
func renderPath(v any, loc []string) string {
	var b strings.Builder
	b.WriteString("args")
	for _, tok := range loc {
		if arr, ok := v.([]any); ok {
			if i, err := strconv.Atoi(tok); err == nil && i >= 0 && i < len(arr) {
				b.WriteString("[" + tok + "]")
				v = arr[i]
				continue
			}
		}
		if identRE.MatchString(tok) {
			b.WriteString("." + tok)
		} else {
			b.WriteString("[" + quote(tok) + "]")
		}
		if m, ok := v.(map[string]any); ok {
			v = m[tok]
		} else {
			v = nil
		}
	}
	return b.String()
}
