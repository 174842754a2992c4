package worker_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// TestStaleWriteAcrossWorkers reads a file on one worker and writes it on
// another: the read record lives in the shared KV store, not in a worker.
func TestStaleWriteAcrossWorkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "main.go")
	require.NoError(t, os.WriteFile(file, []byte("package main\n"), 0o600))
	e.putPersonality("coder", fmt.Sprintf("id: coder\nfs_reach:\n  workdir: %q\n  read: [\"${WORKDIR}\"]\n  write: [\"${WORKDIR}\"]\n", dir))
	call := func(id, toolName, args string) protocol.Result {
		e.call(protocol.Call{CallID: id, Tool: toolName, PersonalityID: "coder", SessionKey: "cli:repo", Args: json.RawMessage(args)})
		return e.result(id, id)
	}

	_, stopA := e.startStoppable(worker.Config{WorkerID: "a"}, builtin.All()...)
	r := call("read1", "read_file", `{"path":"main.go"}`)
	require.True(t, r.OK, r.Error)
	require.Contains(t, r.Value, "["+file+"] 2 lines")
	stopA()

	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(file, later, later))
	e.start(worker.Config{WorkerID: "b"}, builtin.All()...)
	r = call("write1", "write_file", `{"path":"main.go","content":"package other\n"}`)
	require.Equal(t, protocol.CodeStaleWrite, r.Code)
	require.Regexp(t, `^STALE_WRITE: `+regexp.QuoteMeta(file)+` was read at \S+ but modified externally at \S+\. Re-read the file before writing\.$`, r.Error)
	require.Equal(t, "b", r.WorkerID)

	// Re-reading refreshes the record; the write then succeeds.
	require.True(t, call("read2", "read_file", `{"path":"main.go"}`).OK)
	r = call("write2", "write_file", `{"path":"main.go","content":"package other\n"}`)
	require.True(t, r.OK, r.Error)
	require.Equal(t, "Written 14 bytes to "+file, r.Value)
}

func TestFileToolWithoutReach(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // the default personality has no fs_reach
	e.start(worker.Config{}, builtin.All()...)
	e.call(protocol.Call{CallID: "nr", Tool: "read_file", Args: json.RawMessage(`{"path":"/etc/hostname"}`)})
	r := e.result("nr", "nr")
	require.Equal(t, protocol.CodeNotAvailable, r.Code)
	require.Equal(t, "Filesystem capability not configured for this personality.", r.Error)
}

func TestStaleWriteDeletedFileCanBeReReadAndWritten(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "gone.txt")
	require.NoError(t, os.WriteFile(file, []byte("x\n"), 0o600))
	e.putPersonality("coder", fmt.Sprintf("id: coder\nfs_reach:\n  workdir: %q\n  read: [\"${WORKDIR}\"]\n  write: [\"${WORKDIR}\"]\n", dir))
	e.start(worker.Config{}, builtin.All()...)
	call := func(id, toolName, args string) protocol.Result {
		e.call(protocol.Call{CallID: id, Tool: toolName, PersonalityID: "coder", SessionKey: "cli:x", Args: json.RawMessage(args)})
		return e.result(id, id)
	}
	require.True(t, call("d1", "read_file", `{"path":"gone.txt"}`).OK)
	require.NoError(t, os.Remove(file))
	r := call("d2", "write_file", `{"path":"gone.txt","content":"y"}`)
	require.Regexp(t, `^STALE_WRITE: .* was read at \S+ but no longer exists on disk\. Re-read the file before writing\.$`, r.Error)
	r = call("d3", "read_file", `{"path":"gone.txt"}`)
	require.Equal(t, "Cannot read "+file+": file not found", r.Error)
	r = call("d4", "write_file", `{"path":"gone.txt","content":"y"}`)
	require.True(t, r.OK, "after the re-read the write goes ahead: %s", r.Error)

	// Seen missing, then created by someone else: stale.
	other := filepath.Join(dir, "new.txt")
	require.Equal(t, "Cannot read "+other+": file not found", call("d5", "read_file", `{"path":"new.txt"}`).Error)
	require.NoError(t, os.WriteFile(other, []byte("theirs"), 0o600))
	r = call("d6", "write_file", `{"path":"new.txt","content":"mine"}`)
	require.Regexp(t, `^STALE_WRITE: .*new\.txt did not exist when it was read but was created externally at \S+\. Re-read the file before writing\.$`, r.Error)
}

