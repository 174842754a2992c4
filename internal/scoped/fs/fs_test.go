package fs_test

import (
	"context"
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
	"github.com/capstanhq/capstan/tool"
)

// tree is a fixture directory:
//
//	r/     read prefix (working dir): files, links of every kind, floor entries
//	r2/    second read prefix
//	data/, data2/  data is readable, data2 is not
//	w/, w2/  write prefixes
//	worker/secrets.env  a worker file on Config.Floor, outside the reach
//	secret.txt  outside the reach
type tree struct {
	base string
	cfg  scopedfs.Config
}

func (tr tree) p(rel string) string { return filepath.Join(tr.base, rel) }

func (tr tree) grant() *capability.FSGrant {
	return &capability.FSGrant{
		Read:       []string{tr.p("r"), tr.p("r2"), tr.p("data")},
		Write:      []string{tr.p("w"), tr.p("w2")},
		WorkingDir: tr.p("r"),
	}
}

func newTree(t testing.TB) tree {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	tr := tree{base: base}
	files := map[string]string{
		"r/file.txt":          "in r",
		"r/sub/nested.txt":    "nested",
		"r/own.secret":        "worker secret in reach",
		"r/.ssh/id_rsa":       "private key",
		"r/.bash_history":     "history",
		"r2/other.txt":        "in r2",
		"data/d.txt":          "data",
		"data2/x.txt":         "data2",
		"w/wfile.txt":         "in w",
		"w/dir/keep.txt":      "keep",
		"w2/existing.txt":     "in w2",
		"worker/secrets.env":  "TOKEN=worker",
		"secret.txt":          "SECRET",
		"r/sub/deeper/f3.txt": "deep",
	}
	for rel, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(tr.p(rel)), 0o755))
		require.NoError(t, os.WriteFile(tr.p(rel), []byte(content), 0o644))
	}
	links := map[string]string{
		"r/rel-link":      "file.txt",
		"r/abs-link":      tr.p("r/file.txt"),
		"r/sub/up-link":   "../file.txt",
		"r/to-r2":         "../r2/other.txt",
		"r/to-r2-abs":     tr.p("r2/other.txt"),
		"r/out-rel":       "../secret.txt",
		"r/out-abs":       tr.p("secret.txt"),
		"r/to-data2":      "../data2/x.txt",
		"r/dir-link":      "sub",
		"r/escape-dir":    "..",
		"r/loop-a":        "loop-b",
		"r/loop-b":        "loop-a",
		"r/chain1":        "chain2",
		"r/chain2":        "sub/up-link",
		"r/to-w":          "../w/wfile.txt",
		"r/to-ssh":        ".ssh/id_rsa",
		"r/to-worker":     tr.p("worker/secrets.env"),
		"r/dangling":      "nothing-here",
		"r/link-dot-dot":  "sub/../file.txt",
		"w/link-to-r":     "../r/file.txt",
		"w/link-to-w2":    "../w2/linked.txt",
		"w/link-to-w2abs": tr.p("w2/existing.txt"),
		"w/esc":           "..",
		"w/dangling":      "created-by-link.txt",
		"alias":           "worker",
	}
	for rel, target := range links {
		require.NoError(t, os.Symlink(target, tr.p(rel)))
	}
	require.NoError(t, syscall.Mkfifo(tr.p("r/fifo"), 0o644))
	require.NoError(t, syscall.Mkfifo(tr.p("w/fifo"), 0o644))
	require.NoError(t, os.Link(tr.p("worker/secrets.env"), tr.p("r/hard-secret")))
	tr.cfg = scopedfs.Config{
		Home: tr.p("r"),
		// The worker lists its secrets file itself, so a hard link to it is
		// caught by identity; its data directory is listed as a directory.
		Floor: []string{tr.p("r/own.secret"), tr.p("worker"), tr.p("worker/secrets.env")},
	}
	return tr
}

// denials records onDeny calls.
type denials struct {
	mu   sync.Mutex
	errs []error
}

func (d *denials) record(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, err)
}

func (d *denials) all() []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]error(nil), d.errs...)
}

