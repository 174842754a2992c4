package fs_test

import (
	"context"
	iofs "io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
)

// attackTree is newTree with the links and special files of the attack
// tables:
//
//	r/proc-root         /proc/self/root<base>/secret.txt
//	r/proc-root-inside  /proc/self/root<base>/r/file.txt (inside, but through /proc)
//	r/proc-cwd          /proc/self/cwd
//	r/proc-fd           /proc/self/fd/0
//	r/devnull, devzero  /dev/null, /dev/zero
//	r/sock              a listening unix socket
//	r/data-dir          ../data (a read prefix)
//	r/data2-dir         ../data2 (outside)
//	r/abs-dotdot        <base>/r/../secret.txt
//	r/abs-dotdot-in     <base>/outside/../r/file.txt
//	r/root-link         /
//	r/self              .
//	r/to-out-link       out-abs (a link to a link outside)
func attackTree(t *testing.T) tree {
	t.Helper()
	tr := newTree(t)
	links := map[string]string{
		"r/proc-root":        "/proc/self/root" + tr.p("secret.txt"),
		"r/proc-root-inside": "/proc/self/root" + tr.p("r/file.txt"),
		"r/proc-cwd":         "/proc/self/cwd",
		"r/proc-fd":          "/proc/self/fd/0",
		"r/devnull":          "/dev/null",
		"r/devzero":          "/dev/zero",
		"r/data-dir":         "../data",
		"r/data2-dir":        "../data2",
		"r/abs-dotdot":       tr.p("r") + "/../secret.txt",
		"r/abs-dotdot-in":    tr.p("outside") + "/../r/file.txt",
		"r/root-link":        "/",
		"r/self":             ".",
		"r/to-out-link":      "out-abs",
	}
	for rel, target := range links {
		require.NoError(t, os.Symlink(target, tr.p(rel)))
	}
	l, err := net.Listen("unix", tr.p("r/sock"))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return tr
}

