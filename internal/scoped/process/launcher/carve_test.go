package launcher_test

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
)

// probeMode makes the test binary try file operations (probeFiles).
const probeMode = "probe"

// probeFiles tries each "<op> <path>" of args (op: read, list or write)
// and prints one JSON object: each argument to "ok" or the system error.
func probeFiles(args []string) int {
	out := map[string]string{}
	for _, a := range args {
		op, path, _ := strings.Cut(a, " ")
		var err error
		switch op {
		case "read":
			_, err = os.ReadFile(path)
		case "list":
			_, err = os.ReadDir(path)
		case "write":
			err = os.WriteFile(path, []byte("x"), 0o644)
		default:
			return 2
		}
		out[a] = "ok"
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			out[a] = pe.Err.Error()
		} else if err != nil {
			out[a] = err.Error()
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return 3
	}
	return 0
}

// probeUnder runs probeFiles with ops through a real launcher (this test
// binary) confined by spec plus what the binary needs to run, calling
// before between building the ruleset and starting the launcher.
func probeUnder(t *testing.T, spec launcher.Spec, before func(), ops ...string) map[string]string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	exe, err = filepath.EvalSymlinks(exe)
	require.NoError(t, err)
	spec.Landlock = true
	spec.Read = append(spec.Read, "/usr", "/lib", "/lib64", "/etc/ld.so.cache", filepath.Dir(exe))
	c := exec.Command(exe)
	c.Env = []string{helperEnv + "=" + probeMode}
	h, err := launcher.Prepare(c, spec, exe, append([]string{exe}, ops...))
	require.NoError(t, err)
	if before != nil {
		before()
	}
	stdout, err := c.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c.Start())
	_, err = h.Await()
	require.NoError(t, err)
	b, err := io.ReadAll(stdout)
	require.NoError(t, err)
	require.NoError(t, c.Wait(), "stdout %q", b)
	var out map[string]string
	require.NoError(t, json.Unmarshal(b, &out), "stdout %q", b)
	return out
}

// floorTree is a directory tree to carve:
//
//	dir/secret, dir/ok, dir/sub/deep, side/file
//	link-secret -> dir/secret, link-dir -> dir, link-out -> <other>/file
//
// where other is a directory outside it.
type floorTree struct{ root, other string }

func newFloorTree(t *testing.T) floorTree {
	t.Helper()
	tr := floorTree{root: realTempDir(t), other: realTempDir(t)}
	for _, d := range []string{"dir/sub", "side"} {
		require.NoError(t, os.MkdirAll(tr.p(d), 0o755))
	}
	for _, f := range []string{"dir/secret", "dir/ok", "dir/sub/deep", "side/file"} {
		require.NoError(t, os.WriteFile(tr.p(f), []byte(f), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(tr.other, "file"), []byte("other"), 0o644))
	require.NoError(t, os.Symlink("dir/secret", tr.p("link-secret")))
	require.NoError(t, os.Symlink("dir", tr.p("link-dir")))
	require.NoError(t, os.Symlink(filepath.Join(tr.other, "file"), tr.p("link-out")))
	return tr
}

// p is the path of name in the tree.
func (tr floorTree) p(name string) string { return filepath.Join(tr.root, name) }

func realTempDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return dir
}