// requireOutcome checks err against a wanted denial message (exact), a
// wanted error kind, or success; and that onDeny saw exactly the denials.
func requireOutcome(t *testing.T, d *denials, err error, wantDeny string, wantIs error) {
	t.Helper()
	switch {
	case wantDeny != "":
		require.EqualError(t, err, wantDeny)
		require.ErrorIs(t, err, tool.ErrPathNotReachable)
		code, ok := tool.DenialCode(err)
		require.True(t, ok)
		require.Equal(t, "PATH_NOT_REACHABLE", code)
		require.Equal(t, []error{err}, d.all(), "onDeny must see the denial once")
	case wantIs != nil:
		require.ErrorIs(t, err, wantIs)
		require.NotErrorIs(t, err, tool.ErrPathNotReachable)
		require.Empty(t, d.all())
	default:
		require.NoError(t, err)
		require.Empty(t, d.all())
	}
}

func TestReadFile(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	deny := func(rel string) string { return "PATH_NOT_REACHABLE: read not permitted for " + tr.p(rel) }
	tests := []struct {
		name     string
		path     string
		wantData string
		wantAbs  string
		wantDeny string
		wantIs   error
	}{
		{name: "relative joined to working dir", path: "file.txt", wantData: "in r", wantAbs: tr.p("r/file.txt")},
		{name: "absolute", path: tr.p("r/sub/nested.txt"), wantData: "nested", wantAbs: tr.p("r/sub/nested.txt")},
		{name: "lexical dot-dot inside", path: "sub/../file.txt", wantData: "in r", wantAbs: tr.p("r/file.txt")},
		{name: "dot-dot through a dir link is lexical", path: "dir-link/../file.txt", wantData: "in r", wantAbs: tr.p("r/file.txt")},
		{name: "dot-dot escape refused", path: "../secret.txt", wantDeny: deny("secret.txt")},
		{name: "deep dot-dot escape refused", path: "sub/../../secret.txt", wantDeny: deny("secret.txt")},
		{name: "data covers data", path: tr.p("data/d.txt"), wantData: "data", wantAbs: tr.p("data/d.txt")},
		{name: "data does not cover data2", path: tr.p("data2/x.txt"), wantDeny: deny("data2/x.txt")},
		{name: "write-only prefix is not readable", path: tr.p("w/wfile.txt"), wantDeny: deny("w/wfile.txt")},
		{name: "relative link in same prefix", path: "rel-link", wantData: "in r", wantAbs: tr.p("r/rel-link")},
		{name: "absolute link in same prefix", path: "abs-link", wantData: "in r", wantAbs: tr.p("r/abs-link")},
		{name: "link with dot-dot in target", path: "sub/up-link", wantData: "in r", wantAbs: tr.p("r/sub/up-link")},
		{name: "link target with dot-dot inside", path: "link-dot-dot", wantData: "in r", wantAbs: tr.p("r/link-dot-dot")},
		{name: "link chain", path: "chain1", wantData: "in r", wantAbs: tr.p("r/chain1")},
		{name: "directory link", path: "dir-link/nested.txt", wantData: "nested", wantAbs: tr.p("r/dir-link/nested.txt")},
		{name: "relative link into other read prefix", path: "to-r2", wantData: "in r2", wantAbs: tr.p("r/to-r2")},
		{name: "absolute link into other read prefix", path: "to-r2-abs", wantData: "in r2", wantAbs: tr.p("r/to-r2-abs")},
		{name: "relative link outside refused", path: "out-rel", wantDeny: deny("r/out-rel")},
		{name: "absolute link outside refused", path: "out-abs", wantDeny: deny("r/out-abs")},
		{name: "link to sibling prefix data2 refused", path: "to-data2", wantDeny: deny("r/to-data2")},
		{name: "link into write-only prefix refused for read", path: "to-w", wantDeny: deny("r/to-w")},
		{name: "directory link escaping refused", path: "escape-dir/secret.txt", wantDeny: deny("r/escape-dir/secret.txt")},
		{name: "link loop bounded", path: "loop-a", wantIs: syscall.ELOOP},
		{name: "missing file", path: "nope.txt", wantIs: iofs.ErrNotExist},
		{name: "missing parent", path: "nope/x.txt", wantIs: iofs.ErrNotExist},
		{name: "dangling link", path: "dangling", wantIs: iofs.ErrNotExist},
		{name: "directory is not a denial", path: "sub", wantIs: syscall.EISDIR},
		{name: "prefix itself is a directory", path: tr.p("r"), wantIs: syscall.EISDIR},
		{name: "config floor file inside prefix", path: "own.secret", wantDeny: deny("r/own.secret")},
		{name: "home ssh inside reach", path: ".ssh/id_rsa", wantDeny: deny("r/.ssh/id_rsa")},
		{name: "home ssh directory itself", path: ".ssh", wantDeny: deny("r/.ssh")},
		{name: "shell history inside reach", path: ".bash_history", wantDeny: deny("r/.bash_history")},
		{name: "link to home ssh", path: "to-ssh", wantDeny: deny("r/to-ssh")},
		{name: "link to worker floor", path: "to-worker", wantDeny: deny("r/to-worker")},
		{name: "hard link to worker floor", path: "hard-secret", wantDeny: deny("r/hard-secret")},
		{name: "fifo", path: "fifo", wantDeny: deny("r/fifo")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var d denials
			fsys := scopedfs.New(tr.grant(), tr.cfg, d.record)
			data, abs, err := fsys.ReadFile(context.Background(), tt.path)
			requireOutcome(t, &d, err, tt.wantDeny, tt.wantIs)
			if tt.wantDeny == "" && tt.wantIs == nil {
				require.Equal(t, tt.wantData, string(data))
				require.Equal(t, tt.wantAbs, abs)
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	t.Parallel()
	deny := func(abs string) string { return "PATH_NOT_REACHABLE: write not permitted for " + abs }
	tests := []struct {
		name        string
		path        string // "@x" is the tree's x; anything else is relative to w
		writeWorker bool   // also grant write on the worker's floor directory
		wantAbs     string // relative to the tree
		wantFile    string // relative to the tree: where the data must land
		wantDeny    bool
		wantIs      error
	}{
		{name: "relative new file", path: "new.txt", wantAbs: "w/new.txt", wantFile: "w/new.txt"},
		{name: "creates parent directories", path: "a/b/c/new.txt", wantAbs: "w/a/b/c/new.txt", wantFile: "w/a/b/c/new.txt"},
		{name: "overwrites", path: "wfile.txt", wantAbs: "w/wfile.txt", wantFile: "w/wfile.txt"},
		{name: "existing subdir", path: "dir/new.txt", wantAbs: "w/dir/new.txt", wantFile: "w/dir/new.txt"},
		{name: "lexical dot-dot inside", path: "dir/../x.txt", wantAbs: "w/x.txt", wantFile: "w/x.txt"},
		{name: "other write prefix by absolute path", path: "@w2/existing.txt", wantAbs: "w2/existing.txt", wantFile: "w2/existing.txt"},
		{name: "relative link into other write prefix", path: "link-to-w2", wantAbs: "w/link-to-w2", wantFile: "w2/linked.txt"},
		{name: "absolute link into other write prefix", path: "link-to-w2abs", wantAbs: "w/link-to-w2abs", wantFile: "w2/existing.txt"},
		{name: "dangling link inside prefix creates target", path: "dangling", wantAbs: "w/dangling", wantFile: "w/created-by-link.txt"},
		{name: "dot-dot escape refused", path: "../secret.txt", wantAbs: "secret.txt", wantDeny: true},
		{name: "read-only prefix refused", path: "@r/new.txt", wantAbs: "r/new.txt", wantDeny: true},
		{name: "link to read-only prefix refused", path: "link-to-r", wantAbs: "w/link-to-r", wantDeny: true},
		{name: "directory link escaping refused", path: "esc/secret.txt", wantAbs: "w/esc/secret.txt", wantDeny: true},
		{name: "fifo refused", path: "fifo", wantAbs: "w/fifo", wantDeny: true},
		{name: "config floor refused even when granted", path: "@worker/secrets.env", writeWorker: true, wantAbs: "worker/secrets.env", wantDeny: true},
		{name: "directory is not a denial", path: "dir", wantAbs: "w/dir", wantIs: syscall.EISDIR},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newTree(t)
			g := tr.grant()
			g.WorkingDir = tr.p("w")
			if tt.writeWorker {
				g.Write = append(g.Write, tr.p("worker"))
			}
			path := tt.path
			if path[0] == '@' {
				path = tr.p(path[1:])
			}
			var d denials
			fsys := scopedfs.New(g, tr.cfg, d.record)
			abs, err := fsys.WriteFile(context.Background(), path, []byte("written"))
			require.Equal(t, tr.p(tt.wantAbs), abs)
			wantDeny := ""
			if tt.wantDeny {
				wantDeny = deny(tr.p(tt.wantAbs))
			}
			requireOutcome(t, &d, err, wantDeny, tt.wantIs)
			if tt.wantFile != "" {
				got, err := os.ReadFile(tr.p(tt.wantFile))
				require.NoError(t, err)
				require.Equal(t, "written", string(got))
			}
			// Refused or not, nothing outside the write prefixes changed and
			// no temporary file is left behind.
			got, err := os.ReadFile(tr.p("secret.txt"))
			require.NoError(t, err)
			require.Equal(t, "SECRET", string(got))
			got, err = os.ReadFile(tr.p("r/file.txt"))
			require.NoError(t, err)
			require.Equal(t, "in r", string(got))
			for _, dir := range []string{"w", "w2"} {
				matches, err := filepath.Glob(tr.p(dir + "/.capstan-*"))
				require.NoError(t, err)
				require.Empty(t, matches)
			}
		})
	}
}

func TestWriteFileModes(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	fsys := scopedfs.New(tr.grant(), tr.cfg, nil)
	ctx := context.Background()

	_, err := fsys.WriteFile(ctx, tr.p("w/fresh.txt"), []byte("x"))
	require.NoError(t, err)
	fi, err := os.Stat(tr.p("w/fresh.txt"))
	require.NoError(t, err)
	require.Equal(t, iofs.FileMode(0o644), fi.Mode().Perm(), "a new file is 0644")

	require.NoError(t, os.Chmod(tr.p("w/wfile.txt"), 0o751))
	_, err = fsys.WriteFile(ctx, tr.p("w/wfile.txt"), []byte("y"))
	require.NoError(t, err)
	fi, err = os.Stat(tr.p("w/wfile.txt"))
	require.NoError(t, err)
	require.Equal(t, iofs.FileMode(0o751), fi.Mode().Perm(), "an existing file keeps its mode")
}

func TestWriteFileCreatesMissingPrefix(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	g := &capability.FSGrant{Write: []string{tr.p("w/out/reports")}}
	fsys := scopedfs.New(g, tr.cfg, nil)
	abs, err := fsys.WriteFile(context.Background(), tr.p("w/out/reports/2024/a.md"), []byte("report"))
	require.NoError(t, err)
	require.Equal(t, tr.p("w/out/reports/2024/a.md"), abs)
	got, err := os.ReadFile(abs)
	require.NoError(t, err)
	require.Equal(t, "report", string(got))
}

func TestStat(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	deny := func(rel string) string { return "PATH_NOT_REACHABLE: read not permitted for " + tr.p(rel) }
	tests := []struct {
		name     string
		path     string
		wantName string
		wantDir  bool
		wantSize int64
		wantDeny string
		wantIs   error
	}{
		{name: "file", path: "file.txt", wantName: "file.txt", wantSize: 4},
		{name: "directory", path: "sub", wantName: "sub", wantDir: true},
		{name: "prefix itself", path: ".", wantName: "r", wantDir: true},
		{name: "link is followed and keeps its name", path: "to-r2", wantName: "to-r2", wantSize: 5},
		{name: "missing", path: "nope", wantIs: iofs.ErrNotExist},
		{name: "outside", path: "../secret.txt", wantDeny: deny("secret.txt")},
		{name: "link outside", path: "out-abs", wantDeny: deny("r/out-abs")},
		{name: "fifo", path: "fifo", wantDeny: deny("r/fifo")},
		{name: "floor", path: ".ssh", wantDeny: deny("r/.ssh")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var d denials
			fsys := scopedfs.New(tr.grant(), tr.cfg, d.record)
			fi, _, err := fsys.Stat(context.Background(), tt.path)
			requireOutcome(t, &d, err, tt.wantDeny, tt.wantIs)
			if tt.wantDeny == "" && tt.wantIs == nil {
				require.Equal(t, tt.wantName, fi.Name())
				require.Equal(t, tt.wantDir, fi.IsDir())
				if !tt.wantDir {
					require.Equal(t, tt.wantSize, fi.Size())
				}
			}
		})
	}
}

