package process_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

// The floor binds children (security.md section 1): the attacks of a
// child whose call may read or write "/".

// fakeSeed is shaped like an NKey user seed; it authenticates nothing.
const fakeSeed = "SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PV5W2J2ANCHOR"

const (
	denied   = "permission denied"
	readable = "ok"
)

// probeFiles opens each argument for reading (O_NONBLOCK, so a FIFO or a
// device does not block) and reads a little of it (one name of a
// directory); an argument "write:<path>" is opened for writing, and
// nothing is written. It prints one JSON object: each argument to "ok" or
// the system error.
func probeFiles(args []string) int {
	out := map[string]string{}
	for _, a := range args {
		path, write := strings.CutPrefix(a, "write:")
		flag := os.O_RDONLY
		if write {
			flag = os.O_WRONLY
		}
		f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK, 0)
		if err == nil {
			if fi, serr := f.Stat(); !write && serr == nil && fi.IsDir() {
				_, err = f.Readdirnames(1)
			} else if !write && serr == nil && fi.Mode().IsRegular() {
				_, err = f.Read(make([]byte, 64))
			}
			_ = f.Close()
		}
		out[a] = readable
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			out[a] = pe.Err.Error()
		} else if err != nil && err.Error() != "EOF" {
			out[a] = err.Error()
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return 3
	}
	return 0
}

// probe runs probeFiles on paths as a child of r.
func probe(t *testing.T, r tool.Runner, paths []string) map[string]string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	res, err := r.Run(context.Background(), tool.Command{Binary: exe, Args: paths, Env: map[string]string{helperEnv: "probe-files"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "stdout %q stderr %q", res.Stdout, res.Stderr)
	var out map[string]string
	require.NoError(t, json.Unmarshal(res.Stdout, &out), "stdout %q", res.Stdout)
	return out
}

// readAll is a reach of the whole file system, as `fs_reach: {read: ["/"]}`
// resolves.
func readAll(write bool) process.Reach {
	g := &capability.FSGrant{Read: []string{"/"}}
	if write {
		g.Write = []string{"/"}
	}
	return process.Reach{FS: g}
}

// TestAttackChildReadsTheFloor is the attack of issue 26: a personality
// with `fs_reach: {read: ["/"]}` and `process: {allow: [cat]}` prints the
// embedded server's NKey seed and /etc/shadow with `cat`, which the file
// accessor refuses. With the floor binding children, both fail and an
// ordinary file under the same reach is still read; as on main before, the
// same child prints the seed.
func TestAttackChildReadsTheFloor(t *testing.T) {
	t.Parallel()
	needLandlock(t, 1)
	home, dataDir, beside := realTempDir(t), realTempDir(t), realTempDir(t)
	creds := filepath.Join(dataDir, "embedded.creds")
	require.NoError(t, os.WriteFile(creds, []byte("# NKey user seed\n"+fakeSeed+"\n"), 0o600))
	note := filepath.Join(beside, "note")
	require.NoError(t, os.WriteFile(note, []byte("readable"), 0o644))
	floor := scopedfs.NewFloor(home, []string{dataDir})
	cat := func(t *testing.T, r tool.Runner, path string) *tool.ProcessResult {
		t.Helper()
		res, err := r.Run(context.Background(), tool.Command{Binary: "cat", Args: []string{path}})
		require.NoError(t, err)
		return res
	}
	for _, sp := range spawners {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			cfg := sp.cfg
			cfg.Floor = floor
			r := process.New(grant("cat"), readAll(false), resolver, cfg, nil)
			for _, path := range []string{creds, "/etc/shadow"} {
				res := cat(t, r, path)
				require.NotEqual(t, 0, res.ExitCode, "cat %s: stdout %q", path, res.Stdout)
				require.Contains(t, string(res.Stderr), "Permission denied", path)
				require.Empty(t, res.Stdout, path)
			}
			res := cat(t, r, note)
			require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
			require.Equal(t, "readable", string(res.Stdout), "an ordinary file under the same reach")
		})
	}
	t.Run("as on main before the floor bound children", func(t *testing.T) {
		t.Parallel()
		r := process.Floorless(process.New(grant("cat"), readAll(false), resolver, process.Config{Floor: floor}, nil))
		res := cat(t, r, creds)
		require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
		require.Contains(t, string(res.Stdout), fakeSeed, "the child printed the seed")
		if _, err := os.ReadFile("/etc/shadow"); err == nil {
			res = cat(t, r, "/etc/shadow")
			require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
		}
	})
}

