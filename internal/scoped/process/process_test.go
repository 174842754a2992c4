package process_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

// resolver is shared, as the worker shares one.
var resolver = process.NewResolver(nil)

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

func grant(declared ...string) *capability.BinaryGrant {
	return &capability.BinaryGrant{Declared: declared}
}

// readReach is a reach that reads dirs.
func readReach(dirs ...string) process.Reach {
	return process.Reach{FS: &capability.FSGrant{Read: dirs}}
}

func TestRun(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o644))
	tests := []struct {
		name       string
		grant      *capability.BinaryGrant
		reach      process.Reach
		maxOutput  int
		cmd        tool.Command
		wantStdout string
		wantStderr string
		wantExit   int
		wantDeny   error  // the denial kind
		wantMsg    string // exact error message (denials and errors)
		wantIs     error
	}{
		{name: "bare name on trusted PATH", grant: grant("echo"), cmd: tool.Command{Binary: "echo", Args: []string{"hello", "world"}}, wantStdout: "hello world\n"},
		{name: "args are not shell words", grant: grant("echo"), cmd: tool.Command{Binary: "echo", Args: []string{"$HOME;", "`id`", "a b"}}, wantStdout: "$HOME; `id` a b\n"},
		{name: "true", grant: grant("true"), cmd: tool.Command{Binary: "true"}},
		{name: "non-zero exit is not an error", grant: grant("false"), cmd: tool.Command{Binary: "false"}, wantExit: 1},
		{name: "stderr and exit code", grant: grant("cat"), cmd: tool.Command{Binary: "cat", Args: []string{"/no/such/file"}}, wantStderr: "cat: /no/such/file: No such file or directory\n", wantExit: 1},
		{name: "killed by a signal", grant: grant(exe), cmd: tool.Command{Binary: exe, Env: map[string]string{helperEnv: "signal"}}, wantExit: 128 + 15},
		{name: "stdin", grant: grant("cat"), cmd: tool.Command{Binary: "cat", Stdin: []byte("from stdin")}, wantStdout: "from stdin"},
		{name: "no stdin is empty", grant: grant("cat"), cmd: tool.Command{Binary: "cat"}},
		{name: "dir in the read reach", grant: grant("pwd"), reach: readReach(dir), cmd: tool.Command{Binary: "pwd", Dir: dir}, wantStdout: dir + "\n"},
		{name: "dir below the write reach", grant: grant("pwd"), reach: process.Reach{FS: &capability.FSGrant{Write: []string{filepath.Dir(dir)}}}, cmd: tool.Command{Binary: "pwd", Dir: dir + "/"}, wantStdout: dir + "\n"},
		{name: "empty dir is root", grant: grant("pwd"), cmd: tool.Command{Binary: "pwd"}, wantStdout: "/\n"},
		{name: "output cap", grant: grant("seq"), maxOutput: 10, cmd: tool.Command{Binary: "seq", Args: []string{"1", "100000"}}, wantStdout: "1\n2\n3\n4\n5\n" + process.TruncatedMarker},
		{name: "output exactly at cap is not cut", grant: grant("echo"), maxOutput: 4, cmd: tool.Command{Binary: "echo", Args: []string{"abc"}}, wantStdout: "abc\n"},
		{name: "path listed exactly", grant: grant("/bin/echo"), cmd: tool.Command{Binary: "/bin/echo", Args: []string{"x"}}, wantStdout: "x\n"},
		{name: "relative path listed exactly runs in dir", grant: grant("./echo"), reach: readReach("/bin"), cmd: tool.Command{Binary: "./echo", Dir: "/bin", Args: []string{"y"}}, wantStdout: "y\n"},
		{name: "star allows any", grant: grant("*"), cmd: tool.Command{Binary: "echo", Args: []string{"z"}}, wantStdout: "z\n"},
		{name: "star under ceiling allows the ceiling", grant: &capability.BinaryGrant{Declared: []string{"*"}, Ceiling: &capability.Ceiling{Allow: []string{"echo"}}}, cmd: tool.Command{Binary: "echo"}, wantStdout: "\n"},

		{name: "not declared", grant: grant("echo"), cmd: tool.Command{Binary: "rm", Args: []string{"-rf", "/"}}, wantDeny: tool.ErrBinaryNotAllowed, wantMsg: "BINARY_NOT_ALLOWED: rm is not in the declared allowedBinaries"},
		{name: "nil grant", cmd: tool.Command{Binary: "echo"}, wantDeny: tool.ErrBinaryNotAllowed, wantMsg: "BINARY_NOT_ALLOWED: echo is not in the declared allowedBinaries"},
		{name: "empty grant", grant: grant(), cmd: tool.Command{Binary: "echo"}, wantDeny: tool.ErrBinaryNotAllowed, wantMsg: "BINARY_NOT_ALLOWED: echo is not in the declared allowedBinaries"},
		{name: "path not listed though bare name is", grant: grant("echo"), cmd: tool.Command{Binary: "/bin/echo"}, wantDeny: tool.ErrBinaryNotAllowed, wantMsg: "BINARY_NOT_ALLOWED: /bin/echo is not in the declared allowedBinaries"},
		{name: "bare name not listed though path is", grant: grant("/bin/echo"), cmd: tool.Command{Binary: "echo"}, wantDeny: tool.ErrBinaryNotAllowed, wantMsg: "BINARY_NOT_ALLOWED: echo is not in the declared allowedBinaries"},
		{name: "other spelling of a listed path", grant: grant("/bin/echo"), cmd: tool.Command{Binary: "/bin/../bin/echo"}, wantDeny: tool.ErrBinaryNotAllowed, wantMsg: "BINARY_NOT_ALLOWED: /bin/../bin/echo is not in the declared allowedBinaries"},
		{name: "dot-slash not listed", grant: grant("echo"), reach: readReach("/bin"), cmd: tool.Command{Binary: "./echo", Dir: "/bin"}, wantDeny: tool.ErrBinaryNotAllowed, wantMsg: "BINARY_NOT_ALLOWED: ./echo is not in the declared allowedBinaries"},
		{name: "star under ceiling refuses the rest", grant: &capability.BinaryGrant{Declared: []string{"*"}, Ceiling: &capability.Ceiling{Allow: []string{"echo"}}}, cmd: tool.Command{Binary: "true"}, wantDeny: tool.ErrBinaryNotAllowed, wantMsg: "BINARY_NOT_ALLOWED: true is not in the declared allowedBinaries"},
		{name: "ceiling cuts the declaration", grant: &capability.BinaryGrant{Declared: []string{"echo"}, Ceiling: &capability.Ceiling{Allow: []string{"git"}}}, cmd: tool.Command{Binary: "echo"}, wantDeny: tool.ErrBinaryNotAllowed, wantMsg: "BINARY_NOT_ALLOWED: echo is not in the declared allowedBinaries"},
		{name: "LD_PRELOAD", grant: grant("echo"), cmd: tool.Command{Binary: "echo", Env: map[string]string{"LD_PRELOAD": "/tmp/x.so"}}, wantDeny: tool.ErrEnvNotAllowed, wantMsg: "ENV_NOT_ALLOWED: LD_PRELOAD may not be set for a child process"},
		{name: "ld_ in lower case", grant: grant("echo"), cmd: tool.Command{Binary: "echo", Env: map[string]string{"ld_library_path": "/tmp"}}, wantDeny: tool.ErrEnvNotAllowed, wantMsg: "ENV_NOT_ALLOWED: ld_library_path may not be set for a child process"},
		{name: "dir outside the reach", grant: grant("pwd"), reach: readReach(dir), cmd: tool.Command{Binary: "pwd", Dir: filepath.Dir(dir)}, wantDeny: tool.ErrPathNotReachable, wantMsg: "PATH_NOT_REACHABLE: read not permitted for " + filepath.Dir(dir)},
		{name: "dir next to the reach", grant: grant("pwd"), reach: readReach(dir), cmd: tool.Command{Binary: "pwd", Dir: dir + "2"}, wantDeny: tool.ErrPathNotReachable, wantMsg: "PATH_NOT_REACHABLE: read not permitted for " + dir + "2"},
		{name: "dir without a reach", grant: grant("pwd"), cmd: tool.Command{Binary: "pwd", Dir: "/tmp/../etc"}, wantDeny: tool.ErrPathNotReachable, wantMsg: "PATH_NOT_REACHABLE: read not permitted for /etc"},
		{name: "missing dir", grant: grant("pwd"), reach: readReach(dir), cmd: tool.Command{Binary: "pwd", Dir: dir + "/missing"}, wantMsg: "process: working directory " + dir + "/missing: no such file or directory", wantIs: fs.ErrNotExist},
		{name: "dir is a file", grant: grant("pwd"), reach: readReach(dir), cmd: tool.Command{Binary: "pwd", Dir: dir + "/file"}, wantMsg: "process: working directory " + dir + "/file: not a directory", wantIs: syscall.ENOTDIR},
		{name: "DYLD_", grant: grant("echo"), cmd: tool.Command{Binary: "echo", Env: map[string]string{"OK": "1", "DYLD_INSERT_LIBRARIES": "x"}}, wantDeny: tool.ErrEnvNotAllowed, wantMsg: "ENV_NOT_ALLOWED: DYLD_INSERT_LIBRARIES may not be set for a child process"},

		{name: "not on trusted PATH", grant: grant("capstan-no-such-binary"), cmd: tool.Command{Binary: "capstan-no-such-binary"}, wantIs: exec.ErrNotFound},
		{name: "empty env name", grant: grant("echo"), cmd: tool.Command{Binary: "echo", Env: map[string]string{"": "x"}}, wantMsg: `process: invalid environment variable name ""`},
		{name: "env name with equals", grant: grant("echo"), cmd: tool.Command{Binary: "echo", Env: map[string]string{"A=B": "x"}}, wantMsg: `process: invalid environment variable name "A=B"`},
		{name: "env name with NUL", grant: grant("echo"), cmd: tool.Command{Binary: "echo", Env: map[string]string{"A\x00B": "x"}}, wantMsg: `process: invalid environment variable name "A\x00B"`},
		{name: "env value with NUL", grant: grant("echo"), cmd: tool.Command{Binary: "echo", Env: map[string]string{"A": "x\x00y"}}, wantMsg: "process: value of environment variable A contains NUL"},
		{name: "relative dir", grant: grant("echo"), cmd: tool.Command{Binary: "echo", Dir: "tmp"}, wantMsg: `process: dir "tmp" must be an absolute path`},
		{name: "relative binary without dir", grant: grant("./echo"), cmd: tool.Command{Binary: "./echo"}, wantMsg: `process: relative binary "./echo" needs an absolute dir`},
		{name: "empty binary", grant: grant("*"), cmd: tool.Command{Binary: ""}, wantMsg: "process: empty binary name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var d denials
			r := process.New(tt.grant, tt.reach, resolver, process.Config{MaxOutputBytes: tt.maxOutput}, d.record)
			res, err := r.Run(context.Background(), tt.cmd)
			switch {
			case tt.wantDeny != nil:
				require.EqualError(t, err, tt.wantMsg)
				require.ErrorIs(t, err, tt.wantDeny)
				require.Nil(t, res)
				require.Equal(t, []error{err}, d.all())
			case tt.wantMsg != "" || tt.wantIs != nil:
				require.Error(t, err)
				if tt.wantMsg != "" {
					require.EqualError(t, err, tt.wantMsg)
				}
				if tt.wantIs != nil {
					require.ErrorIs(t, err, tt.wantIs)
				}
				_, isDenial := tool.DenialCode(err)
				require.False(t, isDenial)
				require.Empty(t, d.all())
			default:
				require.NoError(t, err)
				require.Equal(t, tt.wantExit, res.ExitCode)
				require.Equal(t, tt.wantStdout, string(res.Stdout))
				require.Equal(t, tt.wantStderr, string(res.Stderr))
				require.Empty(t, d.all())
			}
		})
	}
}

