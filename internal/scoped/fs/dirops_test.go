package fs_test

import (
	"context"
	"fmt"
	iofs "io/fs"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
)

func TestExists(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	for _, tt := range []struct {
		name, path string
		want       bool
		deny       string
		is         error
	}{
		{name: "file", path: "file.txt", want: true},
		{name: "directory", path: "sub", want: true},
		{name: "link inside", path: "rel-link", want: true},
		{name: "missing", path: "nope.txt"},
		{name: "dangling link", path: "dangling"},
		{name: "outside", path: tr.p("secret.txt"), deny: "PATH_NOT_REACHABLE: read not permitted for " + tr.p("secret.txt")},
		{name: "link out", path: "out-abs", deny: "PATH_NOT_REACHABLE: read not permitted for " + tr.p("r/out-abs")},
		{name: "floor", path: ".ssh/id_rsa", deny: "PATH_NOT_REACHABLE: read not permitted for " + tr.p("r/.ssh/id_rsa")},
		{name: "fifo", path: "fifo", deny: "PATH_NOT_REACHABLE: read not permitted for " + tr.p("r/fifo")},
		{name: "write-only prefix", path: tr.p("w/wfile.txt"), deny: "PATH_NOT_REACHABLE: read not permitted for " + tr.p("w/wfile.txt")},
		{name: "NUL", path: "a\x00b", is: scopedfs.ErrInvalidPath},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := &denials{}
			a := scopedfs.New(tr.grant(), tr.cfg, d.record)
			ok, _, err := a.Exists(context.Background(), tt.path)
			requireOutcome(t, d, err, tt.deny, tt.is)
			require.Equal(t, tt.want, ok)
		})
	}
}

func TestMkdirAll(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	for _, tt := range []struct {
		name, path string
		deny       string
		is         error
	}{
		{name: "new nested", path: tr.p("w/a/b/c")},
		{name: "existing", path: tr.p("w/dir")},
		{name: "the prefix itself", path: tr.p("w")},
		{name: "link to a dir inside", path: tr.p("w/esc/w2")},
		{name: "over a file", path: tr.p("w/wfile.txt"), is: syscall.EEXIST},
		{name: "under a file", path: tr.p("w/wfile.txt/x"), is: syscall.ENOTDIR},
		{name: "read-only prefix", path: tr.p("r/newdir"), deny: "PATH_NOT_REACHABLE: write not permitted for " + tr.p("r/newdir")},
		{name: "dot-dot escape", path: tr.p("w/../outside"), deny: "PATH_NOT_REACHABLE: write not permitted for " + tr.p("outside")},
		{name: "through an escaping link", path: tr.p("w/esc/outside"), deny: "PATH_NOT_REACHABLE: write not permitted for " + tr.p("w/esc/outside")},
		{name: "prefix confusion", path: tr.p("w22/x"), deny: "PATH_NOT_REACHABLE: write not permitted for " + tr.p("w22/x")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := &denials{}
			a := scopedfs.New(tr.grant(), tr.cfg, d.record)
			abs, err := a.MkdirAll(context.Background(), tt.path)
			requireOutcome(t, d, err, tt.deny, tt.is)
			if tt.deny == "" && tt.is == nil {
				fi, err := os.Stat(abs)
				require.NoError(t, err)
				require.True(t, fi.IsDir())
			}
		})
	}
	_, err := os.Stat(tr.p("outside"))
	require.ErrorIs(t, err, iofs.ErrNotExist, "nothing is created outside the reach")
}

func TestRemove(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, path string
		deny       string
		is         error
		gone       string // removed, when the call succeeds
		kept       string // must survive
	}{
		{name: "file", path: "w/wfile.txt", gone: "w/wfile.txt"},
		{name: "empty dir", path: "w/empty", gone: "w/empty"},
		{name: "link, not its target", path: "w/link-to-w2abs", gone: "w/link-to-w2abs", kept: "w2/existing.txt"},
		{name: "escaping link itself", path: "w/esc", gone: "w/esc"},
		{name: "non-empty dir", path: "w/dir", is: syscall.ENOTEMPTY, kept: "w/dir/keep.txt"},
		{name: "missing", path: "w/nope", is: iofs.ErrNotExist},
		{name: "the prefix itself", path: "w", deny: "PATH_NOT_REACHABLE: write not permitted for %s", kept: "w/wfile.txt"},
		{name: "read-only file", path: "r/file.txt", deny: "PATH_NOT_REACHABLE: write not permitted for %s", kept: "r/file.txt"},
		{name: "outside", path: "secret.txt", deny: "PATH_NOT_REACHABLE: write not permitted for %s", kept: "secret.txt"},
		{name: "through an escaping link", path: "w/esc/secret.txt", deny: "PATH_NOT_REACHABLE: write not permitted for %s", kept: "secret.txt"},
		{name: "fifo", path: "w/fifo", deny: "PATH_NOT_REACHABLE: write not permitted for %s", kept: "w/fifo"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newTree(t)
			require.NoError(t, os.MkdirAll(tr.p("w/empty"), 0o755))
			d := &denials{}
			a := scopedfs.New(tr.grant(), tr.cfg, d.record)
			deny := tt.deny
			if deny != "" {
				deny = sprintf(deny, tr.p(tt.path))
			}
			_, err := a.Remove(context.Background(), tr.p(tt.path))
			requireOutcome(t, d, err, deny, tt.is)
			if tt.gone != "" {
				_, err := os.Lstat(tr.p(tt.gone))
				require.ErrorIs(t, err, iofs.ErrNotExist)
			}
			if tt.kept != "" {
				_, err := os.Lstat(tr.p(tt.kept))
				require.NoError(t, err)
			}
		})
	}
}

func sprintf(format, path string) string { return fmt.Sprintf(format, path) }
