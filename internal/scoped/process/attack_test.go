package process_test

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

// The attacks of security.md section 5 against the process runner, on the
// real kernel and a real embedded NATS server. Each test runs the attack
// once as the worker confines children and once with the defences this
// machine would lack on the main branch before them (Landlock alone), to
// show the test notices an escape.

// needConfined skips a test on a machine that cannot give children the
// whole sandbox.
func needConfined(t *testing.T) {
	t.Helper()
	if s := process.Sandbox(); !s.Confined || !s.NetworkNamespace {
		t.Skipf("needs Landlock, seccomp and user namespaces to confine children; this machine: %s", s.Reason)
	}
}

// needCeiling skips a test on a machine where the named ceiling does not
// apply.
func needCeiling(t *testing.T, name string) {
	t.Helper()
	if s := process.Sandbox(); !strings.Contains(strings.Join(s.Ceilings, ","), name) {
		t.Skipf("needs the %s ceiling (a cgroup v1 or v2 %s controller the worker may use); this machine: %s", name, name, s.Reason)
	}
}

// natsAddr starts a real embedded NATS server and returns its ip:port.
func natsAddr(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(bustest.Server(t))
	require.NoError(t, err)
	return u.Host
}

// udpSink is a UDP socket on loopback that a child might send to.
type udpSink struct{ conn *net.UDPConn }

func newUDPSink(t *testing.T) udpSink {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return udpSink{conn: c}
}

// firstDatagram sends a sentinel to the sink from the test itself and
// returns the first datagram the sink holds: the sentinel unless something
// else arrived before it.
func (s udpSink) firstDatagram(t *testing.T) string {
	t.Helper()
	out, err := net.DialUDP("udp4", nil, s.conn.LocalAddr().(*net.UDPAddr))
	require.NoError(t, err)
	defer out.Close()
	_, err = out.Write([]byte("sentinel"))
	require.NoError(t, err)
	require.NoError(t, s.conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, 64)
	n, err := s.conn.Read(buf)
	require.NoError(t, err)
	return string(buf[:n])
}

// escape runs a helper mode under r and returns its JSON outcomes.
func escape(t *testing.T, r tool.Runner, mode string, env map[string]string) map[string]string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	full := map[string]string{helperEnv: mode}
	for k, v := range env {
		full[k] = v
	}
	res, err := r.Run(context.Background(), tool.Command{Binary: exe, Env: full})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "stdout %q stderr %q", res.Stdout, res.Stderr)
	var out map[string]string
	require.NoError(t, json.Unmarshal(res.Stdout, &out), "stdout %q", res.Stdout)
	return out
}

func TestAttackChildWithoutNetwork(t *testing.T) {
	t.Parallel()
	needConfined(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	nats := natsAddr(t)
	tests := []struct {
		name string
		cfg  process.Config
		// leaks lists the attempts that must get out; every other must be
		// refused.
		leaks []string
	}{
		{name: "confined as the worker confines it"},
		{name: "Landlock alone, as on main before the namespace and the filter", cfg: process.Config{NoSeccomp: true, NoNetNS: true},
			leaks: []string{"mptcp", "udp"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sink := newUDPSink(t)
			r := process.New(grant(exe), process.Reach{}, resolver, tt.cfg, nil)
			out := escape(t, r, "escape-net", map[string]string{tcpEnv: nats, udpEnv: sink.conn.LocalAddr().String()})
			got := sink.firstDatagram(t)
			if len(tt.leaks) > 0 {
				require.Contains(t, out["mptcp"], `CONNECTED, read "INFO {`, "MPTCP reaches the NATS server past Landlock")
				require.Equal(t, "SENT", out["udp"])
				require.Equal(t, "exfiltrated", got, "the datagram left the child")
				return
			}
			for _, key := range []string{"tcp", "mptcp", "udp", "udp6", "raw", "raw_cloexec", "packet", "packet_dgram", "netlink_audit", "vsock", "xdp", "socketpair_ip"} {
				require.Contains(t, out, key)
				require.Contains(t, out[key], "operation not permitted", "%s must be refused: %s", key, out[key])
			}
			require.Equal(t, "ok", out["netlink_route"], "what libc needs stays")
			require.Equal(t, "ok", out["unix_socket_ok"])
			require.Equal(t, "sentinel", got, "nothing reached the UDP socket outside")
		})
	}
}

func TestAttackSystemCalls(t *testing.T) {
	t.Parallel()
	needConfined(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	r := process.New(grant(exe), process.Reach{}, resolver, process.Config{}, nil)
	out := escape(t, r, "escape-sys", nil)
	const eperm, enosys = "operation not permitted", "function not implemented"
	want := map[string]string{
		"ptrace": eperm, "bpf": eperm, "perf_event_open": eperm, "keyctl": eperm, "add_key": eperm,
		"userfaultfd": enosys, "io_uring_setup": enosys, "clone3": enosys,
		"mount": eperm, "unshare_user": eperm, "unshare_net": eperm, "setns": eperm, "clone_newuser": eperm,
		"process_vm_readv": eperm, "capabilities": "0 0 0",
	}
	require.Equal(t, want, out)

	// Without the filter a child without any capability still creates a
	// user namespace (and from there the others): the test tells the
	// difference.
	r = process.New(grant(exe), process.Reach{}, resolver, process.Config{NoSeccomp: true, NoNetNS: true}, nil)
	out = escape(t, r, "escape-sys", nil)
	require.Equal(t, "ok", out["clone_newuser"], "without the filter: %v", out)
	require.Equal(t, "0 0 0", out["capabilities"], "capabilities are dropped by the launcher either way")
}

// TestAttackForkFlood starts far more processes than the pids ceiling
// allows: the fork fails inside the call, the result says which ceiling
// was hit, and nothing outlives the call.
func TestAttackForkFlood(t *testing.T) {
	t.Parallel()
	needConfined(t)
	needCeiling(t, "pids")
	g := grant("sh", "sleep")
	g.Limits = capability.ProcessLimits{Pids: 32}
	r := process.New(g, process.Reach{}, resolver, process.Config{}, nil)
	script := `i=0; while [ $i -lt 300 ]; do sleep 60 & i=$((i+1)); done; echo started $i`
	res, err := r.Run(context.Background(), tool.Command{Binary: "sh", Args: []string{"-c", script}})
	require.NoError(t, err)
	require.NotEqual(t, 0, res.ExitCode, "the flood stops at the ceiling: stdout %q stderr %q", res.Stdout, res.Stderr)
	require.NotContains(t, string(res.Stdout), "started 300")
	require.Equal(t, []string{"pids limit 32 reached"}, res.LimitsHit)
}

// TestAttackMemoryFlood allocates more than the memory ceiling: the call
// ends with the spec's message.
func TestAttackMemoryFlood(t *testing.T) {
	t.Parallel()
	needConfined(t)
	needCeiling(t, "memory")
	exe, err := os.Executable()
	require.NoError(t, err)
	g := grant(exe)
	g.Limits = capability.ProcessLimits{MemoryBytes: 64 << 20, MemoryText: "64MiB"}
	r := process.New(g, process.Reach{}, resolver, process.Config{}, nil)
	res, err := r.Run(context.Background(), tool.Command{Binary: exe, Env: map[string]string{helperEnv: "mem-flood"}})
	require.EqualError(t, err, "Process killed: memory limit 64MiB reached")
	require.ErrorIs(t, err, tool.ErrLimitReached)
	require.NotNil(t, res)
	require.NotContains(t, string(res.Stdout), "survived")
	require.Equal(t, 128+9, res.ExitCode, "killed by SIGKILL")
}
