package tool_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

type shoutArgs struct {
	Text  string `json:"text"`
	Times int    `json:"times,omitempty"`
}

// A tool whose Execute receives its arguments decoded, with a schema that
// CheckSchema keeps equal to the arguments type.
func ExampleTyped() {
	shout := tool.Tool{
		Name:        "shout",
		Description: "Repeats text in capitals.",
		Schema: json.RawMessage(`{"type":"object","properties":{
			"text":{"type":"string"},"times":{"type":"integer","minimum":1,"maximum":5}},
			"required":["text"],"additionalProperties":false}`),
		Execute: tool.Typed(func(ctx context.Context, a shoutArgs, tc *tool.Context) (tool.Result, error) {
			if strings.TrimSpace(a.Text) == "" {
				return tool.InvalidArguments("args.text must not be blank"), nil
			}
			return tool.OK(strings.Repeat(strings.ToUpper(a.Text), max(a.Times, 1))), nil
		}),
	}
	fmt.Println(shout.Validate(), tool.CheckSchema[shoutArgs](shout.Schema))

	// The worker validates arguments against the schema first; called
	// directly, Execute still refuses what does not decode.
	for _, args := range []string{`{"text":"hey ","times":2}`, `{"text":" "}`, `{"text":1}`} {
		r, _ := shout.Execute(context.Background(), json.RawMessage(args), &tool.Context{})
		if r.OK {
			fmt.Printf("ok: %q\n", r.Value)
		} else {
			fmt.Printf("%s: %s\n", r.Code, r.Error)
		}
	}
	// Output:
	// <nil> <nil>
	// ok: "HEY HEY "
	// input_invalid: invalid arguments: args.text must not be blank
	// input_invalid: invalid arguments: args.text must be a string, got number
}
