package file_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/scoped/reads"
	"github.com/capstanhq/capstan/internal/tools/file"
	"github.com/capstanhq/capstan/tool"
)

// TestStaleWriteAcrossWorkers: a read on one worker is checked by a write on
// another, through the shared JetStream read-record bucket; other sessions
// are not affected.
func TestStaleWriteAcrossWorkers(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	ctx := context.Background()
	kvA, err := bustest.Conn(t, url, "").KV(ctx, bus.ReadRecords)
	require.NoError(t, err)
	kvB, err := bustest.Conn(t, url, "").KV(ctx, bus.ReadRecords)
	require.NoError(t, err)

	e := newEnv(t)
	abs := e.write(t, "a.txt", "old")
	e.touch(t, "a.txt", readAt)
	workerA := *e.tc
	workerA.Reads = reads.New(kvA, "cli:s")
	workerB := *e.tc
	workerB.Reads = reads.New(kvB, "cli:s")
	otherSession := *e.tc
	otherSession.Reads = reads.New(kvB, "cli:other")
	run := func(tc *tool.Context, tl tool.Tool, args string) tool.Result {
		res, err := tl.Execute(ctx, []byte(args), tc)
		require.NoError(t, err)
		return res
	}

	require.True(t, run(&workerA, file.ReadFile(), `{"path":"a.txt"}`).OK)
	e.touch(t, "a.txt", changedAt)
	require.Equal(t, tool.Fail(tool.CodeStaleWrite, "STALE_WRITE: "+abs+
		" was read at 2026-01-02T03:04:05.123456789Z but modified externally at 2026-01-02T04:00:00Z. Re-read the file before writing."),
		run(&workerB, file.PatchFile(), `{"path":"a.txt","old_text":"old","new_text":"new"}`))
	require.Equal(t, tool.OK("Patched "+abs), run(&otherSession, file.PatchFile(), `{"path":"a.txt","old_text":"old","new_text":"mid"}`),
		"another session never read the file")

	require.True(t, run(&workerB, file.ReadFile(), `{"path":"a.txt"}`).OK)
	require.Equal(t, tool.OK("Written 3 bytes to "+abs), run(&workerA, file.WriteFile(), `{"path":"a.txt","content":"new"}`))
	require.Equal(t, tool.OK("Patched "+abs), run(&workerB, file.PatchFile(), `{"path":"a.txt","old_text":"new","new_text":"end"}`),
		"worker A's write refreshed the shared record")
	require.Equal(t, "end", e.read(t, "a.txt"))
}