// TestRunEnvIsMinimal cannot be parallel: it sets worker variables
// (credentials, a loader variable) that must not reach the child, confined
// or not.
func TestRunEnvIsMinimal(t *testing.T) {
	t.Setenv("CAPSTAN_TEST_SECRET", "worker-only")
	t.Setenv("VAULT_TOKEN", "hvs.worker-vault-token")
	t.Setenv("CAPSTAN_SECRET_X", "worker-secret-x")
	t.Setenv("LD_PRELOAD", "/capstan/no/such/preload.so")
	tmpRoot := realTempDir(t)
	tests := []struct {
		name    string
		noLL    bool
		env     map[string]string
		home    string
		wantEnv map[string]string // without TMPDIR (and HOME when home is "")
	}{
		{
			name:    "base only",
			home:    "/home/agent",
			wantEnv: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/agent", "LANG": "C.UTF-8", "TZ": "UTC"},
		},
		{
			name:    "caller variables added and overriding",
			home:    "/home/agent",
			env:     map[string]string{"GIT_AUTHOR_NAME": "agent", "LANG": "en_US.UTF-8", "EMPTY": ""},
			wantEnv: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/agent", "LANG": "en_US.UTF-8", "TZ": "UTC", "GIT_AUTHOR_NAME": "agent", "EMPTY": ""},
		},
		{
			name:    "home defaults to the private TMPDIR",
			wantEnv: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TZ": "UTC"},
		},
		{
			name:    "unconfined child",
			noLL:    true,
			home:    "/home/agent",
			wantEnv: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/agent", "LANG": "C.UTF-8", "TZ": "UTC"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := process.Config{Home: tt.home, TmpDir: tmpRoot, NoLandlock: tt.noLL}
			r := process.New(grant("env"), process.Reach{}, resolver, cfg, nil)
			res, err := r.Run(context.Background(), tool.Command{Binary: "env", Env: tt.env})
			require.NoError(t, err)
			require.Equal(t, 0, res.ExitCode)
			require.Empty(t, string(res.Stderr), "the worker's LD_PRELOAD did not reach the loader")
			got := map[string]string{}
			for line := range strings.Lines(string(res.Stdout)) {
				name, value, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
				require.True(t, ok, line)
				got[name] = value
			}
			tmp := got["TMPDIR"]
			require.Equal(t, tmpRoot, filepath.Dir(filepath.Dir(tmp)), "a private TMPDIR under Config.TmpDir")
			require.True(t, strings.HasPrefix(filepath.Base(filepath.Dir(tmp)), "capstan-worker-"), "in this process's owner directory: %s", tmp)
			require.True(t, strings.HasPrefix(filepath.Base(tmp), "proc-"), tmp)
			require.NoDirExists(t, tmp, "the private TMPDIR is removed after the call")
			delete(got, "TMPDIR")
			if tt.home == "" {
				require.Equal(t, tmp, got["HOME"])
				delete(got, "HOME")
			}
			require.Equal(t, tt.wantEnv, got)
			for _, leak := range []string{"worker-only", "hvs.worker-vault-token", "worker-secret-x", "VAULT_TOKEN", "CAPSTAN_SECRET", "LD_PRELOAD", "preload.so"} {
				require.NotContains(t, string(res.Stdout), leak)
			}
		})
	}
}

