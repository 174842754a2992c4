package shape_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
)

// numbered returns "line 1\nline 2\n...\nline n".
func numbered(from, to int) string {
	lines := make([]string, 0, to-from+1)
	for i := from; i <= to; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	return strings.Join(lines, "\n")
}

func TestReadFileReducer(t *testing.T) {
	t.Parallel()
	const note = ". Showing lines 1-200. Call read_file with start_line/end_line for more.\n"
	file := func(content string, n int) string { return fmt.Sprintf("[/w/f.txt] %d lines\n\n%s", n, content) }
	structured := map[string]any{"k": "v"}
	tests := []struct {
		name string
		res  tool.Result
		args string
		want tool.Result
	}{
		{"201 lines reduced", tool.OK(file(numbered(1, 201), 201)), `{"path":"f.txt"}`, tool.OK("File is 201 lines" + note + numbered(1, 200))},
		{"5000 lines reduced", tool.OK(file(numbered(1, 5000), 5000)), `{"path":"f.txt"}`, tool.OK("File is 5000 lines" + note + numbered(1, 200))},
		{"trailing newline is a line", tool.OK(file(numbered(1, 200)+"\n", 201)), `{"path":"f.txt"}`, tool.OK("File is 201 lines" + note + numbered(1, 200))},
		{"200 lines kept", tool.OK(file(numbered(1, 200), 200)), `{"path":"f.txt"}`, tool.OK(file(numbered(1, 200), 200))},
		{"null range is no range", tool.OK(file(numbered(1, 201), 201)), `{"path":"f.txt","start_line":null,"end_line":null}`, tool.OK("File is 201 lines" + note + numbered(1, 200))},
		{"start_line kept", tool.OK(file(numbered(1, 300), 300)), `{"path":"f.txt","start_line":1}`, tool.OK(file(numbered(1, 300), 300))},
		{"end_line kept", tool.OK(file(numbered(1, 300), 300)), `{"path":"f.txt","end_line":300}`, tool.OK(file(numbered(1, 300), 300))},
		{"ranged value kept", tool.OK("[/w/f.txt] lines 1–300 of 900\n\n" + numbered(1, 300)), `{"path":"f.txt"}`, tool.OK("[/w/f.txt] lines 1–300 of 900\n\n" + numbered(1, 300))},
		{"other value kept", tool.OK(numbered(1, 300)), `{"path":"f.txt"}`, tool.OK(numbered(1, 300))},
		{"error kept", tool.Fail(tool.CodeExecutionFailed, numbered(1, 300)), `{"path":"f.txt"}`, tool.Fail(tool.CodeExecutionFailed, numbered(1, 300))},
		{"structured kept", tool.Result{OK: true, Value: file(numbered(1, 201), 201), Structured: structured}, `{"path":"f.txt"}`, tool.Result{OK: true, Value: "File is 201 lines" + note + numbered(1, 200), Structured: structured}},
		{"path with brackets", tool.OK("[/w/[x] y] 201 lines\n\n" + numbered(1, 201)), `{"path":"f.txt"}`, tool.OK("File is 201 lines" + note + numbered(1, 200))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, shape.ReadFileReducer(tt.res, json.RawMessage(tt.args), &tool.Context{}))
		})
	}
}

func TestTerminalReducer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		res  tool.Result
		want tool.Result
	}{
		{"200 lines kept", tool.OK(numbered(1, 200)), tool.OK(numbered(1, 200))},
		{"201 lines", tool.OK(numbered(1, 201)), tool.OK(numbered(1, 100) + "\n... [1 lines omitted] ...\n" + numbered(102, 201))},
		{"1000 lines", tool.OK(numbered(1, 1000)), tool.OK(numbered(1, 100) + "\n... [800 lines omitted] ...\n" + numbered(901, 1000))},
		{"trailing newline is a line", tool.OK(numbered(1, 300) + "\n"), tool.OK(numbered(1, 100) + "\n... [101 lines omitted] ...\n" + numbered(202, 300) + "\n")},
		{
			"error message",
			tool.Fail(tool.CodeExecutionFailed, "Command exited with error (code 1):\n"+numbered(1, 300)),
			tool.Fail(tool.CodeExecutionFailed, "Command exited with error (code 1):\n"+numbered(1, 99)+"\n... [101 lines omitted] ...\n"+numbered(201, 300)),
		},
		{"short error kept", tool.Fail(tool.CodeExecutionFailed, "boom"), tool.Fail(tool.CodeExecutionFailed, "boom")},
		{"empty", tool.OK(""), tool.OK("")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, shape.TerminalReducer(tt.res, nil, nil))
		})
	}
}

func TestBuiltinReducersRegister(t *testing.T) {
	t.Parallel()
	r := shape.NewReducers()
	_, err := r.Register("read_file", shape.ReadFileReducer)
	require.NoError(t, err)
	_, err = r.Register("terminal", shape.TerminalReducer)
	require.NoError(t, err)
	got, reduced := r.Apply("terminal", tool.OK(numbered(1, 201)), json.RawMessage(`{"command":"seq 201"}`), &tool.Context{})
	require.True(t, reduced)
	require.Contains(t, got.Value, "... [1 lines omitted] ...")
}
