package tool_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

type weatherArgs struct {
	City  string   `json:"city"`
	Days  int      `json:"days,omitempty"`
	Units *string  `json:"units"`
	Tags  []string `json:"tags"`
}

func TestTypedDecodesOnce(t *testing.T) {
	t.Parallel()
	var got weatherArgs
	calls := 0
	exec := tool.Typed(func(_ context.Context, a weatherArgs, _ *tool.Context) (tool.Result, error) {
		calls++
		got = a
		return tool.OK(a.City), nil
	})
	for _, tc := range []struct {
		name, raw string
		want      tool.Result
		called    bool
	}{
		{"decoded", `{"city":"Oslo","days":2,"tags":["a"]}`, tool.OK("Oslo"), true},
		{"empty leaves A zero", ``, tool.OK(""), true},
		{"null leaves A zero", `null`, tool.OK(""), true},
		{"field of the wrong type", `{"city":"Oslo","days":"two"}`, tool.InvalidArguments("args.days must be an integer, got string"), false},
		{"not an object", `[]`, tool.InvalidArguments("args must be an object, got array"), false},
		{"not JSON", `{`, tool.InvalidArguments("args must be a JSON object: unexpected end of JSON input"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls, got = 0, weatherArgs{}
			res, err := exec(context.Background(), json.RawMessage(tc.raw), nil)
			require.NoError(t, err)
			require.Equal(t, tc.want, res)
			require.Equal(t, tc.called, calls == 1)
		})
	}
	_, _ = exec(context.Background(), json.RawMessage(`{"city":"Oslo","days":2,"tags":["a"]}`), nil)
	require.Equal(t, weatherArgs{City: "Oslo", Days: 2, Tags: []string{"a"}}, got)
	require.Equal(t, tool.Result{Code: tool.CodeInputInvalid, Error: "invalid arguments: x"}, tool.InvalidArguments("x"))
}

func TestCheckSchema(t *testing.T) {
	t.Parallel()
	good := `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"units":{"type":["string","null"]},"tags":{"type":"array"}},"required":["city"]}`
	require.NoError(t, tool.CheckSchema[weatherArgs](json.RawMessage(good)))
	bad := `{"type":"object","properties":{"city":{"type":"integer"},"country":{"type":"string"},"units":{},"tags":{"type":"array"}},"required":["city","zip"]}`
	err := tool.CheckSchema[weatherArgs](json.RawMessage(bad))
	require.EqualError(t, err, `field tool_test.weatherArgs.Days (json "days") is not in the schema's properties; `+
		`required property "zip" is no field of tool_test.weatherArgs; `+
		`schema property "city" is integer, field tool_test.weatherArgs.City is string (string); `+
		`schema property "country" is no field of tool_test.weatherArgs`)
	require.EqualError(t, tool.CheckSchema[string](nil), "arguments type string is not a struct")
}
