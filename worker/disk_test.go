package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// smallFS mounts a tmpfs of size bytes on a fresh directory for the test
// (root only; the test skips with the reason elsewhere).
func smallFS(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a small tmpfs for the test (needs root): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestLowDiskHandsBackCallsThatNeedDisk (security.md section 1, "Disk"):
// while the data directory's file system has less free space than
// MinFreeDisk, a call that starts a process is handed back and /readyz
// says why, a call that needs no disk is answered, and once space is back
// the held call runs, answered once.
func TestLowDiskHandsBackCallsThatNeedDisk(t *testing.T) {
	t.Parallel()
	data := smallFS(t, 8<<20)
	e := newEnv(t)
	e.putPersonality("disk", "id: disk\nprocess: {allow: [echo]}\n")
	w := e.start(worker.Config{Concurrency: 4, DataDir: data, MinFreeDisk: 4 << 20}, builtin.All()...)

	ready := func() worker.Readiness {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return w.Readiness(ctx)
	}
	require.Equal(t, "ok", ready().Checks["disk"])

	// Leave less than 4 MiB free.
	filler := filepath.Join(data, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, 6<<20), 0o600))
	r := ready()
	require.Equal(t, "not_ready", r.Status)
	require.Regexp(t, `^disk: [0-9.]+ [KM]iB free, below CAPSTAN_MIN_FREE_DISK \(4\.0 MiB\)$`, r.Checks["disk"])

	e.call(protocol.Call{CallID: "proc", Tool: "run_process", PersonalityID: "disk", Args: json.RawMessage(`{"binary":"echo","args":["held"]}`)})
	e.call(protocol.Call{CallID: "plain", Tool: "echo", PersonalityID: "disk", Args: json.RawMessage(`{"text":"runs"}`)})
	plain := e.result("plain", "plain")
	require.True(t, plain.OK, plain.Error)
	// The process call was handed back: its failure is recorded with the
	// reason, and it has no result.
	failures, err := e.conn.KV(ctxT(t), bus.Failures)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ent, found, err := failures.Get(ctxT(t), "proc")
		return err == nil && found && strings.Contains(string(ent.Value), "below CAPSTAN_MIN_FREE_DISK")
	}, 20*time.Second, 10*time.Millisecond, "the hand-back's reason is recorded")
	require.Zero(t, e.resultsOn("proc", "proc"))

	// Space is back: the call runs on its redelivery.
	require.NoError(t, os.Remove(filler))
	proc := e.result("proc", "proc")
	require.True(t, proc.OK, proc.Error)
	require.Contains(t, proc.Value, "held")
	require.Equal(t, 1, e.resultsOn("proc", "proc"))
	require.Equal(t, "ok", ready().Checks["disk"])
}