// TestReadAttacks: escapes by "..", links, prefix confusion, /proc, devices,
// sockets and NUL bytes. Every case ends in the exact denial, a plain error
// or the content of a file inside the reach.
func TestReadAttacks(t *testing.T) {
	t.Parallel()
	tr := attackTree(t)
	deny := func(abs string) string { return "PATH_NOT_REACHABLE: read not permitted for " + abs }
	tests := []struct {
		name     string
		read     []string // replaces the grant's read prefixes
		extra    []string // added to them
		op       string   // read (default), stat, readdir
		path     string
		wantData string
		wantDeny string
		wantIs   error
	}{
		// Prefix confusion: comparison is by whole path component.
		{name: "sibling sharing a prefix string", path: "../data2/x.txt", wantDeny: deny(tr.p("data2/x.txt"))},
		{name: "sibling by absolute path", path: tr.p("data") + "2/x.txt", wantDeny: deny(tr.p("data2/x.txt"))},
		{name: "through an allowed prefix and back out", path: "../data/../data2/x.txt", wantDeny: deny(tr.p("data2/x.txt"))},
		{name: "prefix in another letter case", path: strings.ToUpper(tr.p("r")) + "/file.txt", wantDeny: deny(strings.ToUpper(tr.p("r")) + "/file.txt")},
		{name: "parent of a prefix", op: "readdir", path: tr.base, wantDeny: deny(tr.base)},
		{name: "double slashes", path: tr.p("r") + "//sub//nested.txt", wantData: "nested"},
		{name: "trailing slash on a prefix", op: "readdir", path: tr.p("data") + "/", wantData: "d.txt"},
		{name: "directory link to a sibling outside", path: "data2-dir/x.txt", wantDeny: deny(tr.p("r/data2-dir/x.txt"))},
		{name: "directory link into another read prefix", path: "data-dir/d.txt", wantData: "data"},
		{name: "listing through a directory link into another read prefix", op: "readdir", path: "data-dir", wantData: "d.txt"},

		// Link targets.
		{name: "absolute link whose dot-dot leaves", path: "abs-dotdot", wantDeny: deny(tr.p("r/abs-dotdot"))},
		{name: "absolute link whose dot-dot comes back in", path: "abs-dotdot-in", wantData: "in r"},
		{name: "link to the filesystem root", path: "root-link/etc/passwd", wantDeny: deny(tr.p("r/root-link/etc/passwd"))},
		{name: "link to its own directory, repeated", path: "self/self/self/sub/nested.txt", wantData: "nested"},
		{name: "link to a link outside", path: "to-out-link", wantDeny: deny(tr.p("r/to-out-link"))},
		{name: "dot-dot after a directory link is lexical", path: "escape-dir/../../secret.txt", wantDeny: deny(tr.p("secret.txt"))},

		// /proc: on the floor whatever it points at.
		{name: "link through /proc/self/root to a secret", path: "proc-root", wantDeny: deny(tr.p("r/proc-root"))},
		{name: "link through /proc/self/root back inside", path: "proc-root-inside", wantDeny: deny(tr.p("r/proc-root-inside"))},
		{name: "link to /proc/self/cwd", path: "proc-cwd/go.mod", wantDeny: deny(tr.p("r/proc-cwd/go.mod"))},
		{name: "link to /proc/self/fd", path: "proc-fd", wantDeny: deny(tr.p("r/proc-fd"))},
		{name: "/proc/self/root with everything granted", read: []string{"/"}, path: "/proc/self/root" + tr.p("r/file.txt"), wantDeny: deny("/proc/self/root" + tr.p("r/file.txt"))},
		{name: "/proc/self/root as the granted prefix", read: []string{"/proc/self/root" + tr.p("r")}, path: "/proc/self/root" + tr.p("r/file.txt"), wantDeny: deny("/proc/self/root" + tr.p("r/file.txt"))},
		{name: "/proc/self/environ", read: []string{"/"}, path: "/proc/self/environ", wantDeny: deny("/proc/self/environ")},
		{name: "/proc/self/mem", read: []string{"/"}, path: "/proc/self/mem", wantDeny: deny("/proc/self/mem")},
		{name: "/proc/1/root", read: []string{"/"}, op: "readdir", path: "/proc/1/root", wantDeny: deny("/proc/1/root")},
		{name: "/sys", read: []string{"/"}, path: "/sys/kernel/notes", wantDeny: deny("/sys/kernel/notes")},

		// Devices, FIFOs and sockets: refused even inside the reach.
		{name: "device by link", extra: []string{"/dev"}, path: "devnull", wantDeny: deny(tr.p("r/devnull"))},
		{name: "endless device by link", extra: []string{"/dev"}, path: "devzero", wantDeny: deny(tr.p("r/devzero"))},
		{name: "device by link, stat", extra: []string{"/dev"}, op: "stat", path: "devnull", wantDeny: deny(tr.p("r/devnull"))},
		{name: "device granted directly", extra: []string{"/dev"}, path: "/dev/zero", wantDeny: deny("/dev/zero")},
		{name: "device outside the reach", path: "devnull", wantDeny: deny(tr.p("r/devnull"))},
		{name: "socket", path: "sock", wantDeny: deny(tr.p("r/sock"))},
		{name: "socket, stat", op: "stat", path: "sock", wantDeny: deny(tr.p("r/sock"))},
		{name: "fifo, listing", op: "readdir", path: "fifo", wantDeny: deny(tr.p("r/fifo"))},

		// NUL bytes: invalid input, whatever the reach.
		{name: "NUL at the end", path: "file.txt\x00", wantIs: scopedfs.ErrInvalidPath},
		{name: "NUL as the extension separator", path: "file.txt\x00.png", wantIs: scopedfs.ErrInvalidPath},
		{name: "NUL alone", path: "\x00", wantIs: scopedfs.ErrInvalidPath},
		{name: "NUL in an element cleaning removes", path: "sub\x00/../file.txt", wantIs: scopedfs.ErrInvalidPath},
		{name: "NUL outside the reach", path: "../secret.txt\x00", wantIs: scopedfs.ErrInvalidPath},
		{name: "NUL, stat", op: "stat", path: "sub\x00", wantIs: scopedfs.ErrInvalidPath},
		{name: "NUL, listing", op: "readdir", path: "sub\x00", wantIs: scopedfs.ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := tr.grant()
			if tt.read != nil {
				g.Read = tt.read
			}
			g.Read = append(g.Read, tt.extra...)
			var d denials
			fsys := scopedfs.New(g, tr.cfg, d.record)
			ctx := context.Background()
			var got string
			var err error
			switch tt.op {
			case "", "read":
				var data []byte
				data, _, err = fsys.ReadFile(ctx, tt.path)
				got = string(data)
			case "stat":
				_, _, err = fsys.Stat(ctx, tt.path)
			case "readdir":
				var entries []iofs.DirEntry
				entries, _, err = fsys.ReadDir(ctx, tt.path)
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				got = strings.Join(names, ",")
			}
			requireOutcome(t, &d, err, tt.wantDeny, tt.wantIs)
			if tt.wantDeny == "" && tt.wantIs == nil && tt.op != "stat" {
				require.Equal(t, tt.wantData, got)
			}
			if tt.wantIs != nil {
				require.NotContains(t, err.Error(), "\x00", "the message shows the NUL escaped")
			}
		})
	}
}