func TestReadDir(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	deny := func(rel string) string { return "PATH_NOT_REACHABLE: read not permitted for " + tr.p(rel) }
	tests := []struct {
		name      string
		path      string
		wantNames []string
		wantDeny  string
		wantIs    error
	}{
		{name: "directory sorted", path: "sub", wantNames: []string{"deeper", "nested.txt", "up-link"}},
		{name: "directory link", path: "dir-link", wantNames: []string{"deeper", "nested.txt", "up-link"}},
		{name: "other prefix", path: tr.p("r2"), wantNames: []string{"other.txt"}},
		{name: "file is not a denial", path: "file.txt", wantIs: syscall.ENOTDIR},
		{name: "missing", path: "nope", wantIs: iofs.ErrNotExist},
		{name: "escape by link", path: "escape-dir", wantDeny: deny("r/escape-dir")},
		{name: "escape by dot-dot", path: "..", wantDeny: deny("")},
		{name: "floor directory", path: ".ssh", wantDeny: deny("r/.ssh")},
		{name: "fifo", path: "fifo", wantDeny: deny("r/fifo")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var d denials
			fsys := scopedfs.New(tr.grant(), tr.cfg, d.record)
			entries, _, err := fsys.ReadDir(context.Background(), tt.path)
			requireOutcome(t, &d, err, tt.wantDeny, tt.wantIs)
			if tt.wantDeny == "" && tt.wantIs == nil {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				require.Equal(t, tt.wantNames, names)
			}
		})
	}
}

