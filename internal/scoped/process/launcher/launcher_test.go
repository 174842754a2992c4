package launcher_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
)

// helperEnv makes the test binary print "hello" and exit: it shows that a
// process ran its ordinary main rather than the launcher.
const helperEnv = "CAPSTAN_LAUNCHER_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		fmt.Print("hello")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestArgsParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		spec launcher.Spec
		path string
		argv []string
	}{
		{name: "empty spec", path: "/bin/true", argv: []string{"true"}},
		{name: "full spec", spec: launcher.Spec{Landlock: true, Read: []string{"/usr", "/etc/ld.so.cache"}, Write: []string{"/tmp/x", "/dev/null"},
			Net: launcher.NetProxy, NetNS: true, Seccomp: true, Cgroups: []string{"/sys/fs/cgroup/pids/c1"}, Tmp: "/tmp/w/proc-1", TmpBytes: 1 << 20},
			path: "/usr/bin/git", argv: []string{"git", "status", "--short", "", "a b"}},
		{name: "argv0 differs from the path", path: "/usr/bin/bash", argv: []string{"-bash", "-c", "echo"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args, err := launcher.Args(tt.spec, tt.path, tt.argv)
			require.NoError(t, err)
			require.Equal(t, launcher.Arg0, args[0])
			spec, path, argv, err := launcher.Parse(args)
			require.NoError(t, err)
			want := tt.spec
			want.Version = 2
			require.Equal(t, want, spec)
			require.Equal(t, tt.path, path)
			require.Equal(t, tt.argv, argv)
		})
	}
}

func TestArgsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		spec    launcher.Spec
		path    string
		argv    []string
		wantErr string
	}{
		{name: "relative read path", spec: launcher.Spec{Read: []string{"usr"}}, path: "/bin/true", argv: []string{"true"}, wantErr: `launcher: path "usr" must be absolute and clean`},
		{name: "unclean write path", spec: launcher.Spec{Write: []string{"/tmp/../etc"}}, path: "/bin/true", argv: []string{"true"}, wantErr: `launcher: path "/tmp/../etc" must be absolute and clean`},
		{name: "relative binary", path: "true", argv: []string{"true"}, wantErr: `launcher: binary path "true" must be absolute and clean`},
		{name: "empty argv", path: "/bin/true", wantErr: "launcher: empty argv"},
		{name: "relative cgroup", spec: launcher.Spec{Cgroups: []string{"sys/fs/cgroup"}}, path: "/bin/true", argv: []string{"true"}, wantErr: `launcher: path "sys/fs/cgroup" must be absolute and clean`},
		{name: "proxy without a namespace", spec: launcher.Spec{Net: launcher.NetProxy}, path: "/bin/true", argv: []string{"true"}, wantErr: "launcher: net proxy needs a network namespace"},
		{name: "unknown net mode", spec: launcher.Spec{Net: "wifi"}, path: "/bin/true", argv: []string{"true"}, wantErr: `launcher: unknown net mode "wifi"`},
		{name: "tmp without a user namespace", spec: launcher.Spec{Tmp: "/tmp/x", TmpBytes: 1 << 20}, path: "/bin/true", argv: []string{"true"}, wantErr: "launcher: tmp needs a user namespace"},
		{name: "tmp without a size", spec: launcher.Spec{NetNS: true, Tmp: "/tmp/x"}, path: "/bin/true", argv: []string{"true"}, wantErr: "launcher: tmp size 0 must be positive"},
		{name: "tmp size without a path", spec: launcher.Spec{NetNS: true, TmpBytes: 1}, path: "/bin/true", argv: []string{"true"}, wantErr: `launcher: tmp path "" must be absolute and clean`},
		{name: "relative tmp", spec: launcher.Spec{NetNS: true, Tmp: "tmp/x", TmpBytes: 1}, path: "/bin/true", argv: []string{"true"}, wantErr: `launcher: tmp path "tmp/x" must be absolute and clean`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := launcher.Args(tt.spec, tt.path, tt.argv)
			require.EqualError(t, err, tt.wantErr)
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "too few arguments", args: []string{launcher.Arg0, `{"v":2}`, "/bin/true"}, wantErr: "launcher: want capstan-sandbox-launcher <spec> <path> <argv0> [args...], got 3 arguments"},
		{name: "another argv0", args: []string{"worker", `{"v":2}`, "/bin/true", "true"}, wantErr: "launcher: want capstan-sandbox-launcher <spec> <path> <argv0> [args...], got 4 arguments"},
		{name: "not JSON", args: []string{launcher.Arg0, `v=1`, "/bin/true", "true"}, wantErr: "launcher: decode spec: invalid character 'v' looking for beginning of value"},
		{name: "unknown field", args: []string{launcher.Arg0, `{"v":1,"exec":["/"]}`, "/bin/true", "true"}, wantErr: `launcher: decode spec: json: unknown field "exec"`},
		{name: "trailing data", args: []string{launcher.Arg0, `{"v":1} {}`, "/bin/true", "true"}, wantErr: "launcher: decode spec: trailing data"},
		{name: "no version", args: []string{launcher.Arg0, `{}`, "/bin/true", "true"}, wantErr: "launcher: spec version 0, want 2"},
		{name: "other version", args: []string{launcher.Arg0, `{"v":1}`, "/bin/true", "true"}, wantErr: "launcher: spec version 1, want 2"},
		{name: "relative path", args: []string{launcher.Arg0, `{"v":2,"read":["."]}`, "/bin/true", "true"}, wantErr: `launcher: path "." must be absolute and clean`},
		{name: "NUL in a path", args: []string{launcher.Arg0, `{"v":2,"write":["/tmp/a\u0000b"]}`, "/bin/true", "true"}, wantErr: `launcher: path "/tmp/a\x00b" must be absolute and clean`},
		{name: "relative binary", args: []string{launcher.Arg0, `{"v":2}`, "./true", "true"}, wantErr: `launcher: binary path "./true" must be absolute and clean`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, _, err := launcher.Parse(tt.args)
			require.EqualError(t, err, tt.wantErr)
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`{"v":2,"landlock":true,"read":["/usr"],"write":["/tmp"],"net":"proxy","netns":true,"seccomp":true,"cgroups":["/c"],"tmp":"/tmp/p","tmp_bytes":1048576}`, "/bin/true", "true")
	f.Add(`{"v":2}`, "/x", "")
	f.Add(`{"v":3,"read":[1]}`, "x", "y")
	f.Fuzz(func(t *testing.T, spec, path, arg string) {
		s, p, argv, err := launcher.Parse([]string{launcher.Arg0, spec, path, arg})
		if err != nil {
			return
		}
		// What parses encodes again to the same meaning.
		args, err := launcher.Args(s, p, argv)
		if err != nil {
			t.Fatalf("Args refuses what Parse accepted: %v", err)
		}
		s2, p2, argv2, err := launcher.Parse(args)
		if err != nil || p2 != p || len(argv2) != 1 || argv2[0] != arg || s2.Net != s.Net || s2.NetNS != s.NetNS || s2.Tmp != s.Tmp || s2.TmpBytes != s.TmpBytes || s2.Seccomp != s.Seccomp || s2.Landlock != s.Landlock || len(s2.Cgroups) != len(s.Cgroups) || len(s2.Read) != len(s.Read) || len(s2.Write) != len(s.Write) {
			t.Fatalf("round trip changed %q %q %q: %v", spec, path, arg, err)
		}
	})
}

func TestPrepareRefusesExtraFiles(t *testing.T) {
	t.Parallel()
	c := exec.Command("/bin/true")
	c.ExtraFiles = []*os.File{os.Stdin}
	_, err := launcher.Prepare(c, launcher.Spec{}, "/bin/true", []string{"true"})
	require.EqualError(t, err, "launcher: the command already has extra files")
}

