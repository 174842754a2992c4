package process_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process"
)

// helperEnv selects a helper mode: the test binary, run through the runner,
// plays a child that starts grandchildren or probes its sandbox (no shell
// is ever involved).
const (
	helperEnv  = "CAPSTAN_PROCESS_HELPER"
	pidFileEnv = "CAPSTAN_PROCESS_PIDFILE"
	addrEnv    = "CAPSTAN_PROCESS_ADDR"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	goleak.VerifyTestMain(m)
}

// helper runs one helper mode and returns the exit status.
//
//	sleep       sleep a minute
//	group       start a grandchild in the same group, then sleep
//	background  start a grandchild in the same group, then exit 0
//	escape      start a grandchild in a new session, then exit 0
//	daemon      start a daemon (setsid, then a double fork), then sleep
//	daemonize   (the daemon's first fork) start the daemon, then exit 0
//	signal      die of SIGTERM
//	dial        connect to $CAPSTAN_PROCESS_ADDR ("tcp:host:port" or
//	            "unix:@name"): exit 0 when connected, else print the error
//	            and exit 1
//	kill-parent send signal 0 to the parent (the worker): exit 0 when
//	            allowed, else print the error and exit 1
//	escape-net  try every way out of the sandbox's network (attack_test.go)
//	            and print one JSON object of outcomes
//	escape-sys  try the system calls the seccomp filter refuses and print
//	            one JSON object of outcomes
//	mem-flood   allocate and touch 512 MiB, then print "survived"
//	fill-tmp    write $CAPSTAN_PROCESS_FILL bytes into $TMPDIR (tmp_test.go)
//	clean-stop  run children under $CAPSTAN_PROCESS_TMP and stop cleanly
//	            (leftovers_test.go)
//	leave-behind start `sleep 60` through a runner with TmpDir
//	            $CAPSTAN_PROCESS_TMP, print its pid, then wait to be killed
//	probe-files open each argument for reading (or for writing, without
//	            writing, when it starts with "write:") and print one JSON
//	            object of outcomes (floor_test.go)
func helper(mode string) int {
	switch mode {
	case "probe-files":
		return probeFiles(os.Args[1:])
	case "escape-net":
		return escapeNet()
	case "escape-sys":
		return escapeSys()
	case "leave-behind":
		return leaveBehind()
	case "fill-tmp":
		return fillTmp()
	case "clean-stop":
		return cleanStop()
	case "mem-flood":
		b := make([]byte, 512<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println("survived")
		return 0
	case "sleep":
		time.Sleep(time.Minute)
		return 0
	case "group", "background", "escape", "daemon", "daemonize":
		return spawnGrandchild(mode)
	case "signal":
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(time.Minute)
		return 0
	case "dial":
		network, addr, _ := strings.Cut(os.Getenv(addrEnv), ":")
		c, err := net.DialTimeout(network, addr, 10*time.Second)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		_ = c.Close()
		return 0
	case "kill-parent":
		if err := syscall.Kill(os.Getppid(), 0); err != nil {
			fmt.Println(err)
			return 1
		}
		return 0
	}
	return 2
}

// spawnGrandchild starts the next process of a spawning mode; the last one
// writes its pid to $CAPSTAN_PROCESS_PIDFILE.
func spawnGrandchild(mode string) int {
	exe, err := os.Executable()
	if err != nil {
		return 3
	}
	gc := exec.Command(exe)
	gc.Env = []string{helperEnv + "=sleep"}
	gc.Stdout, gc.Stderr = os.Stdout, os.Stderr // hold the pipes
	switch mode {
	case "escape":
		gc.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	case "daemon":
		gc.Env = []string{helperEnv + "=daemonize", pidFileEnv + "=" + os.Getenv(pidFileEnv)}
		gc.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := gc.Start(); err != nil {
		return 4
	}
	// Printed before the pid is written, so a test that has the pid has
	// this line too.
	fmt.Println("parent done")
	if mode == "daemon" {
		// The first fork exits once the daemon runs; the daemon is
		// re-parented away from this child.
		if err := gc.Wait(); err != nil {
			return 6
		}
	} else if err := os.WriteFile(os.Getenv(pidFileEnv), []byte(strconv.Itoa(gc.Process.Pid)), 0o644); err != nil {
		return 5
	}
	if mode == "group" || mode == "daemon" {
		time.Sleep(time.Minute)
	}
	return 0
}

// helperPIDFile returns a path for the grandchild's pid, in a directory the
// returned reach lets the child write, and registers a cleanup that kills
// that grandchild (a process this test started) if it is still alive.
func helperPIDFile(t *testing.T) (string, process.Reach) {
	t.Helper()
	dir := realTempDir(t)
	path := filepath.Join(dir, "pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(string(b)); err == nil && alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return path, process.Reach{FS: &capability.FSGrant{Write: []string{dir}}}
}

// realTempDir is a fresh temp dir with symlinks resolved, as the child's
// getcwd and the runner's reach checks see it.
func realTempDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return dir
}

// waitPID polls for the grandchild's pid.
func waitPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || len(b) == 0 {
			return false
		}
		pid, err = strconv.Atoi(string(b))
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "the helper never wrote its grandchild's pid")
	return pid
}

// alive reports whether pid runs (a zombie waiting for its reaper is dead).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// pid (comm) state ...: comm may contain spaces, so cut at the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// startLeaveBehind starts this test binary as a worker that starts
// `sleep 60` through a runner with TmpDir root and waits to be killed
// (the helper leave-behind). It returns the worker and the sleep's pid,
// which the test's cleanup kills.
func startLeaveBehind(t *testing.T, root string) (*exec.Cmd, int) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	c := exec.Command(exe)
	c.Env = []string{helperEnv + "=leave-behind", tmpEnv + "=" + root, "PATH=" + os.Getenv("PATH")}
	out, err := c.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	sleepPID, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err, "helper said %q", line)
	t.Cleanup(func() { _ = syscall.Kill(sleepPID, syscall.SIGKILL) })
	return c, sleepPID
}