// TestSystemFloor checks the fixed floor with a grant that covers "/".
func TestSystemFloor(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	require.NoError(t, os.Symlink("/proc/self", tr.p("r/proc-link")))
	deny := func(abs string) string { return "PATH_NOT_REACHABLE: read not permitted for " + abs }
	tests := []struct {
		name  string
		read  []string
		op    string // read, stat, readdir
		path  string
		allow bool // not a denial (the file may or may not exist)
	}{
		{name: "proc", read: []string{"/"}, op: "read", path: "/proc/self/status"},
		{name: "proc directory", read: []string{"/"}, op: "stat", path: "/proc"},
		{name: "proc by link", read: []string{"/"}, op: "read", path: tr.p("r/proc-link") + "/status"},
		{name: "proc granted explicitly", read: []string{"/proc"}, op: "readdir", path: "/proc"},
		{name: "sys", read: []string{"/"}, op: "readdir", path: "/sys/kernel"},
		{name: "boot", read: []string{"/"}, op: "readdir", path: "/boot"},
		{name: "shadow", read: []string{"/"}, op: "read", path: "/etc/shadow"},
		{name: "sudoers", read: []string{"/"}, op: "read", path: "/etc/sudoers"},
		{name: "sudoers.d", read: []string{"/"}, op: "read", path: "/etc/sudoers.d/README"},
		{name: "sudoers glob", read: []string{"/"}, op: "read", path: "/etc/sudoers.bak"},
		{name: "root home", read: []string{"/"}, op: "read", path: "/root/.bashrc"},
		{name: "root home itself", read: []string{"/"}, op: "readdir", path: "/root"},
		{name: "character device", read: []string{"/"}, op: "read", path: "/dev/null"},
		{name: "character device stat", read: []string{"/"}, op: "stat", path: "/dev/null"},
		{name: "prefix inside root lifts the root rule", read: []string{"/", "/root/agent"}, op: "read", path: "/root/agent/notes.txt", allow: true},
		{name: "prefix inside root covers only itself", read: []string{"/", "/root/agent"}, op: "read", path: "/root/other.txt"},
		{name: "root itself granted", read: []string{"/root"}, op: "read", path: "/root/notes.txt", allow: true},
		{name: "etc passwd is not on the floor", read: []string{"/"}, op: "stat", path: "/etc/passwd", allow: true},
		{name: "etc itself is not on the floor", read: []string{"/"}, op: "readdir", path: "/etc", allow: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var d denials
			fsys := scopedfs.New(&capability.FSGrant{Read: tt.read}, tr.cfg, d.record)
			var err error
			switch tt.op {
			case "read":
				_, _, err = fsys.ReadFile(context.Background(), tt.path)
			case "stat":
				_, _, err = fsys.Stat(context.Background(), tt.path)
			case "readdir":
				_, _, err = fsys.ReadDir(context.Background(), tt.path)
			}
			if tt.allow {
				require.NotErrorIs(t, err, tool.ErrPathNotReachable)
				require.Empty(t, d.all())
				return
			}
			requireOutcome(t, &d, err, deny(tt.path), nil)
		})
	}
}