// TestRunTmpDir checks that each child has its own TMPDIR, which it may
// write, and that it is gone after the call.
func TestRunTmpDir(t *testing.T) {
	t.Parallel()
	r := process.New(grant("bash"), process.Reach{}, resolver, process.Config{}, nil)
	script := `echo data > "$TMPDIR/f" && mkdir "$TMPDIR/d" && cat "$TMPDIR/f" && printf %s "$TMPDIR"`
	var dirs []string
	for range 2 {
		res, err := r.Run(context.Background(), tool.Command{Binary: "bash", Args: []string{"-c", script}})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, string(res.Stderr))
		tmp, ok := strings.CutPrefix(string(res.Stdout), "data\n")
		require.True(t, ok, string(res.Stdout))
		owner := filepath.Dir(tmp)
		require.Equal(t, os.TempDir(), filepath.Dir(owner), "under os.TempDir() by default")
		require.True(t, strings.HasPrefix(filepath.Base(owner), "capstan-worker-"), "in this process's owner directory: %s", tmp)
		require.NoDirExists(t, tmp)
		dirs = append(dirs, tmp)
	}
	require.NotEqual(t, dirs[0], dirs[1])
}

func TestRunCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		wantErr error
	}{
		{
			name: "cancel with cause",
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancelCause(context.Background())
				timer := time.AfterFunc(200*time.Millisecond, func() { cancel(errCallCancelled) })
				return ctx, func() { timer.Stop(); cancel(nil) }
			},
			wantErr: errCallCancelled,
		},
		{
			name: "timeout",
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 200*time.Millisecond)
			},
			wantErr: context.DeadlineExceeded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := tt.ctx()
			defer cancel()
			r := process.New(grant("sleep"), process.Reach{}, resolver, process.Config{}, nil)
			start := time.Now()
			res, err := r.Run(ctx, tool.Command{Binary: "sleep", Args: []string{"30"}})
			require.ErrorIs(t, err, tt.wantErr)
			require.Less(t, time.Since(start), 5*time.Second)
			require.NotNil(t, res)
			require.Equal(t, -1, res.ExitCode)
		})
	}
}