// TestWriteAttacks: the floor in the worker's home holds even where the
// grant covers the home; links, sockets, devices and NUL bytes are refused;
// nothing is created on the way to a refused path.
func TestWriteAttacks(t *testing.T) {
	t.Parallel()
	deny := func(abs string) string { return "PATH_NOT_REACHABLE: write not permitted for " + abs }
	tests := []struct {
		name     string
		path     string // relative to w, which is also the worker's home
		wantDeny string // relative to the tree
		wantIs   error
		wantFile string // relative to the tree: where the data lands
	}{
		{name: "ssh authorized_keys", path: ".ssh/authorized_keys", wantDeny: "w/.ssh/authorized_keys"},
		{name: "ssh directory itself", path: ".ssh", wantDeny: "w/.ssh"},
		{name: "aws credentials", path: ".aws/credentials", wantDeny: "w/.aws/credentials"},
		{name: "gnupg", path: ".gnupg/pubring.kbx", wantDeny: "w/.gnupg/pubring.kbx"},
		{name: "netrc", path: ".netrc", wantDeny: "w/.netrc"},
		{name: "bash history", path: ".bash_history", wantDeny: "w/.bash_history"},
		{name: "zsh history", path: ".zsh_history", wantDeny: "w/.zsh_history"},
		{name: "ssh by dot-dot", path: "dir/../.ssh/authorized_keys", wantDeny: "w/.ssh/authorized_keys"},
		{name: "ssh by file link", path: "to-ssh", wantDeny: "w/to-ssh"},
		{name: "ssh by directory link", path: "to-ssh-dir/authorized_keys", wantDeny: "w/to-ssh-dir/authorized_keys"},
		{name: "ssh below another directory is not the floor", path: "project/.ssh/config", wantFile: "w/project/.ssh/config"},
		{name: "socket", path: "sock", wantDeny: "w/sock"},
		{name: "device by link", path: "devnull", wantDeny: "w/devnull"},
		{name: "link to a link outside", path: "to-out-link", wantDeny: "w/to-out-link"},
		{name: "directory link to the parent", path: "esc/new.txt", wantDeny: "w/esc/new.txt"},
		{name: "NUL", path: "new.txt\x00", wantIs: scopedfs.ErrInvalidPath},
		{name: "NUL in a cleaned element", path: "x\x00/../new.txt", wantIs: scopedfs.ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newTree(t)
			for rel, target := range map[string]string{
				"w/to-ssh": ".ssh/authorized_keys", "w/to-ssh-dir": ".ssh",
				"w/devnull": "/dev/null", "w/to-out-link": "link-to-r",
			} {
				require.NoError(t, os.Symlink(target, tr.p(rel)))
			}
			l, err := net.Listen("unix", tr.p("w/sock"))
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			g := tr.grant()
			g.WorkingDir = tr.p("w")
			g.Write = append(g.Write, "/dev")
			cfg := tr.cfg
			cfg.Home = tr.p("w")
			var d denials
			fsys := scopedfs.New(g, cfg, d.record)
			_, err = fsys.WriteFile(context.Background(), tt.path, []byte("written"))
			wantDeny := ""
			if tt.wantDeny != "" {
				wantDeny = deny(tr.p(tt.wantDeny))
			}
			requireOutcome(t, &d, err, wantDeny, tt.wantIs)
			if tt.wantFile != "" {
				got, err := os.ReadFile(tr.p(tt.wantFile))
				require.NoError(t, err)
				require.Equal(t, "written", string(got))
			}
			for _, floor := range []string{".ssh", ".aws", ".gnupg", ".netrc", ".bash_history", ".zsh_history"} {
				_, err := os.Lstat(tr.p("w/" + floor))
				require.ErrorIs(t, err, iofs.ErrNotExist, "%s was created", floor)
			}
			got, err := os.ReadFile(tr.p("r/file.txt"))
			require.NoError(t, err)
			require.Equal(t, "in r", string(got))
			matches, err := filepath.Glob(tr.p("w/.capstan-*"))
			require.NoError(t, err)
			require.Empty(t, matches)
		})
	}
}

