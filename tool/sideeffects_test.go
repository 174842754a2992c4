package tool_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

func TestSideEffects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in        tool.SideEffects
		effective tool.SideEffects
		lease     bool
		err       string
	}{
		{"", tool.SideEffectsExclusive, true, ""},
		{tool.SideEffectsNone, tool.SideEffectsNone, false, ""},
		{tool.SideEffectsIdempotent, tool.SideEffectsIdempotent, false, ""},
		{tool.SideEffectsExclusive, tool.SideEffectsExclusive, true, ""},
		{"readonly", "readonly", false, `side effects "readonly" must be none, idempotent or exclusive`},
		{"Exclusive", "Exclusive", false, `side effects "Exclusive" must be none, idempotent or exclusive`},
	} {
		t.Run(string(tc.in), func(t *testing.T) {
			require.Equal(t, tc.effective, tc.in.Effective())
			err := tc.in.Validate()
			if tc.err != "" {
				require.EqualError(t, err, tc.err)
				tl := tool.Tool{Name: "t", SideEffects: tc.in, Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
					return tool.OK(""), nil
				}}
				require.EqualError(t, tl.Validate(), "tool t: "+tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.lease, tc.in.NeedsLease())
		})
	}
}