var errCallCancelled = errors.New("call cancelled by the dispatcher")

func TestRunAlreadyCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errCallCancelled)
	r := process.New(grant("echo"), process.Reach{}, resolver, process.Config{}, nil)
	res, err := r.Run(ctx, tool.Command{Binary: "echo"})
	require.ErrorIs(t, err, errCallCancelled)
	require.Nil(t, res)
}

// killConfigs are the two ways a call's processes are killed: its cgroup
// and process group (when the machine has a cgroup), and its process group
// alone.
var killConfigs = []struct {
	name string
	cfg  process.Config
}{
	{"default", process.Config{}},
	{"process group only", process.Config{NoCgroup: true}},
}

// TestRunKillsProcessGroup cancels a child whose grandchild shares its
// group and holds its pipes: the whole group dies and Run returns promptly.
func TestRunKillsProcessGroup(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, kc := range killConfigs {
		t.Run(kc.name, func(t *testing.T) {
			t.Parallel()
			pidFile, reach := helperPIDFile(t)
			r := process.New(grant(exe), reach, resolver, kc.cfg, nil)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)

			type outcome struct {
				res *tool.ProcessResult
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := r.Run(ctx, tool.Command{Binary: exe, Env: map[string]string{helperEnv: "group", pidFileEnv: pidFile}})
				done <- outcome{res, err}
			}()
			grandchild := waitPID(t, pidFile)
			require.True(t, alive(grandchild))
			cancel(errCallCancelled)
			select {
			case o := <-done:
				require.ErrorIs(t, o.err, errCallCancelled)
				require.Equal(t, "parent done\n", string(o.res.Stdout))
				require.Equal(t, -1, o.res.ExitCode)
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return after cancellation")
			}
			require.Eventually(t, func() bool { return !alive(grandchild) }, 5*time.Second, 10*time.Millisecond, "grandchild survived")
		})
	}
}

