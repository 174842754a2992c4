package worker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// embeddedWorker runs a worker without NATSURL, so that it starts its own
// embedded server on a free loopback port storing in a temp data dir, until
// the test ends. It returns the server's URL and the data dir.
func embeddedWorker(t *testing.T, logs *lockedBuffer, tools ...tool.Tool) (url, dataDir string) {
	t.Helper()
	dataDir = t.TempDir()
	port := bustest.FreePort(t)
	if len(tools) == 0 {
		tools = []tool.Tool{echo.Tool()}
	}
	w, err := worker.New(worker.Config{DataDir: dataDir, EmbeddedPort: port, WorkerID: "embedded-1", ShutdownGrace: time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(logs, nil))}, tools...)
	require.NoError(t, err)
	_, running := w.Embedded()
	require.False(t, running, "no server before Run")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
		_, running := w.Embedded()
		require.False(t, running, "no server after Run")
	})
	select {
	case <-w.Ready():
	case err := <-errc:
		cancel()
		errc <- err
		t.Fatalf("worker stopped before ready: %v\n%s", err, logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("worker not ready in 60s:\n%s", logs)
	}
	url = "nats://127.0.0.1:" + strconv.Itoa(port)
	srv, running := w.Embedded()
	require.True(t, running)
	require.Equal(t, worker.EmbeddedServer{URL: url, CredsFile: filepath.Join(dataDir, "embedded.creds")}, srv)
	return url, dataDir
}

// TestWorkerEmbeddedServerUsesGeneratedCredentials: the worker connects to
// its own embedded server with the credentials it generated, says where the
// file is, and the server refuses anyone without them.
func TestWorkerEmbeddedServerUsesGeneratedCredentials(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	url, dataDir := embeddedWorker(t, logs)
	creds := filepath.Join(dataDir, "embedded.creds")

	var started map[string]any
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(line, `"msg":"started embedded NATS server"`) {
			require.NoError(t, json.Unmarshal([]byte(line), &started))
		}
	}
	require.NotNil(t, started, "logs: %s", logs)
	require.Equal(t, creds, started["creds_file"])
	require.Equal(t, url, started["url"])
	fi, err := os.Stat(creds)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = bus.Connect(ctx, bus.Config{URL: url})
	require.ErrorIs(t, err, bus.ErrNotAuthorized)
	c, err := bus.Connect(ctx, bus.Config{URL: url, Creds: creds})
	require.NoError(t, err)
	c.Close()
}

// TestAttackUnauthenticatedClientRewritesPersonality is the attack of
// docs/security (section 2): a process of the machine (a tool's child
// included) connects to the worker's embedded server with a bare CONNECT and
// publishes a permissive policy into the personalities bucket. The server
// answers -ERR 'Authorization Violation' and the policy is unchanged.
func TestAttackUnauthenticatedClientRewritesPersonality(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	url, dataDir := embeddedWorker(t, logs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := bus.Connect(ctx, bus.Config{URL: url, Creds: bus.EmbeddedCredsFile(dataDir)})
	require.NoError(t, err)
	defer admin.Close()
	kv, err := admin.KV(ctx, bus.Personalities)
	require.NoError(t, err)
	const policy = "id: nonet\n"
	rev, err := kv.Put(ctx, "nonet", []byte(policy))
	require.NoError(t, err)

	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "nats://"), 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(info, "INFO "), info)
	evil := "id: nonet\nsafety: {network: {allow: [\"*\"]}}\n"
	_, err = fmt.Fprintf(conn, "CONNECT {}\r\nPUB $KV.%s.nonet %d\r\n%s\r\nPING\r\n", admin.Names().PersonalitiesBucket(), len(evil), evil)
	require.NoError(t, err)
	var answer []string
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			answer = append(answer, strings.TrimSpace(line))
		}
		if err != nil {
			break // the server closes the connection
		}
	}
	require.Contains(t, answer, "-ERR 'Authorization Violation'")
	require.NotContains(t, answer, "PONG", "nothing after CONNECT was processed")

	e, found, err := kv.Get(ctx, "nonet")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, policy, string(e.Value))
	require.Equal(t, rev, e.Revision, "the personality was not written")
}

// TestEmbeddedCredentialsAreOnTheFloor: a personality whose fs_reach
// covers the embedded server's data directory still cannot read
// embedded.creds through the file tools (the data dir is on the floor of
// every personality), while a file next to the data dir is read.
func TestEmbeddedCredentialsAreOnTheFloor(t *testing.T) {
	t.Parallel()
	url, dataDir := embeddedWorker(t, &lockedBuffer{}, builtin.All()...)
	dataDir, err := filepath.EvalSymlinks(dataDir)
	require.NoError(t, err)
	beside, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.Equal(t, filepath.Dir(dataDir), filepath.Dir(beside), "t.TempDir gives siblings")
	note := filepath.Join(beside, "note")
	require.NoError(t, os.WriteFile(note, []byte("readable"), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, bus.Config{URL: url, Creds: bus.EmbeddedCredsFile(dataDir)})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	e := &env{t: t, url: url, conn: c, names: c.Names()}
	e.putPersonality("default", "id: default\n")
	e.putPersonality("wide", fmt.Sprintf("id: wide\nfs_reach:\n  read: [%q]\n", filepath.Dir(dataDir)))

	read := func(path string) (protocol.Result, error) {
		args, err := json.Marshal(map[string]string{"path": path})
		require.NoError(t, err)
		return tryDo(ctxT(t), e, protocol.Call{Tool: "read_file", PersonalityID: "wide", Args: args})
	}
	// The worker sees the new personality through its watch.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r, err := read(note)
		require.NoError(c, err)
		assert.True(c, r.OK, r.Error)
		assert.Contains(c, r.Value, "readable")
	}, 15*time.Second, 20*time.Millisecond)

	creds := filepath.Join(dataDir, "embedded.creds")
	r, err := read(creds)
	require.NoError(t, err)
	require.False(t, r.OK)
	require.Equal(t, fmt.Sprintf("Filesystem boundary: read of %q is outside this personality's fs_reach allowlist.", creds), r.Error)
	data, err := os.ReadFile(creds)
	require.NoError(t, err)
	require.NotContains(t, r.Value, strings.TrimSpace(string(data)))
}
