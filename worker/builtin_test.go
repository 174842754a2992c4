package worker_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/tools/builtin"
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