// floorEntry is one entry of the floor of capabilities.md, probed from a
// child.
type floorEntry struct {
	name string
	path string
	// created: the test made it (so the control must read it too).
	created bool
}

// floorEntries returns every entry of the floor of capabilities.md as a
// worker whose home, own files and data directory are under tmp holds
// them, creating those and leaving the system's as they are.
func floorEntries(t *testing.T, home, own string) []floorEntry {
	t.Helper()
	mk := func(name, path string) floorEntry {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
		require.NoError(t, os.WriteFile(path, []byte("floor: "+name), 0o600))
		return floorEntry{name: name, path: path, created: true}
	}
	entries := []floorEntry{
		mk("personalities directory", filepath.Join(own, "personalities", "researcher.yaml")),
		mk("MCP servers directory", filepath.Join(own, "mcp", "github.yaml")),
		mk("secrets file", filepath.Join(own, "secrets.json")),
		mk("NATS credentials", filepath.Join(own, "nats.creds")),
		mk("data directory", filepath.Join(own, "data", "jetstream", "meta.inf")),
		mk("embedded.creds", filepath.Join(own, "data", "embedded.creds")),
		mk("~/.ssh", filepath.Join(home, ".ssh", "id_ed25519")),
		mk("~/.aws", filepath.Join(home, ".aws", "credentials")),
		mk("~/.gnupg", filepath.Join(home, ".gnupg", "private-keys-v1.d", "key")),
		mk("~/.netrc", filepath.Join(home, ".netrc")),
	}
	for _, h := range []string{".bash_history", ".zsh_history", ".history", ".python_history", ".node_repl_history", ".psql_history", ".mysql_history"} {
		entries = append(entries, mk("shell history "+h, filepath.Join(home, h)))
	}
	for _, p := range []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/sudoers.d",
		"/proc/self/status", "/proc/1/environ", "/proc", "/sys/kernel", "/sys", "/boot", "/root", "/dev/kmsg"} {
		entries = append(entries, floorEntry{name: p, path: p})
	}
	if matches, _ := filepath.Glob("/etc/sudoers?*"); len(matches) > 0 {
		entries = append(entries, floorEntry{name: "/etc/sudoers*", path: matches[0]})
	}
	return entries
}

