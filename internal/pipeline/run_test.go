package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/capstanhq/capstan/internal/pipeline"
	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

func TestCallAndOutcome(t *testing.T) {
	t.Parallel()
	panics := tool.Tool{Name: "p", Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) { panic("no") }}
	res, err := pipeline.Call(context.Background(), &panics, nil, &tool.Context{})
	require.EqualError(t, err, "tool p panicked: no")
	require.Equal(t, tool.Result{}, res)

	for _, tc := range []struct {
		name    string
		res     tool.Result
		err     error
		want    tool.Result
		wantErr error
	}{
		{"ok", tool.OK("v"), nil, tool.OK("v"), nil},
		{"error", tool.Result{}, errors.New("broke"), tool.Fail(tool.CodeExecutionFailed, "broke"), nil},
		{"infrastructure", tool.Result{}, fmt.Errorf("kv: %w", tool.ErrUnavailable), tool.Result{}, tool.ErrUnavailable},
		{"unknown code", tool.Result{Code: "weird", Error: "x"}, nil, tool.Fail(tool.CodeExecutionFailed, "x"), nil},
		{"no message", tool.Result{Code: tool.CodeNotAvailable}, nil, tool.Fail(tool.CodeNotAvailable, "tool t failed without a message"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := pipeline.Outcome("t", tc.res, tc.err)
			require.Equal(t, tc.want, got)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
		})
	}
}
