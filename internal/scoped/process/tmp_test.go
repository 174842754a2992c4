package process_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

// fillEnv is how many bytes the fill-tmp helper writes.
const fillEnv = "CAPSTAN_PROCESS_FILL"

// fillTmp is the fill-tmp helper: it writes $CAPSTAN_PROCESS_FILL bytes
// into $TMPDIR/fill in 64 KiB writes and prints "wrote <n>", or, when a
// write fails, "<errno> after <n> bytes" (ENOSPC for a full disk).
func fillTmp() int {
	want, err := strconv.Atoi(os.Getenv(fillEnv))
	if err != nil {
		fmt.Println("bad", fillEnv, err)
		return 2
	}
	f, err := os.Create(filepath.Join(os.Getenv("TMPDIR"), "fill"))
	if err != nil {
		fmt.Println("create:", err)
		return 2
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	n := 0
	for n < want {
		w, err := f.Write(buf[:min(len(buf), want-n)])
		n += w
		if err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) && errno == syscall.ENOSPC {
				fmt.Printf("ENOSPC after %d bytes\n", n)
			} else {
				fmt.Printf("%v after %d bytes\n", err, n)
			}
			return 1
		}
	}
	fmt.Printf("wrote %d\n", n)
	return 0
}

// needTmpLimit skips a test on a machine whose children's TMPDIR cannot be
// a tmpfs of their own (no user namespaces).
func needTmpLimit(t *testing.T) {
	t.Helper()
	if s := process.Sandbox(); !s.TmpLimit {
		t.Skipf("needs user and mount namespaces for the tmp limit; this machine: %s", s.Reason)
	}
}

// TestAttackFillTmp: a child that writes more into its TMPDIR than the
// call's tmp limit gets ENOSPC at the limit, and the result says which
// limit was reached; a child that stays under it writes everything and
// the result names no limit.
func TestAttackFillTmp(t *testing.T) {
	t.Parallel()
	needConfined(t)
	needTmpLimit(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	g := grant(exe)
	g.Limits = capability.ProcessLimits{TmpBytes: 1 << 20, TmpText: "1MiB"}
	tests := []struct {
		name      string
		bytes     int
		wantOut   string
		wantExit  int
		wantLimit []string
	}{
		{name: "past the limit", bytes: 4 << 20, wantOut: "ENOSPC after 1048576 bytes\n", wantExit: 1, wantLimit: []string{"tmp limit 1MiB reached"}},
		{name: "under the limit", bytes: 512 << 10, wantOut: "wrote 524288\n"},
	}
	for _, sp := range spawners {
		for _, tt := range tests {
			t.Run(sp.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				r := process.New(g, process.Reach{}, resolver, sp.cfg, nil)
				res, err := r.Run(context.Background(), tool.Command{Binary: exe,
					Env: map[string]string{helperEnv: "fill-tmp", fillEnv: strconv.Itoa(tt.bytes)}})
				require.NoError(t, err)
				require.Equal(t, tt.wantOut, string(res.Stdout), "stderr %q", res.Stderr)
				require.Equal(t, tt.wantExit, res.ExitCode)
				require.Equal(t, tt.wantLimit, res.LimitsHit)
			})
		}
	}
}

// TestTmpConfined: the child's TMPDIR is a tmpfs of the tmp limit, which
// the child may use as it used the directory (files, directories, links,
// renames), while Landlock still keeps it from writing anywhere else: next
// to its TMPDIR, through a link out of the tmpfs, or by moving a file out.
func TestTmpConfined(t *testing.T) {
	t.Parallel()
	needConfined(t)
	needTmpLimit(t)
	needLandlock(t, 3)
	g := grant("*")
	g.Limits = capability.ProcessLimits{TmpBytes: 2 << 20, TmpText: "2MiB"}
	for _, sp := range spawners {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			outside := realTempDir(t)
			r := process.New(g, process.Reach{}, resolver, sp.cfg, nil)
			tests := []struct {
				name       string
				script     string
				wantStdout string
				wantDenied bool
			}{
				{name: "a tmpfs of the limit", script: `stat -f -c '%T %b %S' "$TMPDIR"`, wantStdout: "tmpfs 512 4096\n"},
				{name: "files, directories, links and renames in the tmpfs", wantStdout: "data\n",
					script: `cd "$TMPDIR" && mkdir -p d/e && echo data > d/e/f && ln -s d/e/f l && mv d/e/f d/g && ln d/g h && truncate -s 5 h && cat h && rm -r d h l`},
				{name: "write next to the TMPDIR", script: `echo x > "$(dirname "$TMPDIR")/escape"`, wantDenied: true},
				{name: "write outside through a link", script: `ln -s ` + outside + ` "$TMPDIR/out" && echo x > "$TMPDIR/out/escape"`, wantDenied: true},
				{name: "move a file out", script: `echo x > "$TMPDIR/f" && mv "$TMPDIR/f" ` + outside + `/escape`, wantDenied: true},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					res, err := r.Run(context.Background(), tool.Command{Binary: "bash", Args: []string{"-c", tt.script}})
					require.NoError(t, err)
					if tt.wantDenied {
						require.NotEqual(t, 0, res.ExitCode, "stdout %q", res.Stdout)
						require.Contains(t, string(res.Stderr), "ermission denied")
					} else {
						require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
						require.Equal(t, tt.wantStdout, string(res.Stdout))
					}
					require.Empty(t, res.LimitsHit)
				})
			}
			entries, err := os.ReadDir(outside)
			require.NoError(t, err)
			require.Empty(t, entries, "nothing was written outside")
		})
	}
}

// TestTmpWithoutUserNamespace is the degraded path: a runner whose
// children get no user namespace leaves their TMPDIR an ordinary
// directory that the tmp limit does not bound (the sandbox status says so:
// TestNewStatus).
func TestTmpWithoutUserNamespace(t *testing.T) {
	t.Parallel()
	g := grant("bash")
	g.Limits = capability.ProcessLimits{TmpBytes: 1 << 20, TmpText: "1MiB"}
	r := process.New(g, process.Reach{}, resolver, process.Config{NoNetNS: true}, nil)
	res, err := r.Run(context.Background(), tool.Command{Binary: "bash", Args: []string{"-c", `head -c 2097152 /dev/zero > "$TMPDIR/f" && stat -f -c %T "$TMPDIR" && stat -c %s "$TMPDIR/f"`}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
	require.Contains(t, string(res.Stdout), "\n2097152\n", "the limit does not apply")
	require.Empty(t, res.LimitsHit)
}