// TestReadCap: the read cap is exact and holds through links.
func TestReadCap(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	for name, size := range map[string]int{"under": 9, "at": 10, "over": 11, "far over": 1 << 20} {
		require.NoError(t, os.WriteFile(tr.p("r/"+strings.ReplaceAll(name, " ", "-")), make([]byte, size), 0o644))
	}
	require.NoError(t, os.Symlink("far-over", tr.p("r/big-link")))
	cfg := tr.cfg
	cfg.MaxReadBytes = 10
	tests := []struct {
		name    string
		path    string
		wantLen int
		tooBig  bool
	}{
		{name: "under the cap", path: "under", wantLen: 9},
		{name: "at the cap", path: "at", wantLen: 10},
		{name: "one byte over", path: "over", tooBig: true},
		{name: "far over", path: "far-over", tooBig: true},
		{name: "far over by link", path: "big-link", tooBig: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var d denials
			fsys := scopedfs.New(tr.grant(), cfg, d.record)
			data, abs, err := fsys.ReadFile(context.Background(), tt.path)
			if tt.tooBig {
				require.ErrorIs(t, err, scopedfs.ErrTooLarge)
				require.EqualError(t, err, "read "+abs+": file is larger than the read limit")
				require.Nil(t, data)
				require.Empty(t, d.all(), "not a denial")
				return
			}
			require.NoError(t, err)
			require.Len(t, data, tt.wantLen)
		})
	}
}

// TestPlantedPrefixLink: a granted prefix (or a directory above it) that
// lies in a writable area may be a symlink a tool planted, e.g. by checking
// out a repository with "data -> /etc" and then asking to read "data". Such
// a link is judged by the link rule like any other, however the prefix was
// granted; a link in an area no tool can write is the operator's and is
// followed.
func TestPlantedPrefixLink(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		grant    func(tr tree) *capability.FSGrant
		write    bool
		path     string // relative to the tree
		wantData string
		wantDeny bool
	}{
		{name: "read prefix replaced, writable by the personality", path: "w/inner/secret.txt", wantDeny: true,
			grant: func(tr tree) *capability.FSGrant {
				return &capability.FSGrant{Read: []string{tr.p("w/inner")}, Writable: []string{tr.p("w")}}
			}},
		{name: "read prefix replaced, parent written by the same call", path: "w/inner/secret.txt", wantDeny: true,
			grant: func(tr tree) *capability.FSGrant {
				return &capability.FSGrant{Read: []string{tr.p("w/inner")}, Write: []string{tr.p("w")}}
			}},
		{name: "directory above the read prefix replaced", path: "w/mid/r/file.txt", wantDeny: true,
			grant: func(tr tree) *capability.FSGrant {
				return &capability.FSGrant{Read: []string{tr.p("w/mid/r")}, Writable: []string{tr.p("w")}}
			}},
		{name: "write prefix replaced", write: true, path: "w/inner/secret.txt", wantDeny: true,
			grant: func(tr tree) *capability.FSGrant {
				return &capability.FSGrant{Write: []string{tr.p("w/inner")}, Writable: []string{tr.p("w")}}
			}},
		{name: "planted link into the read reach is followed", path: "w/into-r/file.txt", wantData: "in r",
			grant: func(tr tree) *capability.FSGrant {
				return &capability.FSGrant{Read: []string{tr.p("w/into-r"), tr.p("r")}, Writable: []string{tr.p("w")}}
			}},
		{name: "operator's link outside writable areas is followed", path: "alias-r/file.txt", wantData: "in r",
			grant: func(tr tree) *capability.FSGrant {
				return &capability.FSGrant{Read: []string{tr.p("alias-r")}, Writable: []string{tr.p("w")}}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := newTree(t)
			require.NoError(t, os.Symlink(tr.base, tr.p("w/inner")))
			require.NoError(t, os.Symlink(tr.base, tr.p("w/mid")))
			require.NoError(t, os.Symlink("../r", tr.p("w/into-r")))
			require.NoError(t, os.Symlink("r", tr.p("alias-r")))
			var d denials
			fsys := scopedfs.New(tt.grant(tr), tr.cfg, d.record)
			mode := "read"
			var data []byte
			var err error
			if tt.write {
				mode = "write"
				_, err = fsys.WriteFile(context.Background(), tr.p(tt.path), []byte("written"))
			} else {
				data, _, err = fsys.ReadFile(context.Background(), tr.p(tt.path))
			}
			if tt.wantDeny {
				requireOutcome(t, &d, err, "PATH_NOT_REACHABLE: "+mode+" not permitted for "+tr.p(tt.path), nil)
			} else {
				requireOutcome(t, &d, err, "", nil)
				require.Equal(t, tt.wantData, string(data))
			}
			secret, err := os.ReadFile(tr.p("secret.txt"))
			require.NoError(t, err)
			require.Equal(t, "SECRET", string(secret))
		})
	}
}
