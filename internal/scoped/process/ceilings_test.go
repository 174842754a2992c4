package process_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process"
)

// fakeCgroup is a directory with the files a cgroup would have.
func fakeCgroup(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	return dir
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestEnableV2(t *testing.T) {
	t.Parallel()
	t.Run("controllers passed on already", func(t *testing.T) {
		t.Parallel()
		dir := fakeCgroup(t, map[string]string{"cgroup.controllers": "cpuset cpu io memory pids\n", "cgroup.subtree_control": "cpu memory pids\n"})
		got, err := process.EnableV2(dir)
		require.NoError(t, err)
		require.Equal(t, []string{"memory", "pids", "cpu"}, got)
		require.NoDirExists(t, filepath.Join(dir, "capstan-worker"), "nothing moves")
	})
	t.Run("the worker moves into a leaf and enables them", func(t *testing.T) {
		t.Parallel()
		dir := fakeCgroup(t, map[string]string{"cgroup.controllers": "memory pids\n", "cgroup.subtree_control": "\n"})
		got, err := process.EnableV2(dir)
		require.NoError(t, err)
		require.Equal(t, []string{"memory", "pids"}, got, "only what the cgroup has")
		require.Equal(t, strconv.Itoa(os.Getpid()), read(t, filepath.Join(dir, "capstan-worker", "cgroup.procs")))
		require.Equal(t, "+memory +pids", read(t, filepath.Join(dir, "cgroup.subtree_control")))
	})
	t.Run("no controllers", func(t *testing.T) {
		t.Parallel()
		dir := fakeCgroup(t, map[string]string{"cgroup.controllers": "hugetlb\n", "cgroup.subtree_control": ""})
		_, err := process.EnableV2(dir)
		require.EqualError(t, err, dir+" has none of the memory, pids and cpu controllers")
	})
	t.Run("not a cgroup", func(t *testing.T) {
		t.Parallel()
		_, err := process.EnableV2(t.TempDir())
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}

func TestLimitFiles(t *testing.T) {
	t.Parallel()
	l := capability.ProcessLimits{MemoryBytes: 512 << 20, MemoryText: "512MiB", Pids: 100, CPU: 1.5}
	v2 := fakeCgroup(t, map[string]string{"memory.swap.max": "max"})
	require.NoError(t, process.V2Limits(v2, []string{"memory", "pids", "cpu"}, l))
	require.Equal(t, "536870912", read(t, filepath.Join(v2, "memory.max")))
	require.Equal(t, "0", read(t, filepath.Join(v2, "memory.swap.max")), "no swapping instead of the ceiling")
	require.Equal(t, "100", read(t, filepath.Join(v2, "pids.max")))
	require.Equal(t, "150000 100000", read(t, filepath.Join(v2, "cpu.max")))

	v2 = fakeCgroup(t, nil)
	require.NoError(t, process.V2Limits(v2, []string{"pids"}, capability.ProcessLimits{Pids: 16}))
	require.NoFileExists(t, filepath.Join(v2, "memory.max"), "only the controllers the cgroup has")
	require.Equal(t, "16", read(t, filepath.Join(v2, "pids.max")))

	mem := fakeCgroup(t, map[string]string{"memory.memsw.limit_in_bytes": ""})
	require.NoError(t, process.V1Limits("memory", mem, l))
	require.Equal(t, "536870912", read(t, filepath.Join(mem, "memory.limit_in_bytes")))
	require.Equal(t, "536870912", read(t, filepath.Join(mem, "memory.memsw.limit_in_bytes")))
	pids := fakeCgroup(t, nil)
	require.NoError(t, process.V1Limits("pids", pids, l))
	require.Equal(t, "100", read(t, filepath.Join(pids, "pids.max")))
	cpu := fakeCgroup(t, nil)
	require.NoError(t, process.V1Limits("cpu", cpu, capability.ProcessLimits{CPU: 0.001}))
	require.Equal(t, "1000", read(t, filepath.Join(cpu, "cpu.cfs_quota_us")), "at least 1 ms per period")
	require.Equal(t, "100000", read(t, filepath.Join(cpu, "cpu.cfs_period_us")))
}

func TestEventCount(t *testing.T) {
	t.Parallel()
	dir := fakeCgroup(t, map[string]string{
		"memory.events":      "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n",
		"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
		"pids.events":        "max 12\n",
	})
	require.Equal(t, int64(1), process.EventCount(filepath.Join(dir, "memory.events"), "oom_kill"))
	require.Equal(t, int64(3), process.EventCount(filepath.Join(dir, "memory.oom_control"), "oom_kill"))
	require.Equal(t, int64(12), process.EventCount(filepath.Join(dir, "pids.events"), "max"))
	require.Equal(t, int64(0), process.EventCount(filepath.Join(dir, "pids.events"), "missing"))
	require.Equal(t, int64(0), process.EventCount(filepath.Join(dir, "nope"), "max"))
}

func TestV1Dirs(t *testing.T) {
	t.Parallel()
	const mountinfo = `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
38 30 0:35 /kube /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	const own = "9:name=systemd:/\n8:pids:/kube/pod1\n4:memory:/process_api/abc\n2:cpu,cpuacct:/\n0::/\n"
	got := process.V1Dirs(strings.NewReader(mountinfo), own)
	require.Equal(t, map[string]string{
		"memory": "/sys/fs/cgroup/memory/process_api/abc",
		"pids":   "/sys/fs/cgroup/pids/pod1",
		"cpu":    "/sys/fs/cgroup/cpu,cpuacct",
	}, got)
	require.Empty(t, process.V1Dirs(strings.NewReader("40 30 0:37 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"), "0::/\n"), "a pure cgroup v2 machine")
}
