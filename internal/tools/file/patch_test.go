package file_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/tools/file"
	"github.com/capstanhq/capstan/tool"
)

func TestPatchFile(t *testing.T) {
	t.Parallel()
	// numbered returns n lines, each holding one "x".
	numbered := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString("x" + strings.Repeat("-", i) + "\n")
		}
		return b.String()
	}
	tests := []struct {
		name     string
		content  string
		old, new string
		want     func(abs string) tool.Result
		after    string // content on disk afterwards
	}{
		{
			name: "one match", content: "func a() {\n\treturn 1\n}\n", old: "return 1", new: "return 2",
			want:  func(abs string) tool.Result { return tool.OK("Patched " + abs) },
			after: "func a() {\n\treturn 2\n}\n",
		},
		{
			name: "delete", content: "keep drop keep", old: " drop", new: "",
			want:  func(abs string) tool.Result { return tool.OK("Patched " + abs) },
			after: "keep keep",
		},
		{
			name: "multi-line old_text", content: "a\nb\nc\n", old: "a\nb\n", new: "B\n",
			want:  func(abs string) tool.Result { return tool.OK("Patched " + abs) },
			after: "B\nc\n",
		},
		{
			name: "already applied", content: "x = 2\n", old: "x = 1", new: "x = 2",
			want: func(abs string) tool.Result {
				return tool.OK("No change: the patch is already applied at " + abs + ".")
			},
			after: "x = 2\n",
		},
		{
			name: "not found", content: "x = 3\n", old: "x = 1", new: "x = 2",
			want: func(abs string) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "old_text not found in "+abs+". Use read_file to verify the exact content.")
			},
			after: "x = 3\n",
		},
		{
			name: "not found and new_text twice", content: "y\ny\n", old: "x", new: "y",
			want: func(abs string) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "old_text not found in "+abs+". Use read_file to verify the exact content.")
			},
			after: "y\ny\n",
		},
		{
			name: "not found and new_text empty", content: "abc", old: "x", new: "",
			want: func(abs string) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "old_text not found in "+abs+". Use read_file to verify the exact content.")
			},
			after: "abc",
		},
		{
			name: "whitespace matters", content: "a  b", old: "a b", new: "c",
			want: func(abs string) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "old_text not found in "+abs+". Use read_file to verify the exact content.")
			},
			after: "a  b",
		},
		{
			name: "two matches", content: "v = 1\nw = 2\nv = 1\n", old: "v = 1", new: "v = 9",
			want: func(abs string) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "old_text matches 2 locations in "+abs+" (lines 1, 3).")
			},
			after: "v = 1\nw = 2\nv = 1\n",
		},
		{
			name: "overlapping matches", content: "aaa", old: "aa", new: "b",
			want: func(abs string) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "old_text matches 2 locations in "+abs+" (lines 1).")
			},
			after: "aaa",
		},
		{
			name: "lines listed once", content: "x x\nx\n", old: "x", new: "y",
			want: func(abs string) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "old_text matches 3 locations in "+abs+" (lines 1, 2).")
			},
			after: "x x\nx\n",
		},
		{
			name: "ten lines listed in full", content: numbered(10), old: "x", new: "y",
			want: func(abs string) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "old_text matches 10 locations in "+abs+" (lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10).")
			},
			after: numbered(10),
		},
		{
			name: "more than ten", content: numbered(11), old: "x", new: "y",
			want: func(abs string) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "old_text matches 11 locations in "+abs+" (lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, …).")
			},
			after: numbered(11),
		},
		{
			name: "many more", content: "\n\n" + numbered(30) + "x", old: "x", new: "y",
			want: func(abs string) tool.Result {
				return tool.Fail(tool.CodeExecutionFailed, "old_text matches 31 locations in "+abs+" (lines 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, …).")
			},
			after: "\n\n" + numbered(30) + "x",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			abs := e.write(t, "f.txt", tt.content)
			res := e.run(t, file.PatchFile(), jsonArgs(t, map[string]any{"path": "f.txt", "old_text": tt.old, "new_text": tt.new}))
			require.Equal(t, tt.want(abs), res)
			require.Equal(t, tt.after, e.read(t, "f.txt"))
			got, found := e.reads.get(abs)
			require.Equal(t, res.Value == "Patched "+abs, found, "only a patch that wrote records")
			if found {
				require.True(t, got.Equal(e.mtime(t, "f.txt")))
			}
		})
	}
}

func TestPatchFileMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "Cannot read "+e.p("nope.txt")+": file not found"),
		e.run(t, file.PatchFile(), `{"path":"nope.txt","old_text":"a","new_text":"b"}`))
}

func TestPatchFileBoundary(t *testing.T) {
	t.Parallel()
	e := newEnvGrant(t, func(dir string) *capability.FSGrant {
		return &capability.FSGrant{Read: []string{dir + "/src"}, Write: []string{dir + "/src/out"}, WorkingDir: dir}
	})
	ro := e.write(t, "src/a.txt", "a")
	hidden := e.write(t, "b.txt", "a")
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, `Filesystem boundary: write of "`+ro+
		`" is outside this personality's fs_reach allowlist.`),
		e.run(t, file.PatchFile(), `{"path":"src/a.txt","old_text":"a","new_text":"b"}`))
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, `Filesystem boundary: read of "`+hidden+
		`" is outside this personality's fs_reach allowlist.`),
		e.run(t, file.PatchFile(), `{"path":"b.txt","old_text":"a","new_text":"b"}`))
	require.Equal(t, "a", e.read(t, "src/a.txt"))

	e.write(t, "src/out/c.txt", "a")
	require.Equal(t, tool.OK("Patched "+e.p("src/out/c.txt")), e.run(t, file.PatchFile(), `{"path":"src/out/c.txt","old_text":"a","new_text":"b"}`))
	require.Equal(t, "b", e.read(t, "src/out/c.txt"))
}