// TestNotTriggeredByAccident runs this test binary with argv[0] set to the
// marker but without the status pipe: it runs its ordinary main.
func TestNotTriggeredByAccident(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	regular, err := os.Create(filepath.Join(t.TempDir(), "fd3"))
	require.NoError(t, err)
	defer regular.Close()
	tests := []struct {
		name  string
		extra []*os.File
	}{
		{name: "no descriptor 3"},
		{name: "descriptor 3 is a regular file", extra: []*os.File{regular}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := exec.Command(exe)
			c.Args = []string{launcher.Arg0, `{"v":2}`, "/bin/false", "false"}
			c.Env = []string{helperEnv + "=1"}
			c.ExtraFiles = tt.extra
			out, err := c.Output()
			require.NoError(t, err)
			require.Equal(t, "hello", string(out))
		})
	}
}

// launch runs path with argv through a real launcher (this test binary)
// and returns the exit status, the output and Await's error.
func launch(t *testing.T, spec launcher.Spec, path string, argv []string) (exit int, stdout string, awaitErr error) {
	t.Helper()
	c := exec.Command("/bin/true")
	h, err := launcher.Prepare(c, spec, path, argv)
	require.NoError(t, err)
	out, err := c.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c.Start())
	l, awaitErr := h.Await()
	require.Nil(t, l, "no listener without a proxy")
	b, err := io.ReadAll(out)
	require.NoError(t, err)
	_ = c.Wait()
	return c.ProcessState.ExitCode(), string(b), awaitErr
}

func TestLaunch(t *testing.T) {
	t.Parallel()
	if _, err := launcher.ABI(); err != nil {
		// The degraded path: a launcher never runs a child without the
		// Landlock it was asked for.
		_, perr := launcher.Prepare(exec.Command("/bin/true"), launcher.Spec{Landlock: true}, "/bin/echo", []string{"echo"})
		require.ErrorContains(t, perr, "launcher: landlock_create_ruleset")
		t.Skipf("Landlock is not available (%v): only the refusal is tested", err)
	}
	echo, err := exec.LookPath("echo")
	require.NoError(t, err)
	echo, err = filepath.EvalSymlinks(echo)
	require.NoError(t, err)
	tests := []struct {
		name       string
		spec       launcher.Spec
		path       string
		wantStdout string
		wantStep   string
		wantErrno  syscall.Errno
		wantExit   int
	}{
		{name: "runs the binary", spec: launcher.Spec{Landlock: true, Read: []string{"/usr", "/bin", "/lib", "/lib64", filepath.Dir(echo)}}, path: echo, wantStdout: "hi\n"},
		{name: "missing binary", path: "/capstan/no/such/binary", wantStep: "exec /capstan/no/such/binary", wantErrno: syscall.ENOENT, wantExit: 127},
		{name: "binary outside the reach", spec: launcher.Spec{Landlock: true, Read: []string{t.TempDir()}}, path: echo, wantStep: "exec " + echo, wantErrno: syscall.EACCES, wantExit: 126},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			exit, stdout, err := launch(t, tt.spec, tt.path, []string{"echo", "hi"})
			if tt.wantStep == "" {
				require.NoError(t, err)
				require.Equal(t, 0, exit)
				require.Equal(t, tt.wantStdout, stdout)
				return
			}
			var le *launcher.Error
			require.ErrorAs(t, err, &le)
			require.Equal(t, tt.wantStep, le.Step)
			require.True(t, errors.Is(err, tt.wantErrno), "%v wraps %v", err, tt.wantErrno)
			require.Equal(t, tt.wantExit, exit)
		})
	}
}

// TestLaunchBadSpec gives a launcher a spec it must refuse.
func TestLaunchBadSpec(t *testing.T) {
	t.Parallel()
	c := exec.Command("/bin/true")
	h, err := launcher.Prepare(c, launcher.Spec{}, "/bin/true", []string{"true"})
	require.NoError(t, err)
	c.Args[1] = `{"v":99}`
	require.NoError(t, c.Start())
	_, err = h.Await()
	require.EqualError(t, err, "spec: launcher: spec version 99, want 2")
	require.NoError(t, errors.Unwrap(err), "no system error")
	require.Error(t, c.Wait())
	require.Equal(t, 126, c.ProcessState.ExitCode())
}

