package file_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/internal/tools/file"
	"github.com/capstanhq/capstan/tool"
)

func TestReadFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   map[string]string
		args    func(e *env) string
		want    func(e *env) tool.Result
		records bool // the read is recorded
	}{
		{
			name:  "trailing newline counts a segment",
			files: map[string]string{"a.txt": "a\nb\n"},
			args:  func(*env) string { return `{"path":"a.txt"}` },
			want: func(e *env) tool.Result {
				return tool.OK("[" + e.p("a.txt") + "] 3 lines\n\na\nb\n")
			},
			records: true,
		},
		{
			name:    "one line is still lines",
			files:   map[string]string{"a.txt": "only"},
			args:    func(*env) string { return `{"path":"a.txt"}` },
			want:    func(e *env) tool.Result { return tool.OK("[" + e.p("a.txt") + "] 1 lines\n\nonly") },
			records: true,
		},
		{
			name:    "empty file",
			files:   map[string]string{"a.txt": ""},
			args:    func(*env) string { return `{"path":"a.txt"}` },
			want:    func(e *env) tool.Result { return tool.OK("[" + e.p("a.txt") + "] 1 lines\n\n") },
			records: true,
		},
		{
			name:    "absolute path",
			files:   map[string]string{"d/a.txt": "x\ny"},
			args:    func(e *env) string { return jsonArgs(t, map[string]any{"path": e.p("d/a.txt")}) },
			want:    func(e *env) tool.Result { return tool.OK("[" + e.p("d/a.txt") + "] 2 lines\n\nx\ny") },
			records: true,
		},
		{
			name:    "relative path is cleaned",
			files:   map[string]string{"d/a.txt": "x"},
			args:    func(*env) string { return `{"path":"d/../d/./a.txt"}` },
			want:    func(e *env) tool.Result { return tool.OK("[" + e.p("d/a.txt") + "] 1 lines\n\nx") },
			records: true,
		},
		{
			name:    "range",
			files:   map[string]string{"a.txt": "l1\nl2\nl3\nl4"},
			args:    func(*env) string { return `{"path":"a.txt","start_line":2,"end_line":3}` },
			want:    func(e *env) tool.Result { return tool.OK("[" + e.p("a.txt") + "] lines 2–3 of 4\n\nl2\nl3") },
			records: true,
		},
		{
			name:    "range end clamped",
			files:   map[string]string{"a.txt": "l1\nl2\nl3\nl4"},
			args:    func(*env) string { return `{"path":"a.txt","start_line":3,"end_line":99}` },
			want:    func(e *env) tool.Result { return tool.OK("[" + e.p("a.txt") + "] lines 3–4 of 4\n\nl3\nl4") },
			records: true,
		},
		{
			name:    "start_line only",
			files:   map[string]string{"a.txt": "l1\nl2\nl3\nl4"},
			args:    func(*env) string { return `{"path":"a.txt","start_line":4}` },
			want:    func(e *env) tool.Result { return tool.OK("[" + e.p("a.txt") + "] lines 4–4 of 4\n\nl4") },
			records: true,
		},
		{
			name:    "end_line only",
			files:   map[string]string{"a.txt": "l1\nl2\nl3\nl4"},
			args:    func(*env) string { return `{"path":"a.txt","end_line":2}` },
			want:    func(e *env) tool.Result { return tool.OK("[" + e.p("a.txt") + "] lines 1–2 of 4\n\nl1\nl2") },
			records: true,
		},
		{
			name:    "range on the empty last segment",
			files:   map[string]string{"a.txt": "a\nb\n"},
			args:    func(*env) string { return `{"path":"a.txt","start_line":2}` },
			want:    func(e *env) tool.Result { return tool.OK("[" + e.p("a.txt") + "] lines 2–3 of 3\n\nb\n") },
			records: true,
		},
		{
			name:  "start_line past the end",
			files: map[string]string{"a.txt": "l1\nl2\nl3\nl4"},
			args:  func(*env) string { return `{"path":"a.txt","start_line":5}` },
			want: func(e *env) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "start_line 5 is past the end of "+e.p("a.txt")+" (4 lines)")
			},
		},
		{
			name:  "end_line before start_line",
			files: map[string]string{"a.txt": "l1\nl2\nl3\nl4"},
			args:  func(*env) string { return `{"path":"a.txt","start_line":3,"end_line":2}` },
			want: func(*env) tool.Result {
				return tool.Fail(tool.CodeInputInvalid, "invalid arguments: args.end_line (2) must not be less than args.start_line (3)")
			},
		},
		{
			name: "missing file",
			args: func(*env) string { return `{"path":"nope/missing.txt"}` },
			want: func(e *env) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "Cannot read "+e.p("nope/missing.txt")+": file not found")
			},
		},
		{
			name:  "directory",
			files: map[string]string{"d/a.txt": "x"},
			args:  func(*env) string { return `{"path":"d"}` },
			want: func(e *env) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "Cannot read "+e.p("d")+": is a directory")
			},
		},
		{
			name:  "outside the reach",
			files: map[string]string{"a.txt": "x"},
			args:  func(*env) string { return `{"path":"/etc/hostname"}` },
			want: func(*env) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed,
					`Filesystem boundary: read of "/etc/hostname" is outside this personality's fs_reach allowlist.`)
			},
		},
		{
			name:  "dot-dot out of the reach",
			files: map[string]string{"a.txt": "x"},
			args:  func(*env) string { return `{"path":"../../x.txt"}` },
			want: func(e *env) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, `Filesystem boundary: read of "`+e.p("../../x.txt")+
					`" is outside this personality's fs_reach allowlist.`)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var abs string
			for rel, content := range tt.files {
				abs = e.write(t, rel, content)
			}
			require.Equal(t, tt.want(e), e.run(t, file.ReadFile(), tt.args(e)))
			if len(tt.files) == 1 {
				got, found := e.reads.get(abs)
				require.Equal(t, tt.records, found, "record of %s", abs)
				if tt.records {
					require.True(t, got.Equal(e.mtime(t, relOf(e, abs))), "recorded mtime %v", got)
				}
			}
		})
	}
}

