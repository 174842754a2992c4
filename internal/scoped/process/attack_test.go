package process_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/egress"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

// The attacks of security.md section 5 against the process runner, on the
// real kernel and a real embedded NATS server. Each test runs the attack
// once as the worker confines children and once with the defences this
// machine would lack on the main branch before them (Landlock alone), to
// show the test notices an escape.

// spawners are the two ways a confined child is started: one conformance
// suite for both.
var spawners = []struct {
	name string
	cfg  process.Config
}{
	{"zygote", process.Config{}},
	{"launcher", process.Config{NoZygote: true}},
}

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
		{name: "confined through the launcher", cfg: process.Config{NoZygote: true}},
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
			for _, key := range []string{"tcp", "mptcp", "udp", "udp6", "raw", "raw_cloexec", "packet", "packet_dgram", "netlink_audit", "vsock", "xdp", "socketpair_ip",
				"mptcp_high_bits", "raw_high_bits", "inet_high_bits"} {
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
	const eperm, enosys = "operation not permitted", "function not implemented"
	want := map[string]string{
		"ptrace": eperm, "bpf": eperm, "perf_event_open": eperm, "keyctl": eperm, "add_key": eperm,
		"userfaultfd": enosys, "io_uring_setup": enosys, "clone3": enosys,
		"mount": eperm, "unshare_user": eperm, "unshare_net": eperm, "setns": eperm, "clone_newuser": eperm,
		"process_vm_readv": eperm, "capabilities": "0 0 0",
	}
	for _, sp := range spawners {
		r := process.New(grant(exe), process.Reach{}, resolver, sp.cfg, nil)
		require.Equal(t, want, escape(t, r, "escape-sys", nil), sp.name)
	}

	// Without the filter a child without any capability still creates a
	// user namespace (and from there the others): the test tells the
	// difference.
	r := process.New(grant(exe), process.Reach{}, resolver, process.Config{NoSeccomp: true, NoNetNS: true}, nil)
	out := escape(t, r, "escape-sys", nil)
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
	for _, sp := range spawners {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			r := process.New(g, process.Reach{}, resolver, sp.cfg, nil)
			script := `i=0; while [ $i -lt 300 ]; do sleep 60 & i=$((i+1)); done; echo started $i`
			res, err := r.Run(context.Background(), tool.Command{Binary: "sh", Args: []string{"-c", script}})
			require.NoError(t, err)
			require.NotEqual(t, 0, res.ExitCode, "the flood stops at the ceiling: stdout %q stderr %q", res.Stdout, res.Stderr)
			require.NotContains(t, string(res.Stdout), "started 300")
			require.Equal(t, []string{"pids limit 32 reached"}, res.LimitsHit)
		})
	}
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
	for _, sp := range spawners {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			r := process.New(g, process.Reach{}, resolver, sp.cfg, nil)
			res, err := r.Run(context.Background(), tool.Command{Binary: exe, Env: map[string]string{helperEnv: "mem-flood"}})
			require.EqualError(t, err, "Process killed: memory limit 64MiB reached")
			require.ErrorIs(t, err, tool.ErrLimitReached)
			require.NotNil(t, res)
			require.NotContains(t, string(res.Stdout), "survived")
			require.Equal(t, 128+9, res.ExitCode, "killed by SIGKILL")
		})
	}
}

// proxied returns the Reach of a call whose grant allows hosts (with
// allow_private_urls, so tests can use loopback) through a real egress
// proxy whose resolver maps every name to 127.0.0.1; refusals go to deny.
func proxied(t *testing.T, hosts []string, private bool, fs *capability.FSGrant, deny func(error)) process.Reach {
	t.Helper()
	g, err := capability.NewNetworkGrant([]string{"*"}, capability.NetworkPolicy{Allow: hosts, AllowPrivateURLs: private})
	require.NoError(t, err)
	lookup := func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	d := fetch.NewDialer(g, fetch.Config{LookupIP: lookup}, deny)
	return process.Reach{FS: fs, Network: true, Egress: egressFunc(func(ctx context.Context, ln net.Listener) error {
		return egress.Serve(ctx, ln, egress.Config{Dialer: d})
	})}
}

