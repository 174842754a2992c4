package capability

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/tool"
)

func TestCovers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, prefix, path string
		want               bool
	}{
		{name: "itself", prefix: "/data", path: "/data", want: true},
		{name: "child", prefix: "/data", path: "/data/x", want: true},
		{name: "grandchild", prefix: "/data", path: "/data/x/y", want: true},
		{name: "sibling with same prefix", prefix: "/data", path: "/data2"},
		{name: "sibling with dash", prefix: "/data", path: "/data-x/y"},
		{name: "parent", prefix: "/data/x", path: "/data"},
		{name: "root covers all", prefix: "/", path: "/etc/passwd", want: true},
		{name: "root covers root", prefix: "/", path: "/", want: true},
		{name: "byte-exact case", prefix: "/Data", path: "/data/x"},
		{name: "unclean path refused", prefix: "/data", path: "/data/../etc"},
		{name: "unclean dot path refused", prefix: "/data", path: "/data/./x"},
		{name: "double slash refused", prefix: "/data", path: "/data//x"},
		{name: "trailing slash prefix refused", prefix: "/data/", path: "/data/x"},
		{name: "relative path refused", prefix: "/data", path: "data/x"},
		{name: "relative prefix refused", prefix: "data", path: "data/x"},
		{name: "empty prefix refused", prefix: "", path: "/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, Covers(tt.prefix, tt.path))
		})
	}
}

func TestJoinPath(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, wd, path, want string }{
		{name: "absolute cleaned", wd: "/w", path: "/a/./b/../c", want: "/a/c"},
		{name: "relative joined", wd: "/w", path: "x/y", want: "/w/x/y"},
		{name: "lexical dot-dot", wd: "/w", path: "a/link/../x", want: "/w/a/x"},
		{name: "escapes lexically", wd: "/w/sub", path: "../../etc/passwd", want: "/etc/passwd"},
		{name: "empty path is working dir", wd: "/w", path: "", want: "/w"},
		{name: "no working dir stays relative", wd: "", path: "x/../y", want: "y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, JoinPath(tt.wd, tt.path))
		})
	}
}

func TestFSGrantCheck(t *testing.T) {
	t.Parallel()
	g := &FSGrant{Read: []string{"/srv/agent", "/srv/shared"}, Write: []string{"/srv/agent/out"}, WorkingDir: "/srv/agent"}
	tests := []struct {
		name  string
		grant *FSGrant
		mode  Mode
		path  string
		abs   string
		err   string
	}{
		{name: "read relative", grant: g, mode: Read, path: "notes.txt", abs: "/srv/agent/notes.txt"},
		{name: "read other prefix", grant: g, mode: Read, path: "/srv/shared/a", abs: "/srv/shared/a"},
		{name: "read outside", grant: g, mode: Read, path: "/etc/passwd", abs: "/etc/passwd",
			err: "PATH_NOT_REACHABLE: read not permitted for /etc/passwd"},
		{name: "read escape by dot-dot", grant: g, mode: Read, path: "../../etc/passwd", abs: "/etc/passwd",
			err: "PATH_NOT_REACHABLE: read not permitted for /etc/passwd"},
		{name: "read sibling prefix", grant: g, mode: Read, path: "/srv/agent2/x", abs: "/srv/agent2/x",
			err: "PATH_NOT_REACHABLE: read not permitted for /srv/agent2/x"},
		{name: "write inside", grant: g, mode: Write, path: "out/r.txt", abs: "/srv/agent/out/r.txt"},
		{name: "write outside write list", grant: g, mode: Write, path: "notes.txt", abs: "/srv/agent/notes.txt",
			err: "PATH_NOT_REACHABLE: write not permitted for /srv/agent/notes.txt"},
		{name: "no working dir relative refused", grant: &FSGrant{Read: []string{"/"}}, mode: Read, path: "x", abs: "x",
			err: "PATH_NOT_REACHABLE: read not permitted for x"},
		{name: "nil grant", mode: Read, path: "/x", abs: "/x", err: "PATH_NOT_REACHABLE: read not permitted for /x"},
		{name: "unknown mode", grant: g, mode: Mode(9), path: "/srv/agent", abs: "/srv/agent",
			err: "PATH_NOT_REACHABLE: unknown not permitted for /srv/agent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			abs, err := tt.grant.Check(tt.mode, tt.path)
			require.Equal(t, tt.abs, abs)
			if tt.err == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tt.err)
			require.ErrorIs(t, err, tool.ErrPathNotReachable)
		})
	}
}

func TestFSGrantEmptyAndMode(t *testing.T) {
	t.Parallel()
	require.True(t, (*FSGrant)(nil).Empty())
	require.True(t, (&FSGrant{Read: []string{}}).Empty())
	require.False(t, (&FSGrant{Write: []string{"/x"}}).Empty())
	require.Equal(t, "read", Read.String())
	require.Equal(t, "write", Write.String())
}