// TestRunKillsLeftoverGroup runs a child that exits at once, leaving a
// grandchild in its group that holds the pipes: Run kills it and returns.
func TestRunKillsLeftoverGroup(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, kc := range killConfigs {
		t.Run(kc.name, func(t *testing.T) {
			t.Parallel()
			pidFile, reach := helperPIDFile(t)
			r := process.New(grant(exe), reach, resolver, kc.cfg, nil)
			res, err := r.Run(context.Background(), tool.Command{Binary: exe, Env: map[string]string{helperEnv: "background", pidFileEnv: pidFile}})
			require.NoError(t, err)
			require.Equal(t, 0, res.ExitCode)
			require.Equal(t, "parent done\n", string(res.Stdout))
			grandchild := waitPID(t, pidFile)
			require.Eventually(t, func() bool { return !alive(grandchild) }, 5*time.Second, 10*time.Millisecond, "grandchild survived")
		})
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     process.Config
		wantErr string
	}{
		{name: "zero value", cfg: process.Config{}},
		{name: "full", cfg: process.Config{TrustedPATH: []string{"/opt/bin"}, MaxOutputBytes: 10, Home: "/h", TmpDir: "/t"}},
		{name: "relative PATH entry", cfg: process.Config{TrustedPATH: []string{"/bin", "bin"}}, wantErr: `process config: TrustedPATH[1] "bin" must be an absolute directory without ':'`},
		{name: "PATH entry with separator", cfg: process.Config{TrustedPATH: []string{"/bin:/tmp"}}, wantErr: `process config: TrustedPATH[0] "/bin:/tmp" must be an absolute directory without ':'`},
		{name: "negative cap", cfg: process.Config{MaxOutputBytes: -1}, wantErr: "process config: MaxOutputBytes -1 must not be negative"},
		{name: "relative home", cfg: process.Config{Home: "h"}, wantErr: `process config: Home "h" must be absolute`},
		{name: "relative tmp", cfg: process.Config{TmpDir: "t"}, wantErr: `process config: TmpDir "t" must be absolute`},
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
			require.Panics(t, func() { process.New(nil, process.Reach{}, nil, tt.cfg, nil) })
		})
	}
}

// TestRunLogsTmpDirLeft has a child make part of its TMPDIR unreadable: Run
// still answers and logs that the directory was not removed. Root removes
// it anyway, so the test needs another user.
func TestRunLogsTmpDirLeft(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("root removes an unreadable directory: run as another user to test this path")
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	r := process.New(grant("bash"), process.Reach{}, resolver, process.Config{TmpDir: realTempDir(t), Logger: log}, nil)
	res, err := r.Run(context.Background(), tool.Command{Binary: "bash", Args: []string{"-c", `mkdir "$TMPDIR/d" && touch "$TMPDIR/d/f" && chmod 0 "$TMPDIR/d" && printf %s "$TMPDIR"`}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, string(res.Stderr))
	tmp := string(res.Stdout)
	t.Cleanup(func() { _ = os.Chmod(tmp+"/d", 0o700) })
	mu.Lock()
	defer mu.Unlock()
	require.Regexp(t, `level=WARN msg="process TMPDIR not removed" error="\w+ `+regexp.QuoteMeta(tmp)+`/d: permission denied"`, logs.String())
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
