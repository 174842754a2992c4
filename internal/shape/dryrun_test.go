package shape_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/shape"
)

func TestDryRun(t *testing.T) {
	t.Parallel()
	const prefix = "[dry-run] echo would be called with: "
	a500 := strings.Repeat("a", 500)
	e500 := strings.Repeat("é", 500)
	emoji500 := strings.Repeat("😀", 500)
	tests := []struct {
		name string
		args string
		want string
	}{
		{"keys sorted", `{"b":1,"a":"x"}`, `{"a":"x","b":1}`},
		{"keys sorted at every depth", `{"z":{"y":1,"x":[{"d":1,"c":2}]},"a":null}`, `{"a":null,"z":{"x":[{"c":2,"d":1}],"y":1}}`},
		{"compact", "{ \"a\" : [ 1 , 2 ] ,\n\t\"b\" : { } }", `{"a":[1,2],"b":{}}`},
		{"numbers exact", `{"big":12345678901234567890123,"dec":1.50,"exp":1e400,"neg":-0.0,"tiny":4.9e-324}`, `{"big":12345678901234567890123,"dec":1.50,"exp":1e400,"neg":-0.0,"tiny":4.9e-324}`},
		{"literals", `{"t":true,"f":false,"n":null}`, `{"f":false,"n":null,"t":true}`},
		{"html not escaped", `{"q":"<a & b>"}`, `{"q":"<a & b>"}`},
		{"escapes kept", `{"s":"line\nbreak \"q\" \\ \t"}`, `{"s":"line\nbreak \"q\" \\ \t"}`},
		{"unicode escape decoded", `{"s":"\u00e9"}`, `{"s":"é"}`},
		{"500 code points kept", `{"s":"` + a500 + `"}`, `{"s":"` + a500 + `"}`},
		{"501 code points cut", `{"s":"` + a500 + `b"}`, `{"s":"` + a500 + `...[truncated, 501 chars]"}`},
		{"two-byte code points", `{"s":"` + e500 + `éé"}`, `{"s":"` + e500 + `...[truncated, 502 chars]"}`},
		{"four-byte code points", `{"s":"` + emoji500 + `😀"}`, `{"s":"` + emoji500 + `...[truncated, 501 chars]"}`},
		{"500 two-byte code points kept", `{"s":"` + e500 + `"}`, `{"s":"` + e500 + `"}`},
		{"escaped characters count once", `{"s":"` + strings.Repeat(`\n`, 501) + `"}`, `{"s":"` + strings.Repeat(`\n`, 500) + `...[truncated, 501 chars]"}`},
		{"nested in array and object", `{"l":[{"s":"` + a500 + `cc"}],"o":{"p":"` + a500 + `d"}}`, `{"l":[{"s":"` + a500 + `...[truncated, 502 chars]"}],"o":{"p":"` + a500 + `...[truncated, 501 chars]"}}`},
		{"keys never cut", `{"` + a500 + `zz":1}`, `{"` + a500 + `zz":1}`},
		{"empty args", ``, `{}`},
		{"whitespace args", " \n", `{}`},
		{"top-level array", `[3,"x"]`, `[3,"x"]`},
		{"top-level string", `"` + a500 + `x"`, `"` + a500 + `...[truncated, 501 chars]"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := shape.DryRun("echo", json.RawMessage(tt.args))
			require.NoError(t, err)
			require.Equal(t, prefix+tt.want, got)
		})
	}
}

func TestDryRunErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args string
	}{
		{"invalid JSON", `{"a":`},
		{"trailing data", `{"a":1} {"b":2}`},
		{"trailing garbage", `{"a":1}x`},
		{"bare word", `nope`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := shape.DryRun("echo", json.RawMessage(tt.args))
			require.ErrorContains(t, err, "dry run of echo: args are not valid JSON")
		})
	}
}
