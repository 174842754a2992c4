package process_test

import (
	"context"
	"crypto/rand"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

// needLandlock skips a test on a machine whose children cannot be confined
// at Landlock ABI abi.
func needLandlock(t *testing.T, abi int) {
	t.Helper()
	if s := process.Sandbox(); !s.Landlock || s.LandlockABI < abi {
		t.Skipf("needs Landlock ABI %d or later to confine children; this machine: ABI %d (%s)", abi, s.LandlockABI, s.Reason)
	}
}

// fileTree is a reach's directories with one file each, and a directory
// outside the reach.
type fileTree struct {
	read, write, outside string
}

func newFileTree(t *testing.T) fileTree {
	t.Helper()
	root := realTempDir(t)
	ft := fileTree{read: filepath.Join(root, "read"), write: filepath.Join(root, "write"), outside: filepath.Join(root, "outside")}
	for dir, content := range map[string]string{ft.read: "inside", ft.write: "writable", ft.outside: "outside"} {
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "f.txt"), []byte(content), 0o644))
	}
	require.NoError(t, os.Mkdir(filepath.Join(ft.write, "a"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(ft.write, "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ft.write, "a", "moved.txt"), []byte("moved"), 0o644))
	// A link inside the read reach to a file outside it.
	require.NoError(t, os.Symlink(filepath.Join(ft.outside, "f.txt"), filepath.Join(ft.read, "link")))
	return ft
}

func (ft fileTree) reach() process.Reach {
	return process.Reach{FS: &capability.FSGrant{Read: []string{ft.read}, Write: []string{ft.write}}}
}

func TestConfinedFiles(t *testing.T) {
	t.Parallel()
	needLandlock(t, 3)
	for _, sp := range spawners {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			confinedFiles(t, sp.cfg)
		})
	}
}

func confinedFiles(t *testing.T, cfg process.Config) {
	ft := newFileTree(t)
	r := process.New(grant("*"), ft.reach(), resolver, cfg, nil)
	const denied = "Permission denied"
	tests := []struct {
		name       string
		args       []string // binary, then its arguments
		wantStdout string
		wantDenied bool // non-zero exit, stderr says "Permission denied"
		check      func(t *testing.T)
	}{
		{name: "read inside the read reach", args: []string{"cat", ft.read + "/f.txt"}, wantStdout: "inside"},
		{name: "list the read reach", args: []string{"ls", ft.read}, wantStdout: "f.txt\nlink\n"},
		{name: "read inside the write reach", args: []string{"cat", ft.write + "/f.txt"}, wantStdout: "writable"},
		{name: "create inside the write reach", args: []string{"touch", ft.write + "/new"},
			check: func(t *testing.T) { require.FileExists(t, ft.write+"/new") }},
		{name: "move between directories of the write reach", args: []string{"mv", ft.write + "/a/moved.txt", ft.write + "/b/moved.txt"},
			check: func(t *testing.T) { require.FileExists(t, ft.write+"/b/moved.txt") }},
		{name: "write to /dev/null", args: []string{"bash", "-c", "echo x > /dev/null && echo ok"}, wantStdout: "ok\n"},
		{name: "system binaries and libraries", args: []string{"bash", "-c", "ls /bin | grep -qx ls && echo ok"}, wantStdout: "ok\n"},

		{name: "read outside the reach", args: []string{"cat", ft.outside + "/f.txt"}, wantDenied: true},
		{name: "list outside the reach", args: []string{"ls", ft.outside}, wantDenied: true},
		{name: "read through a link leaving the reach", args: []string{"cat", ft.read + "/link"}, wantDenied: true},
		{name: "read /etc/passwd", args: []string{"cat", "/etc/passwd"}, wantDenied: true},
		{name: "read the worker's environment", args: []string{"cat", "/proc/" + strconv.Itoa(os.Getpid()) + "/environ"}, wantDenied: true},
		{name: "list /tmp", args: []string{"ls", os.TempDir()}, wantDenied: true},
		{name: "create in the read reach", args: []string{"touch", ft.read + "/new"}, wantDenied: true,
			check: func(t *testing.T) { require.NoFileExists(t, ft.read+"/new") }},
		{name: "remove in the read reach", args: []string{"rm", ft.read + "/f.txt"}, wantDenied: true,
			check: func(t *testing.T) { require.FileExists(t, ft.read+"/f.txt") }},
		{name: "create outside the reach", args: []string{"touch", ft.outside + "/new"}, wantDenied: true,
			check: func(t *testing.T) { require.NoFileExists(t, ft.outside+"/new") }},
		{name: "truncate outside the reach", args: []string{"truncate", "-s", "0", ft.outside + "/f.txt"}, wantDenied: true,
			check: func(t *testing.T) {
				b, err := os.ReadFile(ft.outside + "/f.txt")
				require.NoError(t, err)
				require.Equal(t, "outside", string(b))
			}},
		{name: "move out of the write reach", args: []string{"mv", ft.write + "/f.txt", ft.outside + "/stolen"}, wantDenied: true,
			check: func(t *testing.T) { require.NoFileExists(t, ft.outside+"/stolen") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: some cases change the shared tree.
			res, err := r.Run(context.Background(), tool.Command{Binary: tt.args[0], Args: tt.args[1:]})
			require.NoError(t, err)
			if tt.wantDenied {
				require.NotEqual(t, 0, res.ExitCode, "stdout %q", res.Stdout)
				require.Contains(t, string(res.Stderr), denied)
			} else {
				require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
				require.Equal(t, tt.wantStdout, string(res.Stdout))
			}
			if tt.check != nil {
				tt.check(t)
			}
		})
	}
}

// TestUnconfinedChildReachesEverything is the degraded path: without
// Landlock a child reads and writes outside its reach.
func TestUnconfinedChildReachesEverything(t *testing.T) {
	t.Parallel()
	ft := newFileTree(t)
	r := process.New(grant("*"), ft.reach(), resolver, process.Config{NoLandlock: true}, nil)
	res, err := r.Run(context.Background(), tool.Command{Binary: "cat", Args: []string{ft.outside + "/f.txt"}})
	require.NoError(t, err)
	require.Equal(t, "outside", string(res.Stdout))
	res, err = r.Run(context.Background(), tool.Command{Binary: "touch", Args: []string{ft.outside + "/new"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	require.FileExists(t, ft.outside+"/new")
}

// listen accepts and closes connections on a loopback TCP port and on an
// abstract unix socket until the test ends.
func listen(t *testing.T) (tcpAddr, unixAddr string) {
	t.Helper()
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	unix, err := net.Listen("unix", "@capstan-process-test-"+rand.Text())
	require.NoError(t, err)
	var wg sync.WaitGroup
	for _, ln := range []net.Listener{tcp, unix} {
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		})
	}
	t.Cleanup(func() {
		_ = tcp.Close()
		_ = unix.Close()
		wg.Wait()
	})
	return "tcp:" + tcp.Addr().String(), "unix:" + unix.Addr().String()
}

func TestConfinedNetwork(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	tcpAddr, unixAddr := listen(t)
	unconfined := process.Config{NoLandlock: true, NoSeccomp: true, NoNetNS: true}
	tests := []struct {
		name     string
		confined bool // needs the whole sandbox
		network  bool
		cfg      process.Config
		addr     string
		wantDeny []string // the dial error contains one of these
	}{
		{name: "TCP connect without network", confined: true, addr: tcpAddr, wantDeny: []string{"socket: operation not permitted"}},
		// Abstract sockets belong to a network namespace; Landlock (ABI 6)
		// scopes them too.
		{name: "abstract unix socket outside the sandbox", confined: true, addr: unixAddr, wantDeny: []string{"connect: connection refused", "connect: operation not permitted"}},
		{name: "unconfined TCP connect without network", cfg: unconfined, addr: tcpAddr},
		{name: "unconfined abstract unix socket", cfg: unconfined, addr: unixAddr},
		{name: "TCP with network, CAPSTAN_PROCESS_NETWORK=unconfined and no namespace", network: true,
			cfg: process.Config{NoNetNS: true, Network: process.NetworkUnconfined}, addr: tcpAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.confined {
				needConfined(t)
			}
			r := process.New(grant(exe), process.Reach{Network: tt.network}, resolver, tt.cfg, nil)
			res, err := r.Run(context.Background(), tool.Command{Binary: exe, Env: map[string]string{helperEnv: "dial", addrEnv: tt.addr}})
			require.NoError(t, err)
			if len(tt.wantDeny) > 0 {
				require.Equal(t, 1, res.ExitCode, "stderr %q", res.Stderr)
				require.Condition(t, func() bool {
					for _, d := range tt.wantDeny {
						if strings.Contains(string(res.Stdout), d) {
							return true
						}
					}
					return false
				}, "dial error %q is none of %q", res.Stdout, tt.wantDeny)
				return
			}
			require.Equal(t, 0, res.ExitCode, "stdout %q, stderr %q", res.Stdout, res.Stderr)
		})
	}
}

// TestNetworkRefusedWithoutNamespace: where no network namespace is
// allowed, a call with network is refused before anything starts, unless
// the operator chose unconfined network.
func TestNetworkRefusedWithoutNamespace(t *testing.T) {
	t.Parallel()
	r := process.New(grant("true"), process.Reach{Network: true}, resolver, process.Config{NoNetNS: true}, nil)
	_, err := r.Run(context.Background(), tool.Command{Binary: "true"})
	require.EqualError(t, err, "Process network needs a network namespace, which this machine does not allow: turned off by the runner's configuration")
	require.ErrorIs(t, err, process.ErrNetworkRefused)

	r = process.New(grant("true"), process.Reach{Network: true}, resolver, process.Config{}, nil)
	if process.Sandbox().NetworkNamespace {
		_, err = r.Run(context.Background(), tool.Command{Binary: "true"})
		require.EqualError(t, err, "process: the call has network but no egress proxy")
	}
}

// TestConfinedSignals checks that a confined child cannot signal the
// worker (Landlock ABI 6 scopes signals), while an unconfined one can.
func TestConfinedSignals(t *testing.T) {
	t.Parallel()
	needLandlock(t, 6)
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, noLL := range []bool{false, true} {
		r := process.New(grant(exe), process.Reach{}, resolver, process.Config{NoLandlock: noLL}, nil)
		res, err := r.Run(context.Background(), tool.Command{Binary: exe, Env: map[string]string{helperEnv: "kill-parent"}})
		require.NoError(t, err)
		if noLL {
			require.Equal(t, 0, res.ExitCode, "stdout %q", res.Stdout)
			continue
		}
		require.Equal(t, 1, res.ExitCode)
		require.Equal(t, syscall.EPERM.Error()+"\n", string(res.Stdout))
	}
}

// TestRunPathQualifiedBinaries runs a script named by path: allowed only
// when listed exactly, confined or not.
func TestRunPathQualifiedBinaries(t *testing.T) {
	t.Parallel()
	dir := realTempDir(t)
	script := filepath.Join(dir, "hello")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho hello from \"$0\"\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data"), []byte("#!/bin/sh\necho no\n"), 0o644))
	inDir := readReach(dir)
	tests := []struct {
		name       string
		grant      *capability.BinaryGrant
		cmd        tool.Command
		wantStdout string
		wantMsg    string // a BINARY_NOT_ALLOWED denial
		wantIs     error  // another error
	}{
		{name: "absolute path listed exactly", grant: grant(script), cmd: tool.Command{Binary: script}, wantStdout: "hello from " + script + "\n"},
		{name: "relative path listed exactly", grant: grant("./hello"), cmd: tool.Command{Binary: "./hello", Dir: dir}, wantStdout: "hello from " + script + "\n"},
		{name: "absolute path under star", grant: grant("*"), cmd: tool.Command{Binary: script}, wantStdout: "hello from " + script + "\n"},

		{name: "absolute path not listed", grant: grant("hello"), cmd: tool.Command{Binary: script},
			wantMsg: "BINARY_NOT_ALLOWED: " + script + " is not in the declared allowedBinaries"},
		{name: "relative path where the absolute one is listed", grant: grant(script), cmd: tool.Command{Binary: "./hello", Dir: dir},
			wantMsg: "BINARY_NOT_ALLOWED: ./hello is not in the declared allowedBinaries"},
		{name: "absolute path where the relative one is listed", grant: grant("./hello"), cmd: tool.Command{Binary: script, Dir: dir},
			wantMsg: "BINARY_NOT_ALLOWED: " + script + " is not in the declared allowedBinaries"},
		{name: "another spelling of the listed path", grant: grant(script), cmd: tool.Command{Binary: dir + "/./hello"},
			wantMsg: "BINARY_NOT_ALLOWED: " + dir + "/./hello is not in the declared allowedBinaries"},
		{name: "bare name where the path is listed", grant: grant(script), cmd: tool.Command{Binary: "hello"},
			wantMsg: "BINARY_NOT_ALLOWED: hello is not in the declared allowedBinaries"},
		{name: "bare name is never looked up outside the trusted PATH", grant: grant("hello"), cmd: tool.Command{Binary: "hello", Dir: dir}, wantIs: exec.ErrNotFound},
		{name: "missing binary", grant: grant(dir + "/missing"), cmd: tool.Command{Binary: dir + "/missing"}, wantIs: fs.ErrNotExist},
		{name: "file that is not executable", grant: grant(dir + "/data"), cmd: tool.Command{Binary: dir + "/data"}, wantIs: fs.ErrPermission},
	}
	for _, noLL := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(tt.name+confinedName(noLL), func(t *testing.T) {
				t.Parallel()
				var d denials
				r := process.New(tt.grant, inDir, resolver, process.Config{NoLandlock: noLL}, d.record)
				res, err := r.Run(context.Background(), tt.cmd)
				switch {
				case tt.wantMsg != "":
					require.EqualError(t, err, tt.wantMsg)
					require.ErrorIs(t, err, tool.ErrBinaryNotAllowed)
					require.Equal(t, []error{err}, d.all())
				case tt.wantIs != nil:
					require.ErrorIs(t, err, tt.wantIs)
					_, isDenial := tool.DenialCode(err)
					require.False(t, isDenial)
				default:
					require.NoError(t, err)
					require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
					require.Equal(t, tt.wantStdout, string(res.Stdout))
				}
			})
		}
	}
}

func confinedName(noLandlock bool) string {
	if noLandlock {
		return " unconfined"
	}
	return ""
}
