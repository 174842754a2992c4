package process_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
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
	noUserNS := errors.New("network: loopback: bring up: operation not permitted")
	noSeccomp := errors.New("seccomp: install the filter: invalid argument")
	noCgroup := errors.New("create a cgroup under /sys/fs/cgroup: permission denied")
	noCeil := errors.New("no ceilings apply: children's memory, processes and CPU are not limited per call (cgroup v2: x)")
	all := []string{"memory", "pids", "cpu"}
	const (
		escapes  = "no cgroup v2 kill (create a cgroup under /sys/fs/cgroup: permission denied): a descendant that leaves the child's process group (setsid) can outlive its call"
		noTmp    = "no tmp limit without a user namespace: a child's TMPDIR is not bounded by process.limits.tmp and can fill the temp directory's file system"
		refused  = "no user and network namespace for children (network: loopback: bring up: operation not permitted): calls whose process grant includes network are refused (CAPSTAN_PROCESS_NETWORK=unconfined lets them use any host)"
		anyHost  = "no user and network namespace for children (network: loopback: bring up: operation not permitted): children of calls with network use TCP and UDP to any host, loopback and the NATS server included (CAPSTAN_PROCESS_NETWORK=unconfined)"
		filter   = "no seccomp filter (seccomp: install the filter: invalid argument): children can open multipath TCP, raw and packet sockets and use ptrace, bpf, io_uring and namespaces as far as the kernel lets their user"
		noFiles  = "Landlock is not available (landlock_create_ruleset: function not implemented): children's files are not confined and they read and write whatever the worker's OS user can"
		unixSock = "connecting to pathname unix sockets (ABI 9)"
		udp      = "UDP (ABI 10)"
	)
	full := process.Probes{ABI: 7, Cgroup: "/sys/fs/cgroup/w", V2: all}
	with := func(f func(p *process.Probes)) process.Probes { p := full; f(&p); return p }
	tests := []struct {
		name    string
		probes  process.Probes
		network process.NetworkMode
		want    process.SandboxStatus
	}{
		{
			name: "everything", probes: full,
			want: process.SandboxStatus{LandlockABI: 7, Landlock: true, Seccomp: true, NetworkNamespace: true, ProcessNetwork: "proxy", TmpLimit: true, Spawner: "zygote", Confined: true,
				CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Ceilings: all, CeilingsCgroup: "v2", Unrestricted: []string{unixSock, udp}},
		},
		{
			name: "ceilings on cgroup v1", probes: with(func(p *process.Probes) {
				p.V2 = nil
				p.V1 = map[string]string{"memory": "/m", "pids": "/p", "cpu": "/c"}
			}),
			want: process.SandboxStatus{LandlockABI: 7, Landlock: true, Seccomp: true, NetworkNamespace: true, ProcessNetwork: "proxy", TmpLimit: true, Spawner: "zygote", Confined: true,
				CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Ceilings: all, CeilingsCgroup: "v1", Unrestricted: []string{unixSock, udp}},
		},
		{
			name: "no user namespaces: network refused, still confined", probes: with(func(p *process.Probes) { p.NetErr = noUserNS }),
			want: process.SandboxStatus{LandlockABI: 7, Landlock: true, Seccomp: true, ProcessNetwork: "refused", Spawner: "zygote", Confined: true,
				CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Ceilings: all, CeilingsCgroup: "v2", Degraded: true, Reason: refused + "; " + noTmp, Unrestricted: []string{unixSock, udp}},
		},
		{
			name: "no user namespaces, network unconfined: not confined", probes: with(func(p *process.Probes) { p.NetErr = noUserNS }), network: process.NetworkUnconfined,
			want: process.SandboxStatus{LandlockABI: 7, Landlock: true, Seccomp: true, ProcessNetwork: "unconfined", Spawner: "zygote",
				CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Ceilings: all, CeilingsCgroup: "v2", Degraded: true, Reason: anyHost + "; " + noTmp, Unrestricted: []string{unixSock, udp}},
		},
		{
			name: "unconfined mode changes nothing with namespaces", probes: full, network: process.NetworkUnconfined,
			want: process.SandboxStatus{LandlockABI: 7, Landlock: true, Seccomp: true, NetworkNamespace: true, ProcessNetwork: "proxy", TmpLimit: true, Spawner: "zygote", Confined: true,
				CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Ceilings: all, CeilingsCgroup: "v2", Unrestricted: []string{unixSock, udp}},
		},
		{
			name: "no tmpfs in the user namespace", probes: with(func(p *process.Probes) { p.TmpErr = errors.New("tmp: mount a tmpfs on /tmp: operation not permitted") }),
			want: process.SandboxStatus{LandlockABI: 7, Landlock: true, Seccomp: true, NetworkNamespace: true, ProcessNetwork: "proxy", Spawner: "zygote", Confined: true,
				CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Ceilings: all, CeilingsCgroup: "v2", Degraded: true,
				Reason:       "no tmp limit (tmp: mount a tmpfs on /tmp: operation not permitted): a child's TMPDIR is not bounded by process.limits.tmp and can fill the temp directory's file system",
				Unrestricted: []string{unixSock, udp}},
		},
		{
			name: "no seccomp", probes: with(func(p *process.Probes) { p.SeccompErr = noSeccomp }),
			want: process.SandboxStatus{LandlockABI: 7, Landlock: true, NetworkNamespace: true, ProcessNetwork: "proxy", TmpLimit: true, Spawner: "zygote",
				CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Ceilings: all, CeilingsCgroup: "v2", Degraded: true, Reason: filter, Unrestricted: []string{unixSock, udp}},
		},
		{
			name: "ABI 2 is below the minimum", probes: with(func(p *process.Probes) { p.ABI = 2 }),
			want: process.SandboxStatus{LandlockABI: 2, Landlock: true, Seccomp: true, NetworkNamespace: true, ProcessNetwork: "proxy", TmpLimit: true, Spawner: "zygote",
				CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Ceilings: all, CeilingsCgroup: "v2", Degraded: true,
				Reason:       "Landlock ABI 2 is below 3: children's files are confined but these are not restricted: file truncation (ABI 3)",
				Unrestricted: []string{"file truncation (ABI 3)", "TCP bind and connect (ABI 4)", "device ioctls (ABI 5)", "signals and abstract unix sockets to processes outside the sandbox (ABI 6)", unixSock, udp}},
		},
		{
			name: "ABI 11", probes: with(func(p *process.Probes) { p.ABI = 11 }),
			want: process.SandboxStatus{LandlockABI: 11, Landlock: true, Seccomp: true, NetworkNamespace: true, ProcessNetwork: "proxy", TmpLimit: true, Spawner: "zygote", Confined: true,
				CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Ceilings: all, CeilingsCgroup: "v2"},
		},
		{
			name: "no Landlock", probes: with(func(p *process.Probes) { p.ABI, p.ABIErr = 0, noLandlock }),
			want: process.SandboxStatus{Seccomp: true, NetworkNamespace: true, ProcessNetwork: "proxy", TmpLimit: true, Spawner: "zygote",
				CgroupKill: true, Cgroup: "/sys/fs/cgroup/w", Ceilings: all, CeilingsCgroup: "v2", Degraded: true, Reason: noFiles},
		},
		{
			name: "no cgroup, no ceilings", probes: with(func(p *process.Probes) { p.CgroupErr, p.V2, p.CeilErr = noCgroup, nil, noCeil }),
			want: process.SandboxStatus{LandlockABI: 7, Landlock: true, Seccomp: true, NetworkNamespace: true, ProcessNetwork: "proxy", TmpLimit: true, Spawner: "zygote", Confined: true,
				Ceilings: []string{}, Degraded: true, Reason: escapes + "; " + noCeil.Error(), Unrestricted: []string{unixSock, udp}},
		},
		{
			name: "nothing", probes: process.Probes{ABIErr: noLandlock, SeccompErr: noSeccomp, NetErr: noUserNS, ZygoteErr: errors.New("built without cgo"), CgroupErr: noCgroup, CeilErr: noCeil},
			want: process.SandboxStatus{ProcessNetwork: "refused", Spawner: "launcher", Ceilings: []string{}, Degraded: true,
				Reason: strings.Join([]string{noFiles, filter, refused, noTmp, escapes, noCeil.Error()}, "; ")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, process.NewStatus(tt.probes, tt.network))
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
			status: process.NewStatus(process.Probes{ABI: 7, Cgroup: "/sys/fs/cgroup/w", V2: []string{"memory", "pids"}, CeilErr: errors.New("no cpu ceiling")}, ""),
			want: map[string]any{"level": "WARN", "msg": "process sandbox", "confined": true, "landlock_abi": 7.0, "seccomp": true, "network_namespace": true,
				"process_network": "proxy", "tmp_limit": true, "spawner": "zygote", "cgroup_kill": true, "cgroup": "/sys/fs/cgroup/w", "ceilings": "memory,pids", "ceilings_cgroup": "v2",
				"reason": "no cpu ceiling", "unrestricted": "connecting to pathname unix sockets (ABI 9), UDP (ABI 10)"},
		},
		{
			name:   "degraded",
			status: process.NewStatus(process.Probes{ABIErr: syscall.ENOSYS, SeccompErr: syscall.ENOSYS, NetErr: syscall.EPERM, ZygoteErr: syscall.ENOSYS, CgroupErr: errors.New("no cgroup"), CeilErr: errors.New("no ceilings apply")}, ""),
			want: map[string]any{"level": "WARN", "msg": "process sandbox", "confined": false, "landlock_abi": 0.0, "seccomp": false, "network_namespace": false,
				"process_network": "refused", "tmp_limit": false, "spawner": "launcher", "cgroup_kill": false, "ceilings": "",
				"reason": "Landlock is not available (function not implemented): children's files are not confined and they read and write whatever the worker's OS user can; " +
					"no seccomp filter (function not implemented): children can open multipath TCP, raw and packet sockets and use ptrace, bpf, io_uring and namespaces as far as the kernel lets their user; " +
					"no user and network namespace for children (operation not permitted): calls whose process grant includes network are refused (CAPSTAN_PROCESS_NETWORK=unconfined lets them use any host); " +
					"no tmp limit without a user namespace: a child's TMPDIR is not bounded by process.limits.tmp and can fill the temp directory's file system; " +
					"no cgroup v2 kill (no cgroup): a descendant that leaves the child's process group (setsid) can outlive its call; no ceilings apply"},
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

func TestParseNetworkMode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]process.NetworkMode{"": process.NetworkConfined, "confined": process.NetworkConfined, " Unconfined ": process.NetworkUnconfined} {
		got, err := process.ParseNetworkMode(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	_, err := process.ParseNetworkMode("open")
	require.EqualError(t, err, `"open" must be confined or unconfined`)
}

// TestSandboxProbe checks the live probe against the kernel: what it
// reports is what the launcher can do here.
func TestSandboxProbe(t *testing.T) {
	t.Parallel()
	s := process.Sandbox()
	abi, err := launcher.ABI()
	require.Equal(t, abi, s.LandlockABI)
	require.Equal(t, err == nil && abi > 0, s.Landlock)
	require.Equal(t, launcher.Probe(launcher.Spec{Seccomp: true}, nil) == nil, s.Seccomp)
	netns := launcher.Probe(launcher.Spec{NetNS: true}, launcher.NetNSAttr(nil))
	require.Equal(t, netns == nil, s.NetworkNamespace, "probe: %v", netns)
	require.Equal(t, s.Landlock && abi >= process.MinConfinedABI && s.Seccomp && s.NetworkNamespace, s.Confined)
	if s.NetworkNamespace {
		tmp := launcher.Probe(launcher.Spec{NetNS: true, Tmp: filepath.Clean(os.TempDir()), TmpBytes: 1 << 20}, launcher.MountNSAttr(launcher.NetNSAttr(nil)))
		require.Equal(t, tmp == nil, s.TmpLimit, "probe: %v", tmp)
	} else {
		require.False(t, s.TmpLimit, "no tmp limit without a user namespace")
		require.Contains(t, s.Reason, "no tmp limit")
	}
	require.Equal(t, s.Degraded, s.Reason != "")
	if s.CgroupKill {
		fi, err := os.Stat(s.Cgroup)
		require.NoError(t, err)
		require.True(t, fi.IsDir())
	} else {
		require.Empty(t, s.Cgroup)
		require.Contains(t, s.Reason, "no cgroup v2 kill")
	}
	if len(s.Ceilings) < 3 {
		require.True(t, s.Degraded)
	}
	s.Unrestricted = append(s.Unrestricted, "changed")
	require.NotContains(t, process.Sandbox().Unrestricted, "changed", "Sandbox returns a copy")
	u := process.Config{Network: process.NetworkUnconfined}.Sandbox()
	if s.NetworkNamespace {
		require.Equal(t, "proxy", u.ProcessNetwork, "unconfined only matters without namespaces")
	} else {
		require.Equal(t, "unconfined", u.ProcessNetwork)
		require.False(t, u.Confined)
	}
	t.Logf("sandbox of this machine: %+v", process.Sandbox())
}

func TestConfigNetworkRefused(t *testing.T) {
	t.Parallel()
	const off = "Process network needs a network namespace, which this machine does not allow: turned off by the runner's configuration"
	require.Equal(t, off, process.Config{NoNetNS: true}.NetworkRefused())
	require.Empty(t, process.Config{NoNetNS: true, Network: process.NetworkUnconfined}.NetworkRefused(), "unconfined: such calls run")
	if process.Sandbox().NetworkNamespace {
		require.Empty(t, process.Config{}.NetworkRefused())
	} else {
		require.Contains(t, process.Config{}.NetworkRefused(), "Process network needs a network namespace, which this machine does not allow: ")
	}
}
