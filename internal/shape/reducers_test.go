package shape_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
)

func upper(res tool.Result, _ json.RawMessage, _ *tool.Context) tool.Result {
	res.Value = "reduced:" + res.Value
	res.Error = "reduced:" + res.Error
	return res
}

func TestReducersApply(t *testing.T) {
	t.Parallel()
	r := shape.NewReducers()
	_, err := r.Register("echo", upper)
	require.NoError(t, err)

	tests := []struct {
		name        string
		tool        string
		res         tool.Result
		want        tool.Result
		wantReduced bool
	}{
		{"ok result", "echo", tool.OK("x"), tool.Result{OK: true, Value: "reduced:x", Error: "reduced:"}, true},
		{"error result", "echo", tool.Fail(tool.CodeExecutionFailed, "boom"), tool.Result{Code: tool.CodeExecutionFailed, Value: "reduced:", Error: "reduced:boom"}, true},
		{"no reducer", "other", tool.OK("x"), tool.OK("x"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, reduced := r.Apply(tt.tool, tt.res, nil, nil)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.wantReduced, reduced)
		})
	}
}

func TestReducersPassArgsAndContext(t *testing.T) {
	t.Parallel()
	r := shape.NewReducers()
	c := &tool.Context{CallID: "c1"}
	_, err := r.Register("t", func(res tool.Result, args json.RawMessage, got *tool.Context) tool.Result {
		res.Value = string(args) + " " + got.CallID
		return res
	})
	require.NoError(t, err)
	got, reduced := r.Apply("t", tool.OK(""), json.RawMessage(`{"a":1}`), c)
	require.True(t, reduced)
	require.Equal(t, `{"a":1} c1`, got.Value)
}

func TestReducersRegisterErrors(t *testing.T) {
	t.Parallel()
	r := shape.NewReducers()
	_, err := r.Register("echo", upper)
	require.NoError(t, err)

	_, err = r.Register("echo", upper)
	require.ErrorIs(t, err, shape.ErrReducerExists)
	require.EqualError(t, err, "register reducer for echo: reducer already registered")

	_, err = r.Register("", upper)
	require.EqualError(t, err, "register reducer: tool name is empty")

	_, err = r.Register("x", nil)
	require.EqualError(t, err, "register reducer for x: reducer is nil")
}

func TestReducersUnregister(t *testing.T) {
	t.Parallel()
	r := shape.NewReducers()
	first := func(res tool.Result, _ json.RawMessage, _ *tool.Context) tool.Result { return tool.OK("first") }
	second := func(res tool.Result, _ json.RawMessage, _ *tool.Context) tool.Result { return tool.OK("second") }

	unregFirst, err := r.Register("t", first)
	require.NoError(t, err)
	unregFirst()
	unregFirst() // idempotent
	_, reduced := r.Apply("t", tool.OK("x"), nil, nil)
	require.False(t, reduced)

	unregSecond, err := r.Register("t", second)
	require.NoError(t, err, "the name is free again after unregister")
	unregFirst() // must not remove the later registration
	got, reduced := r.Apply("t", tool.OK("x"), nil, nil)
	require.True(t, reduced)
	require.Equal(t, "second", got.Value)

	unregSecond()
	_, reduced = r.Apply("t", tool.OK("x"), nil, nil)
	require.False(t, reduced)
}

func TestReducersPanicKeepsOriginal(t *testing.T) {
	t.Parallel()
	r := shape.NewReducers()
	_, err := r.Register("boom", func(res tool.Result, _ json.RawMessage, _ *tool.Context) tool.Result {
		res.Structured["changed"] = true // in place, then panic
		res.Structured["nested"].(map[string]any)["k"] = "changed"
		*res.CostUSD = 99
		panic("reducer bug")
	})
	require.NoError(t, err)
	_, err = r.Register("nilpanic", func(tool.Result, json.RawMessage, *tool.Context) tool.Result { panic(nil) })
	require.NoError(t, err)

	cost := 0.5
	in := tool.Result{OK: true, Value: "v", Structured: map[string]any{"nested": map[string]any{"k": "v"}}, CostUSD: &cost}
	got, reduced := r.Apply("boom", in, nil, nil)
	require.False(t, reduced)
	require.Equal(t, in, got)
	require.Equal(t, map[string]any{"nested": map[string]any{"k": "v"}}, got.Structured)
	require.Equal(t, 0.5, *got.CostUSD)

	got, reduced = r.Apply("nilpanic", tool.Fail(tool.CodeExecutionFailed, "e"), nil, nil)
	require.False(t, reduced)
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "e"), got)
}

func TestReducersNil(t *testing.T) {
	t.Parallel()
	var r *shape.Reducers
	got, reduced := r.Apply("t", tool.OK("x"), nil, nil)
	require.False(t, reduced)
	require.Equal(t, tool.OK("x"), got)
}

func TestReducersConcurrent(t *testing.T) {
	t.Parallel()
	r := shape.NewReducers()
	_, err := r.Register("stable", upper)
	require.NoError(t, err)

	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("tool_%d", g%4) // goroutines compete for 4 names
			for range 200 {
				if unreg, err := r.Register(name, upper); err == nil {
					_, _ = r.Apply(name, tool.OK("x"), nil, nil)
					unreg()
					unreg()
				} else {
					require.ErrorIs(t, err, shape.ErrReducerExists)
				}
				got, reduced := r.Apply("stable", tool.OK("x"), nil, nil)
				require.True(t, reduced)
				require.Equal(t, "reduced:x", got.Value)
			}
		}()
	}
	wg.Wait()
	for i := range 4 {
		_, reduced := r.Apply(fmt.Sprintf("tool_%d", i), tool.OK("x"), nil, nil)
		require.False(t, reduced, "every registration was removed")
	}
}