// TestSymlinkedPrefixOntoFloor grants a prefix that is a symlink to the
// worker's own directory: the identity check refuses it.
func TestSymlinkedPrefixOntoFloor(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	var d denials
	fsys := scopedfs.New(&capability.FSGrant{Read: []string{tr.p("alias")}}, tr.cfg, d.record)
	_, _, err := fsys.ReadFile(context.Background(), tr.p("alias/secrets.env"))
	requireOutcome(t, &d, err, "PATH_NOT_REACHABLE: read not permitted for "+tr.p("alias/secrets.env"), nil)
}

func TestNilGrantDeniesEverything(t *testing.T) {
	t.Parallel()
	var d denials
	fsys := scopedfs.New(nil, scopedfs.Config{Home: t.TempDir()}, d.record)
	ctx := context.Background()
	_, abs, err := fsys.ReadFile(ctx, "/etc/passwd")
	require.Equal(t, "/etc/passwd", abs)
	require.EqualError(t, err, "PATH_NOT_REACHABLE: read not permitted for /etc/passwd")
	_, err = fsys.WriteFile(ctx, "/tmp/x", nil)
	require.EqualError(t, err, "PATH_NOT_REACHABLE: write not permitted for /tmp/x")
	_, _, err = fsys.Stat(ctx, "x")
	require.EqualError(t, err, "PATH_NOT_REACHABLE: read not permitted for x")
	_, _, err = fsys.ReadDir(ctx, "/")
	require.EqualError(t, err, "PATH_NOT_REACHABLE: read not permitted for /")
	require.Len(t, d.all(), 4)
}

