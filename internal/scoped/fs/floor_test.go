package fs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
)

// TestFloorPaths: the exported floor lists the concrete paths the file
// accessor refuses, for those who must keep to it too (children).
func TestFloorPaths(t *testing.T) {
	t.Parallel()
	f := scopedfs.NewFloor("/home/agent", []string{"/srv/capstan/data", "/etc/capstan/secrets.json"})
	paths := f.Paths()
	for _, p := range []string{
		"/srv/capstan/data", "/etc/capstan/secrets.json",
		"/home/agent/.ssh", "/home/agent/.aws", "/home/agent/.gnupg", "/home/agent/.netrc", "/home/agent/.bash_history",
		"/etc/shadow", "/etc/gshadow", "/proc", "/sys", "/boot", "/etc/sudoers", "/etc/sudoers.d", "/root",
	} {
		require.Contains(t, paths, p)
	}
	// Every entry of /etc whose name starts with "sudoers", as /etc lists now.
	entries, err := os.ReadDir("/etc")
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "sudoers") {
			require.Contains(t, paths, filepath.Join("/etc", e.Name()))
		}
	}
}

func TestFloorDeniesAndLifts(t *testing.T) {
	t.Parallel()
	f := scopedfs.NewFloor("/root", []string{"/srv/data"})
	tests := []struct {
		name    string
		path    string
		allowed []string
		want    bool
	}{
		{name: "own file", path: "/srv/data/embedded.creds", allowed: []string{"/"}, want: true},
		{name: "beside an own file", path: "/srv/data2", allowed: []string{"/"}},
		{name: "sudoers made later", path: "/etc/sudoers.new", allowed: []string{"/"}, want: true},
		{name: "/root without a prefix inside it", path: "/root/work/f", allowed: []string{"/"}, want: true},
		{name: "/root lifted by a prefix inside it", path: "/root/work/f", allowed: []string{"/", "/root/work"}},
		{name: "the lift covers only its prefix", path: "/root/other", allowed: []string{"/root/work"}, want: true},
		{name: "the lift does not open the home floor", path: "/root/.ssh/id", allowed: []string{"/root"}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, f.Denies(tt.path, tt.allowed))
		})
	}
	require.Equal(t, []string{"/root/work"}, f.Lifts([]string{"/", "/root/work", "/root/.ssh", "/srv"}))
	require.Empty(t, f.Lifts([]string{"/"}))
}