// lockedBuffer is an io.Writer safe for the worker's concurrent logging.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestTerminalConfinedToThePersonality runs terminal through a worker: the
// shell works in the personality's reach and, where the kernel has
// Landlock, reaches nothing else; TCP follows the personality's network
// allow list. The worker reports its sandbox once at start.
func TestTerminalConfinedToThePersonality(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("inside\n"), 0o600))
	outside := filepath.Join(t.TempDir(), "secret.txt")
	require.NoError(t, os.WriteFile(outside, []byte("outside\n"), 0o600))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello through the proxy") }))
	t.Cleanup(srv.Close)
	port := strings.TrimPrefix(srv.URL, "http://127.0.0.1:")
	reach := fmt.Sprintf("fs_reach:\n  workdir: %q\n  read: [\"${WORKDIR}\"]\n  write: [\"${WORKDIR}\"]\n", dir)
	e.putPersonality("coder", "id: coder\n"+reach)
	e.putPersonality("online", "id: online\n"+reach+"safety:\n  network:\n    allow: [\"127.0.0.1:*\"]\n    allow_private_urls: true\n")
	var logs lockedBuffer
	e.start(worker.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, builtin.All()...)
	run := func(id, personality, command string) protocol.Result {
		args, err := json.Marshal(map[string]string{"command": command})
		require.NoError(t, err)
		e.call(protocol.Call{CallID: id, Tool: "terminal", PersonalityID: personality, Args: args})
		return e.result(id, id)
	}

	require.Equal(t, 1, strings.Count(logs.String(), `"msg":"process sandbox"`), logs.String())
	require.Contains(t, logs.String(), fmt.Sprintf(`"landlock_abi":%d`, process.Sandbox().LandlockABI))

	r := run("t1", "coder", "pwd; cat notes.txt; echo made > out.txt")
	require.True(t, r.OK, r.Error)
	require.Contains(t, r.Value, dir+"\ninside\n")
	require.FileExists(t, filepath.Join(dir, "out.txt"))

	r = run("t2", "coder", "cd /etc")
	require.True(t, r.OK, "cd inside the shell is not the working dir: %s", r.Error)
	e.call(protocol.Call{CallID: "t3", Tool: "terminal", PersonalityID: "coder", Args: json.RawMessage(`{"command":"pwd","cwd":"/etc"}`)})
	r = e.result("t3", "t3")
	require.Equal(t, "PATH_NOT_REACHABLE: read not permitted for /etc", r.Error)

	sb := process.Sandbox()
	if !sb.Confined {
		t.Skipf("children are not confined on this machine (%s): the Landlock checks are skipped", sb.Reason)
	}
	r = run("t4", "coder", "cat "+outside)
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Contains(t, r.Error, outside+": Permission denied")
	dial := "exec 3<>/dev/tcp/127.0.0.1/" + port + " && echo connected"
	r = run("t5", "coder", dial)
	require.Equal(t, protocol.CodeExecutionFailed, r.Code, "no network in the personality: no TCP")
	require.Contains(t, r.Error, "socket: Operation not permitted", "no IP socket at all without network")
	if !sb.NetworkNamespace {
		t.Skipf("no network namespace on this machine (%s): the egress checks are skipped", sb.Reason)
	}
	r = run("t6", "online", dial)
	require.Equal(t, protocol.CodeExecutionFailed, r.Code, "with network, still no direct TCP: only the egress proxy")
	require.NotContains(t, r.Error, "connected")
	r = run("t7", "online", "curl -sS "+srv.URL+"/")
	require.True(t, r.OK, r.Error)
	require.Contains(t, r.Value, "\nhello through the proxy\n")
	audit := e.tail(e.names.AuditStream(), "capstan.audit.terminal")
	r = run("t8", "online", "curl -sS -w ' %{http_code}' http://192.0.2.1/")
	require.True(t, r.OK, r.Error)
	rec, _ := auditOn(t, audit, "t8")
	require.Equal(t, []string{"HOST_NOT_ALLOWED"}, rec.Denials, "the egress refusal is in the call's audit record")
	require.Contains(t, r.Value, "\n"+`Capstan egress: host "192.0.2.1" is not in personality network allow list 403`+"\n")
}
