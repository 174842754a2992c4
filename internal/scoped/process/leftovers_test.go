package process_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

const tmpEnv = "CAPSTAN_PROCESS_TMP"

// leaveBehind is the helper of TestSweep: a worker that is killed with a
// child running.
func leaveBehind() int {
	r := process.New(grant("sleep"), process.Reach{}, nil, process.Config{TmpDir: os.Getenv(tmpEnv)}, nil)
	ch, err := r.Start(context.Background(), tool.Command{Binary: "sleep", Args: []string{"60"}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println(ch.Pid)
	select {}
}

// cleanStop is the helper of TestReleaseLeavesNothing: a worker that runs
// a child under $CAPSTAN_PROCESS_TMP and stops cleanly (Release), twice,
// then stops while a child still runs, and again once it ended. It prints
// how many temp dirs of its own there are while running and after each
// stop.
func cleanStop() int {
	root := os.Getenv(tmpEnv)
	mine := func() int {
		dirs, _ := filepath.Glob(filepath.Join(root, "capstan-worker-"+process.Owner()+"-*"))
		return len(dirs)
	}
	r := process.New(grant("true", "sleep"), process.Reach{}, nil, process.Config{TmpDir: root}, nil)
	for range 2 {
		if _, err := r.Run(context.Background(), tool.Command{Binary: "true"}); err != nil {
			fmt.Println("error", err)
			return 1
		}
		running := mine()
		process.Release(nil)
		fmt.Println(running, mine())
	}
	ch, err := r.Start(context.Background(), tool.Command{Binary: "sleep", Args: []string{"60"}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	process.Release(nil)
	during := mine()
	_ = ch.Kill()
	_, _ = ch.Wait()
	process.Release(nil)
	fmt.Println(during, mine())
	return 0
}

// TestReleaseLeavesNothing: a worker that stops cleanly leaves nothing in
// the temp directory, and a child started after Release gets a new temp
// dir (which the next Release removes too). A temp dir that holds a
// running child's TMPDIR stays until that child was waited for.
func TestReleaseLeavesNothing(t *testing.T) {
	t.Parallel()
	root := realTempDir(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	c := exec.Command(exe)
	c.Env = []string{helperEnv + "=clean-stop", tmpEnv + "=" + root, "PATH=" + os.Getenv("PATH")}
	out, err := c.Output()
	require.NoError(t, err, "helper said %q", out)
	require.Equal(t, "1 0\n1 0\n1 0\n", string(out), "one temp dir while running, none after each stop")
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	require.Empty(t, entries)
}

// TestSweep kills a worker (a helper process) that has a child running:
// its children's temp dir and cgroups stay behind, with the child still
// running in them. Sweep at the next start kills the child and removes
// both; what belongs to a live process stays.
func TestSweep(t *testing.T) {
	t.Parallel()
	root := realTempDir(t)
	// A live owner: this test process, with a child's temp dir under root.
	live := process.New(grant("true"), process.Reach{}, resolver, process.Config{TmpDir: root}, nil)
	_, err := live.Run(context.Background(), tool.Command{Binary: "true"})
	require.NoError(t, err)
	liveDirs, err := filepath.Glob(filepath.Join(root, "capstan-worker-*"))
	require.NoError(t, err)
	require.Len(t, liveDirs, 1)
	// A legacy TMPDIR, older than a day, and a fresh one.
	old := filepath.Join(root, "capstan-proc-123")
	fresh := filepath.Join(root, "capstan-proc-456")
	require.NoError(t, os.Mkdir(old, 0o700))
	require.NoError(t, os.Mkdir(fresh, 0o700))
	long := time.Now().Add(-48 * time.Hour)
	require.NoError(t, os.Chtimes(old, long, long))

	c, sleepPID := startLeaveBehind(t, root)
	helperOwner := fmt.Sprintf("%d.", c.Process.Pid)
	require.NoError(t, c.Process.Kill())
	_ = c.Wait()
	require.True(t, alive(sleepPID), "the child outlives its killed worker")
	dead, err := filepath.Glob(filepath.Join(root, "capstan-worker-"+helperOwner+"*"))
	require.NoError(t, err)
	require.Len(t, dead, 1, "the killed worker's temp dir is left behind")

	// A live owner's dir whose lock file exists but is not locked yet (the
	// moment between creating the file and locking it) stays.
	liveOwner, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(liveDirs[0]), "capstan-worker-"), "-")
	window := filepath.Join(root, "capstan-worker-"+liveOwner+"-window")
	require.NoError(t, os.Mkdir(window, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(window, ".lock"), nil, 0o600))

	res := process.Sweep(root, nil)
	require.DirExists(t, window, "a live owner's dir stays while its lock is not taken yet")
	require.GreaterOrEqual(t, res.TempDirs, 2, "the dead worker's dir and the old legacy one")
	require.NoDirExists(t, dead[0])
	require.NoDirExists(t, old)
	require.DirExists(t, fresh, "a legacy dir younger than a day may belong to a running older worker")
	require.DirExists(t, liveDirs[0], "a live worker's dir stays")
	if s := process.Sandbox(); s.CgroupKill {
		require.GreaterOrEqual(t, res.Cgroups, 1)
		require.Eventually(t, func() bool { return !alive(sleepPID) }, 10*time.Second, 10*time.Millisecond,
			"the child left in the dead worker's cgroup is killed")
		left, err := filepath.Glob(filepath.Join(s.Cgroup, "capstan-call-"+helperOwner+"*"))
		require.NoError(t, err)
		require.Empty(t, left)
	}
}
