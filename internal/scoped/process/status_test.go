package process_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
)

func TestNewStatus(t *testing.T) {
	t.Parallel()
	noLandlock := errors.New("landlock_create_ruleset: function not implemented")
	noCgroup := errors.New("create a cgroup under /sys/fs/cgroup: permission denied")
	const notConfined = "Landlock is not available (landlock_create_ruleset: function not implemented): children are not confined and reach whatever the worker's OS user reaches"
	const escapes = "no cgroup v2 kill (create a cgroup under /sys/fs/cgroup: permission denied): a descendant that leaves the child's process group (setsid) can outlive its call"
	const mptcp = "multipath TCP sockets (Landlock restricts classic TCP only)"
	tests := []struct {
		name  string
		abi   int
		abiEr error
		cgEr  error
		want  process.SandboxStatus
	}{
		{
			name: "ABI 7 with cgroup",
			abi:  7,
			want: process.SandboxStatus{LandlockABI: 7, Landlock: true, Confined: true, CgroupKill: true, Cgroup: "/sys/fs/cgroup/w",
				Unrestricted: []string{"connecting to pathname unix sockets (ABI 9)", "UDP (ABI 10)", mptcp}},
		},
		{
			name: "ABI 4 is the minimum",
			abi:  4,
			want: process.SandboxStatus{LandlockABI: 4, Landlock: true, Confined: true, CgroupKill: true, Cgroup: "/sys/fs/cgroup/w",
				Unrestricted: []string{"device ioctls (ABI 5)", "signals and abstract unix sockets to processes outside the sandbox (ABI 6)", "connecting to pathname unix sockets (ABI 9)", "UDP (ABI 10)", mptcp}},
		},
		{
			name: "ABI 11",
			abi:  11,
			want: process.SandboxStatus{LandlockABI: 11, Landlock: true, Confined: true, CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Unrestricted: []string{mptcp}},
		},
		{
			name: "ABI 3 is degraded",
			abi:  3,
			want: process.SandboxStatus{LandlockABI: 3, Landlock: true, CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Degraded: true,
				Reason:       "Landlock ABI 3 is below 4: children's files are confined but these are not restricted: TCP bind and connect (ABI 4)",
				Unrestricted: []string{"TCP bind and connect (ABI 4)", "device ioctls (ABI 5)", "signals and abstract unix sockets to processes outside the sandbox (ABI 6)", "connecting to pathname unix sockets (ABI 9)", "UDP (ABI 10)", mptcp}},
		},
		{
			name: "ABI 1 is degraded",
			abi:  1,
			want: process.SandboxStatus{LandlockABI: 1, Landlock: true, CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Degraded: true,
				Reason:       "Landlock ABI 1 is below 4: children's files are confined but these are not restricted: file truncation (ABI 3), TCP bind and connect (ABI 4)",
				Unrestricted: []string{"file truncation (ABI 3)", "TCP bind and connect (ABI 4)", "device ioctls (ABI 5)", "signals and abstract unix sockets to processes outside the sandbox (ABI 6)", "connecting to pathname unix sockets (ABI 9)", "UDP (ABI 10)", mptcp}},
		},
		{
			name:  "no Landlock",
			abiEr: noLandlock,
			want:  process.SandboxStatus{CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Degraded: true, Reason: notConfined},
		},
		{
			name:  "Landlock but no launcher",
			abi:   7,
			abiEr: errors.New("cannot re-execute the worker binary: stat /proc/self/exe: no such file or directory"),
			want: process.SandboxStatus{LandlockABI: 7, CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Degraded: true,
				Reason: "Landlock is not available (cannot re-execute the worker binary: stat /proc/self/exe: no such file or directory): children are not confined and reach whatever the worker's OS user reaches"},
		},
		{
			name: "no cgroup",
			abi:  6,
			cgEr: noCgroup,
			want: process.SandboxStatus{LandlockABI: 6, Landlock: true, Confined: true, Degraded: true, Reason: escapes,
				Unrestricted: []string{"connecting to pathname unix sockets (ABI 9)", "UDP (ABI 10)", mptcp}},
		},
		{
			name:  "nothing",
			abiEr: noLandlock,
			cgEr:  noCgroup,
			want:  process.SandboxStatus{Degraded: true, Reason: notConfined + "; " + escapes},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, process.NewStatus(tt.abi, tt.abiEr, "/sys/fs/cgroup/w", tt.cgEr))
		})
	}
}

func TestSandboxStatusLog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status process.SandboxStatus
		want   map[string]any
	}{
		{
			name:   "complete",
			status: process.NewStatus(7, nil, "/sys/fs/cgroup/w", nil),
			want: map[string]any{"level": "INFO", "msg": "process sandbox", "landlock_abi": 7.0, "confined": true, "cgroup_kill": true, "cgroup": "/sys/fs/cgroup/w",
				"unrestricted": "connecting to pathname unix sockets (ABI 9), UDP (ABI 10), multipath TCP sockets (Landlock restricts classic TCP only)"},
		},
		{
			name:   "degraded",
			status: process.NewStatus(0, syscall.ENOSYS, "", errors.New("no cgroup")),
			want: map[string]any{"level": "WARN", "msg": "process sandbox", "landlock_abi": 0.0, "confined": false, "cgroup_kill": false,
				"reason": "Landlock is not available (function not implemented): children are not confined and reach whatever the worker's OS user reaches; no cgroup v2 kill (no cgroup): a descendant that leaves the child's process group (setsid) can outlive its call"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}))
			tt.status.Log(context.Background(), log)
			require.Equal(t, 1, strings.Count(buf.String(), "\n"), "one line")
			var got map[string]any
			require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
			require.Equal(t, tt.want, got)
		})
	}
}

// TestSandboxProbe checks the live probe against the kernel.
func TestSandboxProbe(t *testing.T) {
	t.Parallel()
	s := process.Sandbox()
	abi, err := launcher.ABI()
	require.Equal(t, abi, s.LandlockABI)
	require.Equal(t, err == nil && abi > 0, s.Landlock)
	require.Equal(t, s.Landlock && abi >= process.MinConfinedABI, s.Confined)
	require.Equal(t, !s.Confined || !s.CgroupKill, s.Degraded)
	require.Equal(t, s.Degraded, s.Reason != "")
	if s.CgroupKill {
		fi, err := os.Stat(s.Cgroup)
		require.NoError(t, err)
		require.True(t, fi.IsDir())
	} else {
		require.Empty(t, s.Cgroup)
		require.Contains(t, s.Reason, "no cgroup v2 kill")
	}
	s.Unrestricted = append(s.Unrestricted, "changed")
	require.NotContains(t, process.Sandbox().Unrestricted, "changed", "Sandbox returns a copy")
	t.Logf("sandbox of this machine: %+v", process.Sandbox())
}