func TestReadLimit(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	cfg := tr.cfg
	cfg.MaxReadBytes = 4
	fsys := scopedfs.New(tr.grant(), cfg, nil)
	data, _, err := fsys.ReadFile(context.Background(), "file.txt")
	require.NoError(t, err)
	require.Equal(t, "in r", string(data))
	_, _, err = fsys.ReadFile(context.Background(), "sub/nested.txt")
	require.ErrorIs(t, err, scopedfs.ErrTooLarge)
}

func TestCancelledContext(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	cause := errors.New("call cancelled")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	fsys := scopedfs.New(tr.grant(), tr.cfg, nil)
	_, _, err := fsys.ReadFile(ctx, "file.txt")
	require.ErrorIs(t, err, cause)
	_, err = fsys.WriteFile(ctx, tr.p("w/x"), nil)
	require.ErrorIs(t, err, cause)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     scopedfs.Config
		wantErr string
	}{
		{name: "zero value", cfg: scopedfs.Config{}},
		{name: "relative home", cfg: scopedfs.Config{Home: "home"}, wantErr: `fs config: Home "home" must be absolute`},
		{name: "relative floor", cfg: scopedfs.Config{Floor: []string{"/ok", "data"}}, wantErr: `fs config: Floor[1] "data" must be absolute`},
		{name: "negative cap", cfg: scopedfs.Config{MaxReadBytes: -1}, wantErr: "fs config: MaxReadBytes -1 must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.wantErr)
			require.Panics(t, func() { scopedfs.New(nil, tt.cfg, nil) })
		})
	}
}