func relOf(e *env, abs string) string { return strings.TrimPrefix(abs, e.dir+"/") }

func TestReadFileRefreshesRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	abs := e.write(t, "a.txt", "x")
	old := time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC)
	e.touch(t, "a.txt", old)
	require.True(t, e.run(t, file.ReadFile(), `{"path":"a.txt"}`).OK)
	got, _ := e.reads.get(abs)
	require.True(t, got.Equal(old))
	later := old.Add(time.Hour)
	e.touch(t, "a.txt", later)
	require.True(t, e.run(t, file.ReadFile(), `{"path":"a.txt","start_line":1}`).OK, "a ranged read records too")
	got, _ = e.reads.get(abs)
	require.True(t, got.Equal(later))
}

func TestReadFileOutsideAReadPrefix(t *testing.T) {
	t.Parallel()
	e := newEnvGrant(t, func(dir string) *capability.FSGrant {
		return &capability.FSGrant{Read: []string{dir + "/pub"}, Write: []string{dir}, WorkingDir: dir}
	})
	e.write(t, "pub/a.txt", "x")
	abs := e.write(t, "secret.txt", "s")
	require.Equal(t, "["+e.p("pub/a.txt")+"] 1 lines\n\nx", e.run(t, file.ReadFile(), `{"path":"pub/a.txt"}`).Value)
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, `Filesystem boundary: read of "`+abs+
		`" is outside this personality's fs_reach allowlist.`), e.run(t, file.ReadFile(), `{"path":"secret.txt"}`))
	_, found := e.reads.get(abs)
	require.False(t, found)
}

func TestReadFileRecordStoreFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	abs := e.write(t, "a.txt", "x")
	e.tc.Reads = brokenReads{}
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "Cannot record the read of "+abs+" for STALE_WRITE checks: kv unavailable"),
		e.run(t, file.ReadFile(), `{"path":"a.txt"}`))
}

func TestReadFileWithoutRecordStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write(t, "a.txt", "x")
	e.tc.Reads = nil
	require.True(t, e.run(t, file.ReadFile(), `{"path":"a.txt"}`).OK)
}

func TestReadFileCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write(t, "a.txt", "x")
	cause := fmt.Errorf("call cancelled")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	_, err := file.ReadFile().Execute(ctx, json.RawMessage(`{"path":"a.txt"}`), e.tc)
	require.ErrorIs(t, err, cause)
}

// TestReadFileReducer checks that read_file's value has the shape the
// worker's reducer (shape.ReadFileReducer) expects.
func TestReadFileReducer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lines := make([]string, 250)
	for i := range lines {
		lines[i] = fmt.Sprintf("line %d", i+1)
	}
	e.write(t, "long.txt", strings.Join(lines, "\n"))
	args := json.RawMessage(`{"path":"long.txt"}`)
	res := e.run(t, file.ReadFile(), string(args))
	require.True(t, strings.HasPrefix(res.Value, "["+e.p("long.txt")+"] 250 lines\n\nline 1\n"))
	got := shape.ReadFileReducer(res, args, e.tc)
	require.Equal(t, "File is 250 lines. Showing lines 1-200. Call read_file with start_line/end_line for more.\n"+
		strings.Join(lines[:200], "\n"), got.Value)

	ranged := json.RawMessage(`{"path":"long.txt","start_line":201}`)
	res = e.run(t, file.ReadFile(), string(ranged))
	require.Equal(t, "["+e.p("long.txt")+"] lines 201–250 of 250\n\n"+strings.Join(lines[200:], "\n"), res.Value)
	require.Equal(t, res, shape.ReadFileReducer(res, ranged, e.tc), "a ranged read is not reduced")
}