type egressFunc func(ctx context.Context, ln net.Listener) error

func (f egressFunc) Serve(ctx context.Context, ln net.Listener) error { return f(ctx, ln) }

// TestAttackChildWithNarrowGrant: a child whose call may reach example.com
// only tries the NATS port directly (TCP, MPTCP, UDP) and through the
// egress proxy; everything is refused, the proxy's refusal with the
// spec's body, and it is reported as a denial.
func TestAttackChildWithNarrowGrant(t *testing.T) {
	t.Parallel()
	needConfined(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	nats := natsAddr(t)
	for _, sp := range spawners {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			narrowGrantAttack(t, exe, nats, sp.cfg)
		})
	}
	// On main before the namespace and the proxy, a process grant with any
	// network meant TCP to any address, as CAPSTAN_PROCESS_NETWORK=
	// unconfined still gives where there is no user namespace: the same
	// child then reaches the NATS server, so the test tells the difference.
	t.Run("any host, as on main before the namespace and the proxy", func(t *testing.T) {
		t.Parallel()
		sink := newUDPSink(t)
		cfg := process.Config{NoNetNS: true, Network: process.NetworkUnconfined}
		r := process.New(grant(exe), proxied(t, []string{"example.com"}, false, nil, nil), resolver, cfg, nil)
		out := escape(t, r, "escape-net", map[string]string{tcpEnv: nats, udpEnv: sink.conn.LocalAddr().String()})
		require.Contains(t, out["tcp"], `CONNECTED, read "INFO {`, "TCP reaches the NATS server")
		require.Equal(t, "SENT", out["udp"])
		require.Equal(t, "exfiltrated", sink.firstDatagram(t), "the datagram left the child")
		require.Contains(t, out["mptcp"], "operation not permitted", "the filter still refuses multipath TCP")
		require.Contains(t, out["mptcp_high_bits"], "operation not permitted")
	})
}

func narrowGrantAttack(t *testing.T, exe, nats string, cfg process.Config) {
	sink := newUDPSink(t)
	var d denials
	r := process.New(grant(exe), proxied(t, []string{"example.com"}, false, nil, d.record), resolver, cfg, nil)
	out := escape(t, r, "escape-net", map[string]string{tcpEnv: nats, udpEnv: sink.conn.LocalAddr().String(), proxyEnv: "1"})
	require.NotContains(t, out["tcp"], "CONNECTED", "direct TCP to the NATS port")
	require.NotContains(t, out["mptcp"], "CONNECTED")
	require.Contains(t, out["mptcp"], "operation not permitted")
	for _, k := range []string{"raw", "packet", "netlink_audit", "vsock", "mptcp_high_bits", "raw_high_bits"} {
		require.Contains(t, out[k], "operation not permitted", k)
	}
	require.Equal(t, "sentinel", sink.firstDatagram(t), "a datagram to the host's loopback stays in the child's namespace")
	require.Contains(t, out["proxy_connect_nats"], "HTTP/1.1 403 Forbidden")
	require.Contains(t, out["proxy_connect_nats"], `Capstan egress: host \"`+nats+`\" is not in personality network allow list`)
	require.Len(t, d.all(), 1, "the proxy's refusal is reported once")
	require.ErrorIs(t, d.all()[0], tool.ErrHostNotAllowed)
}

