package file_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
	"github.com/capstanhq/capstan/internal/tools/file"
	"github.com/capstanhq/capstan/tool"
)

// searchTree is the fixture of the search_files tests; Foo occurs in every
// file, but only the searchable ones are reported.
func searchTree(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	e.write(t, "a.go", "package a\nfunc Foo() {}\n")
	e.write(t, "b.txt", "foo bar\nFoo baz\r\n")
	e.write(t, "sub/c.go", "// Foo here\n")
	e.write(t, ".git/config", "Foo\n")
	e.write(t, "node_modules/m/m.js", "Foo\n")
	e.write(t, "sub/node_modules/n.js", "Foo\n")
	e.write(t, "bin.dat", "Foo\n\x00\x01")
	e.write(t, "big.txt", "Foo\n"+strings.Repeat("x", file.MaxSearchFileBytes-3))         // one byte over
	e.write(t, "exact.txt", "Foo\n"+strings.Repeat("y", file.MaxSearchFileBytes-4))       // exactly the limit
	e.write(t, "late-nul.txt", "Foo\n"+strings.Repeat("z", file.BinarySniffBytes)+"\x00") // NUL after the sniffed bytes
	outside := filepath.Join(t.TempDir(), "outside.txt")
	require.NoError(t, os.WriteFile(outside, []byte("Foo\n"), 0o644))
	require.NoError(t, os.Symlink("a.go", e.p("lnk.go")))
	require.NoError(t, os.Symlink(".", e.p("loop")))
	require.NoError(t, os.Symlink(outside, e.p("out.txt")))
	return e
}

func TestSearchFiles(t *testing.T) {
	t.Parallel()
	e := searchTree(t)
	lines := func(rels ...string) string {
		for i, r := range rels {
			rels[i] = e.dir + "/" + r
		}
		return strings.Join(rels, "\n")
	}
	all := lines("a.go:2: func Foo() {}", "b.txt:2: Foo baz", "exact.txt:1: Foo", "late-nul.txt:1: Foo",
		"lnk.go:2: func Foo() {}", "sub/c.go:1: // Foo here")
	tests := []struct {
		name string
		args string
		want tool.Result
	}{
		{"every searchable file in name order", `{"pattern":"Foo"}`, tool.OK(all)},
		{"path dot", `{"pattern":"Foo","path":"."}`, tool.OK(all)},
		{"absolute path", jsonArgs(t, map[string]any{"pattern": "Foo", "path": e.dir}), tool.OK(all)},
		{"regexp anchors per line", `{"pattern":"^Foo"}`, tool.OK(lines("b.txt:2: Foo baz", "exact.txt:1: Foo", "late-nul.txt:1: Foo"))},
		{"case-insensitive flag", `{"pattern":"(?i)^foo b"}`, tool.OK(lines("b.txt:1: foo bar", "b.txt:2: Foo baz"))},
		{"glob on the base name", `{"pattern":"Foo","glob":"*.go"}`, tool.OK(lines("a.go:2: func Foo() {}", "lnk.go:2: func Foo() {}", "sub/c.go:1: // Foo here"))},
		{"sub directory", `{"pattern":"Foo","path":"sub"}`, tool.OK(lines("sub/c.go:1: // Foo here"))},
		{"one file", `{"pattern":"o","path":"b.txt"}`, tool.OK(lines("b.txt:1: foo bar", "b.txt:2: Foo baz"))},
		{"skipped directory searched when named", `{"pattern":"Foo","path":".git"}`, tool.OK(lines(".git/config:1: Foo"))},
		{
			"max_results stops the search", `{"pattern":"Foo","max_results":2}`,
			tool.OK(lines("a.go:2: func Foo() {}", "b.txt:2: Foo baz") + "\n[more matches not shown: max_results is 2]"),
		},
		{"max_results equal to the matches", `{"pattern":"Foo","max_results":6}`, tool.OK(all)},
		{"no matches", `{"pattern":"Nothing here"}`, tool.OK("No matches for Nothing here")},
		{
			"invalid pattern", `{"pattern":"("}`,
			tool.Fail(tool.CodeInputInvalid, "invalid arguments: args.pattern is not a valid Go regular expression: error parsing regexp: missing closing ): `(`"),
		},
		{
			"invalid glob", `{"pattern":"x","glob":"["}`,
			tool.Fail(tool.CodeInputInvalid, `invalid arguments: args.glob "[" is not a valid glob: syntax error in pattern`),
		},
		{
			"max_results out of bounds", `{"pattern":"x","max_results":201}`,
			tool.Fail(tool.CodeInputInvalid, "invalid arguments: args.max_results must be between 1 and 200"),
		},
		{
			"missing path", `{"pattern":"x","path":"nope"}`,
			tool.Fail(tool.CodeExecutionFailed, "Cannot search "+e.p("nope")+": file not found"),
		},
		{
			"outside the reach", `{"pattern":"x","path":"/etc"}`,
			tool.Fail(tool.CodeExecutionFailed, `Filesystem boundary: read of "/etc" is outside this personality's fs_reach allowlist.`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, e.run(t, file.SearchFiles(), tt.args))
		})
	}
}

func TestSearchFilesDefaultLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write(t, "many.txt", strings.Repeat("hit\n", 300))
	res := e.run(t, file.SearchFiles(), `{"pattern":"hit"}`)
	got := strings.Split(res.Value, "\n")
	require.Len(t, got, 51)
	require.Equal(t, e.p("many.txt")+":50: hit", got[49])
	require.Equal(t, "[more matches not shown: max_results is 50]", got[50])

	res = e.run(t, file.SearchFiles(), `{"pattern":"hit","max_results":200}`)
	require.Len(t, strings.Split(res.Value, "\n"), 201)
}

func TestSearchFilesLines(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write(t, "a.txt", "a\n\nb\n")
	require.Equal(t, tool.OK(e.p("a.txt")+":2: "), e.run(t, file.SearchFiles(), `{"pattern":"^$"}`),
		"an empty line matches, the segment after the final line break does not")
}

// TestSearchFilesSkipsFloor: entries the accessor refuses below the root
// are skipped, not reported.
func TestSearchFilesSkipsFloor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write(t, ".ssh/id_rsa", "secret Foo\n")
	e.write(t, ".bash_history", "echo Foo\n")
	e.write(t, "ok.txt", "Foo\n")
	e.tc.FS = scopedfs.New(&capability.FSGrant{Read: []string{e.dir}, WorkingDir: e.dir}, scopedfs.Config{Home: e.dir}, nil)
	require.Equal(t, tool.OK(e.p("ok.txt")+":1: Foo"), e.run(t, file.SearchFiles(), `{"pattern":"Foo"}`))
}

func TestSearchFilesCancelled(t *testing.T) {
	t.Parallel()
	e := searchTree(t)
	cause := errors.New("call timed out")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	_, err := file.SearchFiles().Execute(ctx, json.RawMessage(`{"pattern":"Foo"}`), e.tc)
	require.ErrorIs(t, err, cause)
}