// TestFloorBindsChildren probes every entry of the floor from a child
// whose call may read "/" (and one that may write "/"), through both
// spawners: each is refused with EACCES, while files beside them are
// reached; as on main before, the entries the test made are read.
func TestFloorBindsChildren(t *testing.T) {
	t.Parallel()
	needLandlock(t, 1)
	home, own, beside := realTempDir(t), realTempDir(t), realTempDir(t)
	entries := floorEntries(t, home, own)
	floor := scopedfs.NewFloor(home, []string{
		filepath.Join(own, "personalities"), filepath.Join(own, "mcp"), filepath.Join(own, "secrets.json"),
		filepath.Join(own, "nats.creds"), filepath.Join(own, "data"),
	})
	note := filepath.Join(beside, "note")
	require.NoError(t, os.WriteFile(note, []byte("beside"), 0o644))
	homeNote := filepath.Join(home, "notes.txt")
	require.NoError(t, os.WriteFile(homeNote, []byte("beside"), 0o644))
	var paths, writes []string
	for _, e := range entries {
		paths = append(paths, e.path)
		if e.created || e.path == "/etc/shadow" {
			writes = append(writes, "write:"+e.path)
		}
	}
	controls := []string{note, homeNote, "/etc/passwd", "/usr/bin"}
	for _, sp := range spawners {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			cfg := sp.cfg
			cfg.Floor = floor
			read := probe(t, process.New(grant("*"), readAll(false), resolver, cfg, nil), append(paths, controls...))
			write := probe(t, process.New(grant("*"), readAll(true), resolver, cfg, nil), append(writes, "write:"+note, "write:"+homeNote))
			for _, e := range entries {
				t.Run(e.name, func(t *testing.T) {
					if _, err := os.Lstat(e.path); err != nil {
						t.Skipf("%s is not on this machine: %v", e.path, err)
					}
					require.Equal(t, denied, read[e.path], "read %s", e.path)
					if w, ok := write["write:"+e.path]; ok {
						require.Equal(t, denied, w, "write %s", e.path)
					}
				})
			}
			for _, c := range controls {
				require.Equal(t, readable, read[c], "%s beside the floor", c)
			}
			require.Equal(t, readable, write["write:"+note], "a file beside the floor is writable")
			require.Equal(t, readable, write["write:"+homeNote], "a file of the home is writable")
		})
	}
	t.Run("as on main before the floor bound children", func(t *testing.T) {
		t.Parallel()
		read := probe(t, process.Floorless(process.New(grant("*"), readAll(false), resolver, process.Config{Floor: floor}, nil)), paths)
		for _, e := range entries {
			if e.created {
				require.Equal(t, readable, read[e.path], "%s (%s) is read without the floor", e.name, e.path)
			}
		}
	})
}

// TestFloorRootLiftedForChildren: an allowed prefix inside /root lifts the
// /root rule for what it covers, and nothing else of /root, for children
// as for the file accessor.
func TestFloorRootLiftedForChildren(t *testing.T) {
	t.Parallel()
	needLandlock(t, 1)
	lifted, err := os.MkdirTemp("/root", "capstan-floor-lift-")
	if err != nil {
		t.Skipf("needs a directory of its own inside /root: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(lifted) })
	other, err := os.MkdirTemp("/root", "capstan-floor-other-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(other) })
	in, out := filepath.Join(lifted, "f"), filepath.Join(other, "f")
	require.NoError(t, os.WriteFile(in, []byte("lifted"), 0o644))
	require.NoError(t, os.WriteFile(out, []byte("floor"), 0o644))
	home := realTempDir(t)
	for _, sp := range spawners {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			cfg := sp.cfg
			cfg.Floor = scopedfs.NewFloor(home, nil)
			reach := process.Reach{FS: &capability.FSGrant{Read: []string{"/", lifted}}}
			got := probe(t, process.New(grant("*"), reach, resolver, cfg, nil), []string{in, out, lifted})
			require.Equal(t, map[string]string{in: readable, lifted: readable, out: denied}, got)
			// The lift is of the direction that allows it: a write reach
			// of "/" does not reach into /root.
			reach = process.Reach{FS: &capability.FSGrant{Read: []string{lifted}, Write: []string{"/"}}}
			got = probe(t, process.New(grant("*"), reach, resolver, cfg, nil), []string{"write:" + in, "write:" + out, in})
			require.Equal(t, map[string]string{"write:" + in: denied, "write:" + out: denied, in: readable}, got)
		})
	}
}

// TestWorkingDirOnTheFloor: a working directory on the floor is refused
// as one outside the reach is.
func TestWorkingDirOnTheFloor(t *testing.T) {
	t.Parallel()
	dataDir := realTempDir(t)
	r := process.New(grant("true"), readAll(false), resolver, process.Config{Floor: scopedfs.NewFloor(realTempDir(t), []string{dataDir})}, nil)
	_, err := r.Run(context.Background(), tool.Command{Binary: "true", Dir: dataDir})
	require.EqualError(t, err, "PATH_NOT_REACHABLE: read not permitted for "+dataDir)
	require.ErrorIs(t, err, tool.ErrPathNotReachable)
}