// TestProxyEnvironment: a child with network finds the egress proxy in
// HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and their lower-case forms, with an
// empty NO_PROXY, whatever the call's own env says; a child without
// network gets none of them.
func TestProxyEnvironment(t *testing.T) {
	t.Parallel()
	needConfined(t)
	const proxy = "http://127.0.0.1:3128"
	names := []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "NO_PROXY", "no_proxy"}
	callEnv := map[string]string{"HTTP_PROXY": "http://evil.test:1", "https_proxy": "http://evil.test:2", "NO_PROXY": "*", "no_proxy": "*"}
	for _, sp := range spawners {
		t.Run(sp.name, func(t *testing.T) {
			t.Parallel()
			env := func(reach process.Reach) map[string]string {
				r := process.New(grant("env"), reach, resolver, sp.cfg, nil)
				res, err := r.Run(context.Background(), tool.Command{Binary: "env", Env: callEnv})
				require.NoError(t, err)
				require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
				got := map[string]string{}
				for line := range strings.Lines(string(res.Stdout)) {
					name, value, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
					if strings.HasSuffix(strings.ToUpper(name), "_PROXY") {
						got[name] = value
					}
				}
				return got
			}
			want := map[string]string{"NO_PROXY": "", "no_proxy": ""}
			for _, n := range names[:6] {
				want[n] = proxy
			}
			require.Equal(t, want, env(proxied(t, []string{"example.com"}, false, nil, nil)), "with network")
			require.Equal(t, callEnv, env(process.Reach{}), "without network: the call's own variables, no proxy")
		})
	}
}

// TestEgressClients: real clients reach an allowed host through the egress
// proxy: curl over HTTP and HTTPS, and git cloning over HTTPS (git's smart
// HTTP protocol, served by git http-backend).
func TestEgressClients(t *testing.T) {
	t.Parallel()
	needConfined(t)
	for _, bin := range []string{"curl", "git"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s: %v", bin, err)
		}
	}
	gitPath, err := exec.LookPath("git")
	require.NoError(t, err)
	// A bare repository with one commit, served over HTTPS.
	srvRoot := realTempDir(t)
	work := filepath.Join(srvRoot, "work")
	gitRun := func(dir string, args ...string) {
		c := exec.Command(gitPath, args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_NOSYSTEM=1", "HOME="+srvRoot)
		out, err := c.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
	}
	require.NoError(t, os.Mkdir(work, 0o755))
	gitRun(work, "init", "-q", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(work, "README"), []byte("cloned through the proxy\n"), 0o644))
	gitRun(work, "add", "README")
	gitRun(work, "commit", "-q", "-m", "one")
	gitRun(srvRoot, "clone", "-q", "--bare", work, "repo.git")
	backend := &cgi.Handler{Path: gitPath, Args: []string{"http-backend"}, Env: []string{"GIT_PROJECT_ROOT=" + srvRoot, "GIT_HTTP_EXPORT_ALL=1"}}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/hello" {
			_, _ = io.WriteString(w, "hello over TLS")
			return
		}
		backend.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	port := strings.TrimPrefix(srv.URL, "https://127.0.0.1:")

	// The child's reach: the CA file and a directory to clone into.
	reach := realTempDir(t)
	ca := filepath.Join(reach, "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644))
	fs := &capability.FSGrant{Read: []string{reach}, Write: []string{reach}}
	r := process.New(grant("curl", "git"), proxied(t, []string{"example.com:*"}, true, fs, nil), resolver, process.Config{}, nil)

	res, err := r.Run(context.Background(), tool.Command{Binary: "curl", Args: []string{"-sS", "--cacert", ca, "https://example.com:" + port + "/hello"}, Dir: reach})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "stderr %q", res.Stderr)
	require.Equal(t, "hello over TLS", string(res.Stdout))

	res, err = r.Run(context.Background(), tool.Command{Binary: "git", Args: []string{"clone", "-q", "https://example.com:" + port + "/repo.git", "clone"}, Dir: reach,
		Env: map[string]string{"GIT_SSL_CAINFO": ca, "GIT_CONFIG_NOSYSTEM": "1"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "stdout %q stderr %q", res.Stdout, res.Stderr)
	b, err := os.ReadFile(filepath.Join(reach, "clone", "README"))
	require.NoError(t, err)
	require.Equal(t, "cloned through the proxy\n", string(b))

	// A host outside the grant: curl sees the proxy's 403.
	res, err = r.Run(context.Background(), tool.Command{Binary: "curl", Args: []string{"-sS", "-w", " %{http_code}", "http://evil.test/"}, Dir: reach})
	require.NoError(t, err)
	require.Equal(t, `Capstan egress: host "evil.test" is not in personality network allow list 403`, string(res.Stdout))
}
