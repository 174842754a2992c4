package mcphost

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/tool"
)

// answeredWithin is how long the call after a hung one may take at most:
// the spec's "answered within 15 s of the timeout".
const answeredWithin = 15 * time.Second

// A stdio server that blocks in a call (the rogue server's hang tool stops
// it reading and writing, like a single-threaded server asleep in a tool)
// is pinged at once after the call timed out or was cancelled; it does not
// answer within 2 s, so it is restarted (counted, logged with the reason),
// and the call made right after is answered by the new process, within 15 s
// of the timeout, instead of timing out in turn. Periodic pings play no
// part: their interval is the default 30 s.
func TestHungCallRestartsTheServerAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// abandon calls the hang tool and ends the call without its answer.
		abandon func(t *testing.T, th *testHost)
		reason  string
	}{
		{
			name: "timed out",
			abandon: func(t *testing.T, th *testHost) {
				res, _, err := th.call(ctxT(t), "mcp__rogue__hang", `{}`)
				require.NoError(t, err)
				require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "timed out after 300ms"), res)
			},
			reason: "hung: did not answer a ping within 2s after a call timed out",
		},
		{
			// Only one check runs at a time: the second call's end finds
			// it running.
			name: "two timed out together",
			abandon: func(t *testing.T, th *testHost) {
				errs := make(chan error, 2)
				for range 2 {
					go func() {
						res, _, err := th.call(ctxT(t), "mcp__rogue__hang", `{}`)
						if err == nil && res.Error != "timed out after 300ms" {
							err = errors.New("unexpected result: " + res.Error)
						}
						errs <- err
					}()
				}
				require.NoError(t, <-errs)
				require.NoError(t, <-errs)
			},
			reason: "hung: did not answer a ping within 2s after a call timed out",
		},
		{
			name: "cancelled",
			abandon: func(t *testing.T, th *testHost) {
				ctx, cancel := context.WithCancelCause(ctxT(t))
				tc := &tool.Context{CallID: "c1", EmitFunc: func(p tool.Progress) error {
					if p.Message == "hanging" { // the server is in the call
						cancel(errors.New("cancelled: by request"))
					}
					return nil
				}}
				_, err := th.tool("mcp__rogue__hang").Execute(ctx, []byte(`{}`), tc)
				require.EqualError(t, err, "cancelled: by request")
			},
			reason: "hung: did not answer a ping within 2s after a call was cancelled",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := rogueDef(t, "rogue")
			if tc.name != "cancelled" {
				d.Timeout = 300 * time.Millisecond
			}
			th := startHost(t, Config{}, d)
			first := th.waitState("rogue", StateUp)
			require.NotZero(t, first.PID)

			tc.abandon(t, th)
			ctx, cancel := context.WithTimeout(context.Background(), answeredWithin)
			defer cancel()
			res, _, err := th.call(ctx, "mcp__rogue__env", `{"name":"PLAIN"}`)
			require.NoError(t, err, "answered within %s of the end of the hung call (logs:\n%s)", answeredWithin, th.logs.String())
			require.True(t, res.OK, "%+v (logs:\n%s)", res, th.logs.String())
			require.Equal(t, "PLAIN is not set", res.Value)

			st := th.status("rogue")
			require.Equal(t, StateUp, st.State)
			require.NotEqual(t, first.PID, st.PID, "a new process answered")
			require.Equal(t, 1, st.Restarts, "the restart is counted")
			logs := th.logs.String()
			require.Contains(t, logs, "MCP server stopped; restarting")
			require.Contains(t, logs, tc.reason)
			require.NotContains(t, logs, "pings in a row", "not found by the periodic pings")
			require.Equal(t, 1, strings.Count(logs, "MCP server pinged after a call"), "one check")
		})
	}
}

// A call that times out on a server that still answers (the Go SDK serves
// calls concurrently, so the rogue server's sleep tool leaves it free) is
// followed by a ping, which it answers: it keeps its process, the check
// counts no restart, and the next call goes through.
func TestTimedOutCallOnAServerThatAnswersKeepsIt(t *testing.T) {
	t.Parallel()
	d := rogueDef(t, "rogue")
	d.Timeout = 300 * time.Millisecond
	th := startHost(t, Config{}, d)
	first := th.waitState("rogue", StateUp)

	res, _, err := th.call(ctxT(t), "mcp__rogue__sleep", `{"ms":20000}`)
	require.NoError(t, err)
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "timed out after 300ms"), res)
	require.Eventually(t, func() bool {
		return strings.Contains(th.logs.String(), "MCP server answered the ping after a call timed out")
	}, 30*time.Second, 10*time.Millisecond, "the server was pinged and answered (logs:\n%s)", th.logs.String())

	res, _, err = th.call(ctxT(t), "mcp__rogue__sleep", `{"ms":1}`)
	require.NoError(t, err)
	require.Equal(t, "slept 1ms", res.Value)
	st := th.status("rogue")
	require.Equal(t, StateUp, st.State)
	require.Equal(t, first.PID, st.PID, "the same process")
	require.Zero(t, st.Restarts)
	require.NotContains(t, th.logs.String(), "hung:")
}

// HungPingTimeout defaults to 2 s and, like the other durations, must not
// be negative.
func TestHungPingTimeoutConfig(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2*time.Second, Config{}.withDefaults().HungPingTimeout)
	_, err := New(Config{HungPingTimeout: -time.Second}, nil)
	require.EqualError(t, err, "mcphost: HungPingTimeout must not be negative, got -1s")
}
