package process_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/scoped/process/zygote"
	"github.com/capstanhq/capstan/tool"
)

// The zygote's pool: children forked ahead of demand into namespaces of
// their own (zygote.c). The tests that watch this process's pool are not
// parallel: other tests' children would take from it meanwhile.

// skipWithoutPool skips where confined children do not come from a pool:
// no zygote, or no user namespace and tmpfs for them.
func skipWithoutPool(t *testing.T) {
	t.Helper()
	if s := process.Sandbox(); s.Spawner != "zygote" || !s.NetworkNamespace || !s.TmpLimit || zygote.PoolSize == 0 {
		t.Skipf("no pool here: spawner %s, network namespace %t, tmp limit %t", s.Spawner, s.NetworkNamespace, s.TmpLimit)
	}
}

// poolChildren returns the running pool children of worker: its children
// that are the zygote's image (argv[0]) in a user namespace other than
// the worker's (the zygote itself shares the worker's).
func poolChildren(t *testing.T, worker int) []int {
	t.Helper()
	own, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", worker))
	require.NoError(t, err)
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !alive(pid) || parentOf(pid) != worker {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		arg0, _, _ := strings.Cut(string(cmdline), "\x00")
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
		if err == nil && arg0 == zygote.Arg0 && ns != own {
			out = append(out, pid)
		}
	}
	return out
}

// parentOf returns the parent pid of pid, 0 when it cannot be read.
func parentOf(pid int) int {
	f := process.StatFields(pid)
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// fullPool waits until worker's pool is full and returns its children.
func fullPool(t *testing.T, worker int) []int {
	t.Helper()
	var pool []int
	require.Eventually(t, func() bool {
		pool = poolChildren(t, worker)
		return len(pool) == zygote.PoolSize
	}, 10*time.Second, 5*time.Millisecond, "the pool never filled")
	return pool
}

// exists reports whether /proc knows pid (running, or a zombie not reaped).
func exists(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

func TestPoolHandsEachChildOverOnce(t *testing.T) {
	skipWithoutPool(t)
	r := process.New(grant("true"), process.Reach{}, resolver, process.Config{}, nil)
	_, err := r.Run(context.Background(), tool.Command{Binary: "true"})
	require.NoError(t, err)
	seen := map[int]bool{}
	for range 3 * zygote.PoolSize {
		pool := fullPool(t, os.Getpid())
		ch, err := r.Start(context.Background(), tool.Command{Binary: "true"})
		require.NoError(t, err)
		require.Contains(t, pool, ch.Pid, "a confined child comes from the pool")
		require.False(t, seen[ch.Pid], "pid %d served twice", ch.Pid)
		seen[ch.Pid] = true
		res, err := ch.Wait()
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode)
		closeChild(t, ch)
		require.NotContains(t, poolChildren(t, os.Getpid()), ch.Pid, "a child handed over is not in the pool")
		require.False(t, exists(ch.Pid), "the child is reaped")
	}
}

func TestPoolDiscardsDeadChildren(t *testing.T) {
	skipWithoutPool(t)
	r := process.New(grant("true"), process.Reach{}, resolver, process.Config{}, nil)
	_, err := r.Run(context.Background(), tool.Command{Binary: "true"})
	require.NoError(t, err)
	pool := fullPool(t, os.Getpid())
	for _, pid := range pool {
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	}
	// Dead, not dying: a child killed after its hand-over would be the
	// call's, ended by SIGKILL (137), like any child killed from outside.
	require.Eventually(t, func() bool { return !slices.ContainsFunc(pool, alive) }, 10*time.Second, 5*time.Millisecond)
	// Every call still runs: each dead pool child is discarded and the
	// call served by a fresh child or a new pool child.
	for range 2 * zygote.PoolSize {
		res, err := r.Run(context.Background(), tool.Command{Binary: "true"})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode)
	}
	// And the dead are reaped (at a later call), not left as zombies.
	require.Eventually(t, func() bool {
		if _, err := r.Run(context.Background(), tool.Command{Binary: "true"}); err != nil {
			return false
		}
		return !slices.ContainsFunc(pool, exists)
	}, 10*time.Second, 5*time.Millisecond, "discarded pool children are reaped")
	require.Len(t, fullPool(t, os.Getpid()), zygote.PoolSize, "the pool fills again")
}

func TestPoolChildrenDieWithTheWorker(t *testing.T) {
	skipWithoutPool(t)
	root := realTempDir(t)
	// A worker that starts one confined child (so its zygote fills its
	// pool) and waits to be killed.
	c, _ := startLeaveBehind(t, root)
	pool := fullPool(t, c.Process.Pid)

	require.NoError(t, c.Process.Kill())
	_ = c.Wait()
	require.Eventually(t, func() bool { return !slices.ContainsFunc(pool, alive) }, 10*time.Second, 5*time.Millisecond,
		"the pool children of a killed worker exit")
	process.Sweep(root, nil) // its cgroups and temp dir
}

func TestPoolChildSeesOnlyItsCall(t *testing.T) {
	skipWithoutPool(t)
	r := process.New(grant("env"), process.Reach{}, resolver, process.Config{}, nil)
	var wg sync.WaitGroup
	outs := make([]string, 4*zygote.PoolSize)
	errs := make([]error, len(outs))
	for i := range outs {
		wg.Go(func() {
			res, err := r.Run(context.Background(), tool.Command{Binary: "env", Env: map[string]string{"CAPSTAN_CALL": strconv.Itoa(i)}})
			if err == nil {
				outs[i] = string(res.Stdout)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, out := range outs {
		require.NoError(t, errs[i])
		var calls []string
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, "CAPSTAN_CALL=") {
				calls = append(calls, strings.TrimSpace(l))
			}
		}
		require.Equal(t, []string{"CAPSTAN_CALL=" + strconv.Itoa(i)}, calls)
		tmp := envValue(out, "TMPDIR")
		require.NotEmpty(t, tmp)
		for j, other := range outs {
			if j != i {
				require.NotEqual(t, tmp, envValue(other, "TMPDIR"), "calls %d and %d share a TMPDIR", i, j)
			}
		}
	}
}

// envValue returns the value of name in env's output.
func envValue(out, name string) string {
	for l := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+"="); ok {
			return v
		}
	}
	return ""
}

// TestPoolChildRunsAtTheWorkersPriority: a pool child unshares at the
// lowest priority; the call's binary runs at the worker's.
func TestPoolChildRunsAtTheWorkersPriority(t *testing.T) {
	skipWithoutPool(t)
	r := process.New(grant("nice"), process.Reach{}, resolver, process.Config{}, nil)
	want := niceOf(t, os.Getpid())
	for range 2 * zygote.PoolSize {
		res, err := r.Run(context.Background(), tool.Command{Binary: "nice"})
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(want), strings.TrimSpace(string(res.Stdout)))
	}
}

// niceOf returns the nice value of pid (field 19 of /proc/<pid>/stat).
func niceOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, err := strconv.Atoi(f[16])
	require.NoError(t, err)
	return n
}