func TestAwait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		records  []string // one message each
		withFD   int      // index of the record that carries a descriptor; -1 none
		withFD2  int      // another such index; 0 none
		wantErr  string
		wantIs   error
		wantConn bool // a listener is returned
		wantTmp  bool // a tmpfs root is returned
	}{
		{name: "closed without a word", withFD: -1},
		{name: "failure with errno", records: []string{`{"step":"exec /x","message":"no such file or directory","errno":2}`}, withFD: -1, wantErr: "exec /x: no such file or directory", wantIs: syscall.ENOENT},
		{name: "failure without errno", records: []string{`{"step":"spec","message":"bad"}`}, withFD: -1, wantErr: "spec: bad"},
		{name: "garbage", records: []string{"boom"}, withFD: -1, wantErr: `launcher: unreadable status "boom"`},
		{name: "listener then exec", records: []string{`{"listener":true}`}, withFD: 0, wantConn: true},
		{name: "listener then failure", records: []string{`{"listener":true}`, `{"step":"landlock","message":"no"}`}, withFD: 0, wantErr: "landlock: no"},
		{name: "listener without a descriptor", records: []string{`{"listener":true}`}, withFD: -1, wantErr: `launcher: unexpected status "{\"listener\":true}" with 0 descriptors`},
		{name: "descriptor on an error", records: []string{`{"step":"x","message":"y"}`}, withFD: 0, wantErr: "x: y"},
		{name: "tmpfs then exec", records: []string{`{"tmp":true}`}, withFD: 0, wantTmp: true},
		{name: "listener and tmpfs", records: []string{`{"listener":true}`, `{"tmp":true}`}, withFD: 0, withFD2: 1, wantConn: true, wantTmp: true},
		{name: "tmpfs then failure", records: []string{`{"tmp":true}`, `{"step":"tmp","message":"no"}`}, withFD: 0, wantErr: "tmp: no"},
		{name: "two tmpfs", records: []string{`{"tmp":true}`, `{"tmp":true}`}, withFD: 0, withFD2: 1, wantErr: `launcher: unexpected status "{\"tmp\":true}" with 1 descriptors`},
		{name: "listener and tmpfs in one", records: []string{`{"listener":true,"tmp":true}`}, withFD: 0, wantErr: `launcher: unexpected status "{\"listener\":true,\"tmp\":true}" with 1 descriptors`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
			require.NoError(t, err)
			ours := os.NewFile(uintptr(fds[0]), "ours")
			for i, rec := range tt.records {
				var oob []byte
				if i == tt.withFD || (i == tt.withFD2 && tt.withFD2 > 0) {
					f, err := os.Open(os.DevNull)
					require.NoError(t, err)
					defer f.Close()
					oob = unix.UnixRights(int(f.Fd()))
				}
				require.NoError(t, unix.Sendmsg(fds[1], []byte(rec), oob, nil, 0))
			}
			require.NoError(t, unix.Close(fds[1]))
			got, err := launcher.AwaitFiles(ours)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, tt.wantConn, got.Listener != nil)
				require.Equal(t, tt.wantTmp, got.Tmp != nil)
				got.Close()
				return
			}
			require.Equal(t, launcher.Files{}, got)
			require.EqualError(t, err, tt.wantErr)
			if tt.wantIs != nil {
				require.ErrorIs(t, err, tt.wantIs)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	require.NoError(t, launcher.Check(nil), "a launcher in check mode exits 0 at once")
	require.NoError(t, launcher.Check(&syscall.SysProcAttr{Setpgid: true}))
	err := launcher.Check(&syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: 1 << 20})
	require.ErrorContains(t, err, "launcher: start: ")
}

func TestTmpFullRefusesAnotherFileSystem(t *testing.T) {
	t.Parallel()
	f, err := os.Open("/proc")
	require.NoError(t, err)
	defer f.Close()
	_, err = launcher.TmpFull(f)
	require.ErrorContains(t, err, "launcher: the child's TMPDIR is not a tmpfs (file system type 0x9fa0)")
}

func TestTmpOptions(t *testing.T) {
	t.Parallel()
	require.Equal(t, "size=1048576,mode=700", launcher.TmpOptions(1<<20))
}
