package process_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

// TestStartConversation talks to a long-lived child over its pipes, as a
// hosted MCP server is talked to: line in, line out, then end of input.
func TestStartConversation(t *testing.T) {
	t.Parallel()
	r := process.New(grant("cat"), process.Reach{}, resolver, process.Config{}, nil)
	ch, err := r.Start(context.Background(), tool.Command{Binary: "cat"})
	require.NoError(t, err)
	out := bufio.NewReader(ch.Stdout)
	for _, line := range []string{"hello\n", "world\n"} {
		_, err := io.WriteString(ch.Stdin, line)
		require.NoError(t, err)
		got, err := out.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, line, got)
	}
	require.NoError(t, ch.Stdin.Close())
	res, err := ch.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	_, err = out.ReadString('\n')
	require.ErrorIs(t, err, io.EOF)
	require.NoError(t, ch.Stdout.Close())
	require.NoError(t, ch.Stderr.Close())
	again, err := ch.Wait()
	require.NoError(t, err, "Wait returns the same again")
	require.Equal(t, res, again)
}

func TestStartKillAndCancel(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	r := process.New(grant(exe), process.Reach{}, resolver, process.Config{}, nil)

	ch, err := r.Start(context.Background(), tool.Command{Binary: exe, Env: map[string]string{helperEnv: "sleep"}})
	require.NoError(t, err)
	require.NoError(t, ch.Kill())
	res, err := ch.Wait()
	require.EqualError(t, err, "process: killed")
	require.Equal(t, -1, res.ExitCode)
	closeChild(t, ch)

	ctx, cancel := context.WithCancelCause(context.Background())
	ch, err = r.Start(ctx, tool.Command{Binary: exe, Env: map[string]string{helperEnv: "sleep"}})
	require.NoError(t, err)
	cancel(errCallCancelled)
	_, err = ch.Wait()
	require.ErrorIs(t, err, errCallCancelled)
	closeChild(t, ch)
}

func closeChild(t *testing.T, ch *process.Child) {
	t.Helper()
	for _, c := range []io.Closer{ch.Stdin, ch.Stdout, ch.Stderr} {
		_ = c.Close()
	}
}

// TestKillAfterWaitLeavesTheNextCallAlone: once a child has ended, its
// cgroup goes back to the pool and may hold the next call's child; a late
// Kill of the first (a hosted MCP server's supervisor does that) must not
// reach it.
func TestKillAfterWaitLeavesTheNextCallAlone(t *testing.T) {
	t.Parallel()
	r := process.New(grant("cat"), process.Reach{}, resolver, process.Config{}, nil)
	first, err := r.Start(context.Background(), tool.Command{Binary: "cat"})
	require.NoError(t, err)
	require.NoError(t, first.Stdin.Close())
	_, err = first.Wait()
	require.NoError(t, err)
	closeChild(t, first)

	next, err := r.Start(context.Background(), tool.Command{Binary: "cat"})
	require.NoError(t, err)
	defer closeChild(t, next)
	require.NoError(t, first.Kill(), "a late Kill is a no-op")
	out := bufio.NewReader(next.Stdout)
	_, err = io.WriteString(next.Stdin, "still here\n")
	require.NoError(t, err)
	got, err := out.ReadString('\n')
	require.NoError(t, err, "the next call's child is alive")
	require.Equal(t, "still here\n", got)
	require.NoError(t, next.Stdin.Close())
	res, err := next.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
}
