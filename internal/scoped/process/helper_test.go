package process_test

import (
	"fmt"
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
)

// helperEnv selects a helper mode: the test binary, run through the runner,
// plays a child that starts grandchildren (no shell is ever involved).
const (
	helperEnv  = "CAPSTAN_PROCESS_HELPER"
	pidFileEnv = "CAPSTAN_PROCESS_PIDFILE"
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
//	signal      die of SIGTERM
func helper(mode string) int {
	switch mode {
	case "sleep":
		time.Sleep(time.Minute)
		return 0
	case "group", "background", "escape":
		exe, err := os.Executable()
		if err != nil {
			return 3
		}
		gc := exec.Command(exe)
		gc.Env = []string{helperEnv + "=sleep"}
		gc.Stdout, gc.Stderr = os.Stdout, os.Stderr // hold the pipes
		if mode == "escape" {
			gc.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		}
		if err := gc.Start(); err != nil {
			return 4
		}
		if err := os.WriteFile(os.Getenv(pidFileEnv), []byte(strconv.Itoa(gc.Process.Pid)), 0o644); err != nil {
			return 5
		}
		fmt.Println("parent done")
		if mode == "group" {
			time.Sleep(time.Minute)
		}
		return 0
	case "signal":
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(time.Minute)
		return 0
	}
	return 2
}

// helperPIDFile returns a path for the grandchild's pid and registers a
// cleanup that kills that grandchild (a process this test started) if it
// is still alive.
func helperPIDFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(string(b)); err == nil && alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return path
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
