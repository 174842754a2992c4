package worker_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
)

// natsAttackEnv makes this test binary, run as a child by run_process, the
// attacker of issue 18: it connects to the NATS server at $CAPSTAN_ATTACK_NATS
// over TCP and multipath TCP and, if it gets in, rewrites its own
// personality to read "/" and run anything.
const natsAttackEnv = "CAPSTAN_ATTACK_NATS"

func TestMain(m *testing.M) {
	if addr := os.Getenv(natsAttackEnv); addr != "" {
		os.Exit(natsAttack(addr))
	}
	os.Exit(m.Run())
}

// natsAttack prints one JSON object: for "tcp" and "mptcp", "ok: <what
// the server said>" or the error.
func natsAttack(addr string) int {
	ap, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return 2
	}
	sa := &unix.SockaddrInet4{Port: ap.Port}
	copy(sa.Addr[:], ap.IP.To4())
	doc := `id: nonet
fs_reach: {read: ["/"]}
process: {allow: ["*"]}
`
	attempt := func(proto int) string {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, proto)
		if err != nil {
			return "socket: " + err.Error()
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, sa); err != nil {
			return "connect: " + err.Error()
		}
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
		pub := fmt.Sprintf("CONNECT {\"verbose\":false}\r\nPUB $KV.capstan_personalities.nonet %d\r\n%s\r\nPING\r\n", len(doc), doc)
		if _, err := unix.Write(fd, []byte(pub)); err != nil {
			return "write: " + err.Error()
		}
		buf := make([]byte, 4096)
		var got []byte
		for len(got) < 4096 {
			n, err := unix.Read(fd, buf)
			if n <= 0 || err != nil {
				break
			}
			got = append(got, buf[:n]...)
			if strings.Contains(string(got), "PONG") || strings.Contains(string(got), "-ERR") {
				break
			}
		}
		return "ok: " + string(got)
	}
	out, _ := json.Marshal(map[string]string{"tcp": attempt(0), "mptcp": attempt(262)})
	fmt.Println(string(out))
	return 0
}

// TestAttackChildRewritesItsPersonality is the attack of issue 18 through
// a real worker and a real embedded NATS server: under a personality
// without network, run_process starts a child that tries to reach the
// NATS port over TCP and multipath TCP and publish a wider personality for
// itself. Nothing gets through, the personality is unchanged, and the next
// call under it still cannot read /etc/passwd.
func TestAttackChildRewritesItsPersonality(t *testing.T) {
	t.Parallel()
	if s := process.Sandbox(); !s.Confined || !s.NetworkNamespace {
		t.Skipf("needs the whole process sandbox; this machine: %s", s.Reason)
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	e := newEnv(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	doc := fmt.Sprintf("id: nonet\nfs_reach:\n  workdir: %q\n  read: [\"${WORKDIR}\"]\nprocess: {allow: [%q]}\n", dir, exe)
	e.putPersonality("nonet", doc)
	e.start(worker.Config{}, builtin.All()...)
	u, err := url.Parse(e.url)
	require.NoError(t, err)

	args, err := json.Marshal(map[string]any{"binary": exe, "env": map[string]string{natsAttackEnv: u.Host}})
	require.NoError(t, err)
	e.call(protocol.Call{CallID: "attack", Tool: "run_process", PersonalityID: "nonet", Args: args})
	r := e.result("attack", "attack")
	require.True(t, r.OK, r.Error)
	var structured struct{ Stdout, Stderr string }
	require.NoError(t, json.Unmarshal(r.Structured, &structured))
	var out map[string]string
	require.NoError(t, json.Unmarshal([]byte(structured.Stdout), &out), "child said %q, stderr %q", structured.Stdout, structured.Stderr)
	for _, k := range []string{"tcp", "mptcp"} {
		require.NotContains(t, out[k], "ok:", "%s reached the NATS server: %s", k, out[k])
	}
	for _, k := range []string{"tcp", "mptcp"} {
		require.Contains(t, out[k], "operation not permitted", "%s: refused by the seccomp filter", k)
	}

	kv, err := e.conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	entry, found, err := kv.Get(ctxT(t), "nonet")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, doc, string(entry.Value), "the personality is unchanged")

	e.call(protocol.Call{CallID: "passwd", Tool: "read_file", PersonalityID: "nonet", Args: json.RawMessage(`{"path":"/etc/passwd"}`)})
	r = e.result("passwd", "passwd")
	require.False(t, r.OK)
	require.Equal(t, `Filesystem boundary: read of "/etc/passwd" is outside this personality's fs_reach allowlist.`, r.Error)
}

// TestProcessNetworkRefusedWithoutNamespaces: on a machine without user
// namespaces a call whose process grant includes network is refused before
// it starts, with the spec's message; a call without network still runs.
func TestProcessNetworkRefusedWithoutNamespaces(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	reach := fmt.Sprintf("fs_reach:\n  workdir: %q\n  read: [\"${WORKDIR}\"]\n", dir)
	e.putPersonality("online", "id: online\n"+reach+"safety:\n  network:\n    allow: [\"example.com\"]\n")
	e.putPersonality("offline", "id: offline\n"+reach)
	w, err := worker.New(worker.Config{NATSURL: e.url, NATSCreds: bustest.Creds(e.url), Logger: quietLogger()}, builtin.All()...)
	require.NoError(t, err)
	worker.WithoutNetworkNamespaces(w)
	e.run(w)

	e.call(protocol.Call{CallID: "n1", Tool: "terminal", PersonalityID: "online", Args: json.RawMessage(`{"command":"echo hi"}`)})
	r := e.result("n1", "n1")
	require.Equal(t, protocol.CodeNotAvailable, r.Code)
	require.Equal(t, "Process network needs a network namespace, which this machine does not allow: turned off by the runner's configuration", r.Error)

	e.call(protocol.Call{CallID: "n2", Tool: "terminal", PersonalityID: "offline", Args: json.RawMessage(`{"command":"echo hi"}`)})
	r = e.result("n2", "n2")
	require.True(t, r.OK, r.Error)
}
