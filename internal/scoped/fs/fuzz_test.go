package fs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
)

// FuzzFSPath reads random paths (relative and absolute, with "..", "." and
// symlink names) against the fixture tree: a successful ReadFile always
// returns a path covered by the grant and content of a file that lies inside
// a read prefix; a write never lands outside the write prefixes.
func FuzzFSPath(f *testing.F) {
	tr := newTree(f)
	g := tr.grant()
	fsys := scopedfs.New(g, tr.cfg, nil)

	// inside is the content of every readable file of the tree.
	inside := map[string]bool{}
	for _, prefix := range g.Read {
		require.NoError(f, filepath.WalkDir(prefix, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && !strings.Contains(p, ".ssh") &&
				!strings.HasSuffix(p, "own.secret") && !strings.HasSuffix(p, "hard-secret") && !strings.HasSuffix(p, "_history") {
				b, rerr := os.ReadFile(p)
				require.NoError(f, rerr)
				inside[string(b)] = true
			}
			return nil
		}))
	}

	for _, seed := range []string{
		"file.txt", "./file.txt", "../secret.txt", "sub/../../secret.txt", "rel-link", "abs-link",
		"out-rel", "out-abs", "escape-dir/secret.txt", "escape-dir/r/file.txt", "dir-link/../../secret.txt",
		"loop-a", "chain1", "to-r2", "to-data2", "to-w", ".ssh/id_rsa", "to-ssh", "hard-secret",
		"/etc/passwd", "/proc/self/environ", "..", ".", "", "sub/up-link/..", "dir-link/up-link",
		tr.p("r/file.txt"), tr.p("secret.txt"), tr.p("r/../secret.txt"), tr.p("data2/x.txt"),
		"../w/link-to-r", "../w/esc/secret.txt", "to-worker", "alias/secrets.env", "../alias/secrets.env",
		"file.txt\x00", "sub\x00/../file.txt", "/proc/self/root" + tr.p("secret.txt"), "/proc/self/cwd/../secret.txt",
		"fifo", "../w/fifo", "//" + tr.p("r/file.txt"), "./././file.txt", "sub/./deeper/../nested.txt",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, path string) {
		ctx := context.Background()
		data, abs, err := fsys.ReadFile(ctx, path)
		if err == nil {
			require.True(t, covered(g.Read, abs), "read %q resolved to %q outside the read reach", path, abs)
			require.True(t, inside[string(data)], "read %q returned content from outside the reach: %q", path, data)
		}
		if _, _, err := fsys.ReadDir(ctx, path); err == nil {
			_, abs, _ := fsys.Stat(ctx, path)
			require.True(t, covered(g.Read, abs))
		}
		abs, err = fsys.WriteFile(ctx, path, []byte("fuzz"))
		if err == nil {
			require.True(t, covered(g.Write, abs), "write %q resolved to %q outside the write reach", path, abs)
		}
		secret, rerr := os.ReadFile(tr.p("secret.txt"))
		require.NoError(t, rerr)
		require.Equal(t, "SECRET", string(secret))
		worker, rerr := os.ReadFile(tr.p("worker/secrets.env"))
		require.NoError(t, rerr)
		require.Equal(t, "TOKEN=worker", string(worker))
	})
}

func covered(list []string, abs string) bool {
	for _, p := range list {
		if capability.Covers(p, abs) {
			return true
		}
	}
	return false
}