// TestRulesetCarvesTheFloor: a rule that holds a floor path grants
// everything around it and nothing of it, whatever name it is reached by.
func TestRulesetCarvesTheFloor(t *testing.T) {
	t.Parallel()
	if _, err := launcher.ABI(); err != nil {
		t.Skipf("needs Landlock: %v", err)
	}
	const denied, ok, missing = "permission denied", "ok", "no such file or directory"
	tests := []struct {
		name string
		spec func(tr floorTree) launcher.Spec
		// before runs once the ruleset is built, before the child starts.
		before func(t *testing.T, tr floorTree)
		want   map[string]string // "<op> <name in the tree>" → outcome
	}{
		{
			name: "without a floor, as on main before: everything under the rule",
			spec: func(tr floorTree) launcher.Spec { return launcher.Spec{Read: []string{tr.root}} },
			want: map[string]string{"read dir/secret": ok, "read link-secret": ok, "read dir/ok": ok, "list .": ok, "list dir": ok},
		},
		{
			name: "a read rule around a floor file",
			spec: func(tr floorTree) launcher.Spec {
				return launcher.Spec{Read: []string{tr.root}, Floor: []string{tr.p("dir/secret")}}
			},
			want: map[string]string{
				"read dir/secret": denied, "read link-secret": denied, "read link-dir/secret": denied,
				"read dir/ok": ok, "read dir/sub/deep": ok, "read side/file": ok, "list side": ok, "list dir/sub": ok,
				// Expanded directories get no right of their own.
				"list .": denied, "list dir": denied,
				// A symlink entry is not followed out of the rule.
				"read link-out": denied,
			},
		},
		{
			name: "a floor path named through a symlink",
			spec: func(tr floorTree) launcher.Spec {
				return launcher.Spec{Read: []string{tr.root}, Floor: []string{tr.p("link-dir/secret")}}
			},
			want: map[string]string{"read dir/secret": denied, "read link-secret": denied, "read dir/ok": ok},
		},
		{
			name: "a floor directory",
			spec: func(tr floorTree) launcher.Spec {
				return launcher.Spec{Read: []string{tr.root}, Floor: []string{tr.p("dir")}}
			},
			want: map[string]string{"read dir/secret": denied, "read dir/sub/deep": denied, "list dir": denied, "read link-dir/ok": denied, "read side/file": ok},
		},
		{
			name: "a rule inside the floor is dropped",
			spec: func(tr floorTree) launcher.Spec {
				return launcher.Spec{Read: []string{tr.p("dir/secret"), tr.p("dir/ok"), tr.p("side")}, Floor: []string{tr.p("dir")}}
			},
			want: map[string]string{"read dir/secret": denied, "read dir/ok": denied, "read side/file": ok},
		},
		{
			name: "a rule reaching the floor through a symlink is dropped",
			spec: func(tr floorTree) launcher.Spec {
				return launcher.Spec{Read: []string{tr.p("link-dir"), tr.p("link-secret")}, Floor: []string{tr.p("dir")}}
			},
			want: map[string]string{"read dir/ok": denied, "read link-dir/ok": denied, "read dir/secret": denied},
		},
		{
			name: "a lift opens what it covers of the floor, as an allowed prefix inside /root does",
			spec: func(tr floorTree) launcher.Spec {
				return launcher.Spec{Read: []string{tr.root, tr.p("dir/sub")}, Floor: []string{tr.p("dir")}, Lift: []string{tr.p("dir/sub")}}
			},
			want: map[string]string{"read dir/sub/deep": ok, "list dir/sub": ok, "read dir/ok": denied, "read dir/secret": denied, "read side/file": ok},
		},
		{
			name: "a lifted rule is still carved around the floor inside it",
			spec: func(tr floorTree) launcher.Spec {
				return launcher.Spec{Read: []string{tr.p("dir")}, Floor: []string{tr.p("dir"), tr.p("dir/secret")}, Lift: []string{tr.p("dir")}}
			},
			want: map[string]string{"read dir/ok": ok, "read dir/sub/deep": ok, "read dir/secret": denied},
		},
		{
			name: "a write rule is carved the same",
			spec: func(tr floorTree) launcher.Spec {
				return launcher.Spec{Write: []string{tr.root}, Floor: []string{tr.p("dir/secret")}}
			},
			want: map[string]string{
				"write dir/secret": denied, "read dir/secret": denied, "write link-secret": denied,
				"write dir/ok": ok, "write dir/sub/new": ok, "write side/new": ok, "read side/file": ok,
				// No entry is created directly in an expanded directory.
				"write new": denied, "write dir/new": denied,
			},
		},
		{
			name: "an entry created after the ruleset is in no rule",
			spec: func(tr floorTree) launcher.Spec {
				return launcher.Spec{Read: []string{tr.root}, Floor: []string{tr.p("dir/secret")}}
			},
			before: func(t *testing.T, tr floorTree) {
				require.NoError(t, os.WriteFile(tr.p("late"), []byte("late"), 0o644))
			},
			want: map[string]string{"read late": denied, "read dir/ok": ok},
		},
		{
			name: "a hard link to a floor file in an expanded directory",
			spec: func(tr floorTree) launcher.Spec {
				require.NoError(t, os.Link(tr.p("dir/secret"), tr.p("dir/hard")))
				return launcher.Spec{Read: []string{tr.root}, Floor: []string{tr.p("dir/secret")}}
			},
			want: map[string]string{"read dir/hard": denied, "read dir/ok": ok},
		},
		{
			name: "a floor path that does not exist",
			spec: func(tr floorTree) launcher.Spec {
				return launcher.Spec{Read: []string{tr.root}, Floor: []string{tr.p("dir/later/key")}}
			},
			before: func(t *testing.T, tr floorTree) {
				require.NoError(t, os.MkdirAll(tr.p("dir/later"), 0o755))
				require.NoError(t, os.WriteFile(tr.p("dir/later/key"), []byte("key"), 0o644))
			},
			want: map[string]string{"read dir/later/key": denied, "read dir/ok": ok, "read nothing": missing},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newFloorTree(t)
			var ops []string
			want := map[string]string{}
			for k, v := range tt.want {
				op, name, _ := strings.Cut(k, " ")
				ops = append(ops, op+" "+tr.p(name))
				want[op+" "+tr.p(name)] = v
			}
			var before func()
			if tt.before != nil {
				before = func() { tt.before(t, tr) }
			}
			require.Equal(t, want, probeUnder(t, tt.spec(tr), before, ops...))
		})
	}
}

func TestRulesetRefusesARelativeFloor(t *testing.T) {
	t.Parallel()
	_, err := launcher.Ruleset(launcher.Spec{Landlock: true, Floor: []string{"etc/shadow"}})
	require.EqualError(t, err, `path "etc/shadow" must be absolute and clean`)
	_, err = launcher.Ruleset(launcher.Spec{Landlock: true, Lift: []string{"/root/../etc"}})
	require.EqualError(t, err, `path "/root/../etc" must be absolute and clean`)
}
