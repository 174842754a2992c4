package process_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

// needCgroup skips a test on a machine where children cannot get their own
// cgroup.
func needCgroup(t *testing.T) {
	t.Helper()
	if s := process.Sandbox(); !s.CgroupKill {
		t.Skipf("needs a writable cgroup v2 with cgroup.kill; this machine: %s", s.Reason)
	}
}

func TestCgroupDir(t *testing.T) {
	t.Parallel()
	const v1 = "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
	tests := []struct {
		name      string
		mountinfo string
		path      string
		want      string
		wantErr   string
	}{
		{name: "unified", path: "/system.slice/capstan.service",
			mountinfo: "25 30 0:22 / /proc rw - proc proc rw\n35 24 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
			want:      "/sys/fs/cgroup/system.slice/capstan.service"},
		{name: "hybrid, root cgroup", path: "/",
			mountinfo: v1 + "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
			want:      "/sys/fs/cgroup/unified"},
		{name: "optional fields", path: "/a",
			mountinfo: "35 24 0:30 / /sys/fs/cgroup rw,nosuid shared:9 master:1 - cgroup2 cgroup2 rw\n",
			want:      "/sys/fs/cgroup/a"},
		{name: "mount of a subtree", path: "/kubepods/pod1/c1",
			mountinfo: "35 24 0:30 /kubepods/pod1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
			want:      "/sys/fs/cgroup/c1"},
		{name: "subtree itself", path: "/kubepods/pod1",
			mountinfo: "35 24 0:30 /kubepods/pod1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
			want:      "/sys/fs/cgroup"},
		{name: "subtree not showing the path", path: "/kubepods/pod10",
			mountinfo: "35 24 0:30 /kubepods/pod1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
			wantErr:   "no cgroup2 file system is mounted where this process's cgroup is visible"},
		{name: "escaped mount point", path: "/w",
			mountinfo: `35 24 0:30 / /mnt/my\040cgroups rw - cgroup2 cgroup2 rw` + "\n",
			want:      "/mnt/my cgroups/w"},
		{name: "cgroup v1 only", path: "/", mountinfo: v1,
			wantErr: "no cgroup2 file system is mounted where this process's cgroup is visible"},
		{name: "garbage", path: "/", mountinfo: "not a mountinfo line\n - \n",
			wantErr: "no cgroup2 file system is mounted where this process's cgroup is visible"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := process.CgroupDir(strings.NewReader(tt.mountinfo), tt.path)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func FuzzCgroupDir(f *testing.F) {
	f.Add("35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "/a")
	f.Add(`35 24 0:30 /x /mnt/a\040b rw - cgroup2 cgroup2 rw`, "/x/y")
	f.Fuzz(func(t *testing.T, mountinfo, path string) {
		got, err := process.CgroupDir(strings.NewReader(mountinfo), path)
		if err == nil && got == "" {
			t.Fatalf("no directory and no error for %q in %q", path, mountinfo)
		}
	})
}

func TestProbeCgroupFails(t *testing.T) {
	t.Parallel()
	err := process.ProbeCgroup("/capstan/no/such/cgroup")
	require.ErrorContains(t, err, "create a cgroup under /capstan/no/such/cgroup")
}

// TestRunSetsidDescendant runs a child whose descendant leaves its process
// group: with a cgroup the descendant dies with the call; without one (the
// degraded path) it escapes, as documented.
func TestRunSetsidDescendant(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	tests := []struct {
		name      string
		mode      string // helper mode
		cancel    bool   // cancel the call (else the child exits by itself)
		noCgroup  bool
		wantAlive bool
	}{
		{name: "double-forked daemon, call cancelled", mode: "daemon", cancel: true},
		{name: "setsid grandchild, child exits", mode: "escape"},
		{name: "without cgroup the daemon escapes", mode: "daemon", cancel: true, noCgroup: true, wantAlive: true},
		{name: "without cgroup the setsid grandchild escapes", mode: "escape", noCgroup: true, wantAlive: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !tt.noCgroup {
				needCgroup(t)
			}
			pidFile, reach := helperPIDFile(t)
			r := process.New(grant(exe), reach, resolver, process.Config{NoCgroup: tt.noCgroup}, nil)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			done := make(chan error, 1)
			go func() {
				_, err := r.Run(ctx, tool.Command{Binary: exe, Env: map[string]string{helperEnv: tt.mode, pidFileEnv: pidFile}})
				done <- err
			}()
			descendant := waitPID(t, pidFile)
			if tt.cancel {
				cancel(errCallCancelled)
			}
			select {
			case err := <-done:
				if tt.cancel {
					require.ErrorIs(t, err, errCallCancelled)
				} else {
					require.NoError(t, err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("Run did not return")
			}
			if tt.wantAlive {
				require.True(t, alive(descendant), "without a cgroup the descendant outlives the call")
				return
			}
			require.Eventually(t, func() bool { return !alive(descendant) }, 5*time.Second, 10*time.Millisecond, "the descendant survived its call")
		})
	}
}

// TestRunCgroupRemoved checks that the child runs in its own cgroup under
// the worker's, and that the cgroup is gone when Run returns.
func TestRunCgroupRemoved(t *testing.T) {
	t.Parallel()
	needCgroup(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	pidFile, reach := helperPIDFile(t)
	r := process.New(grant(exe), reach, resolver, process.Config{}, nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(ctx, tool.Command{Binary: exe, Env: map[string]string{helperEnv: "group", pidFileEnv: pidFile}})
		done <- err
	}()
	grandchild := waitPID(t, pidFile)
	own, theirs := cgroupOf(t, os.Getpid()), cgroupOf(t, grandchild)
	require.Equal(t, own, filepath.Dir(theirs), "a cgroup under the worker's")
	require.True(t, strings.HasPrefix(filepath.Base(theirs), "capstan-call-"), theirs)
	dir := filepath.Join(process.Sandbox().Cgroup, filepath.Base(theirs))
	require.DirExists(t, dir)
	cancel(errCallCancelled)
	select {
	case err := <-done:
		require.ErrorIs(t, err, errCallCancelled)
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	require.NoDirExists(t, dir, "the call's cgroup is removed before Run returns")
	require.False(t, alive(grandchild))
}

// cgroupOf returns the cgroup v2 path of pid.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	require.NoError(t, err)
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			return p
		}
	}
	t.Fatalf("no cgroup v2 entry for %d", pid)
	return ""
}
