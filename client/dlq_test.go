package client_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// startWorkerWith runs a real worker with cfg until the test ends.
func startWorkerWith(t *testing.T, cfg worker.Config) {
	t.Helper()
	cfg.Logger = quietLog()
	// The dead-letter tests hold a call's lease to make every delivery
	// fail; only calls of exclusive tools take one, so echo is exclusive
	// here.
	tools := builtin.All()
	for i := range tools {
		if tools[i].Name == "echo" {
			tools[i].SideEffects = tool.SideEffectsExclusive
		}
	}
	w, err := worker.New(cfg, tools...)
	require.NoError(t, err)
	workertest.Run(t, w, nil)
}

func TestDeadLettersAndRedrive(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	conn := bustest.Conn(t, url, "")
	personalities, err := conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	_, err = personalities.Put(ctxT(t), "default", []byte("id: default\n"))
	require.NoError(t, err)
	// A phantom worker holds the lease of "dead1": every delivery is handed
	// back, and after MaxDeliver (1) the call is abandoned.
	leases, err := conn.KV(ctxT(t), bus.Leases)
	require.NoError(t, err)
	_, err = leases.Create(ctxT(t), "dead1", []byte("ghost"), 0)
	require.NoError(t, err)
	startWorkerWith(t, worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), WorkerID: "w1", MaxDeliver: 1})
	c := newClient(t, url, "")

	empty, err := c.DeadLetters(ctxT(t))
	require.NoError(t, err)
	require.Empty(t, empty)

	call := client.Call{CallID: "dead1", BatchID: "b1", Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"again"}`)}
	require.NoError(t, c.Submit(ctxT(t), &call))
	r, err := c.Await(ctxT(t), "b1", "dead1")
	require.NoError(t, err)
	require.Equal(t, "call abandoned after 1 deliveries: call lease held by another worker", r.Error)

	var letters []client.DeadLetter
	require.Eventually(t, func() bool {
		letters, err = c.DeadLettersOf(ctxT(t), "dead1")
		return err == nil && len(letters) == 1
	}, 30*time.Second, 20*time.Millisecond)
	d := letters[0]
	require.Equal(t, "echo", d.Tool)
	require.Equal(t, "dead1", d.CallID)
	require.Equal(t, "call lease held by another worker", d.Reason)
	require.Equal(t, 1, d.Deliveries)
	require.Equal(t, "capstan.call.default.default.echo", d.OriginalSubject)
	require.WithinDuration(t, time.Now(), d.DeadAt, time.Minute)
	require.JSONEq(t, `{"call_id":"dead1","batch_id":"b1","tool":"echo","session_id":"s","personality_id":"default","args":{"text":"again"}}`, string(d.Body))

	_, err = c.Redrive(ctxT(t), "nosuch")
	require.ErrorIs(t, err, client.ErrNoDeadLetter)

	// Today's policy no longer permits echo: the redriven call goes through
	// every gate again and is refused by the toolset gate.
	_, err = personalities.Put(ctxT(t), "default", []byte("id: default\ntoolset: [read_file]\n"))
	require.NoError(t, err)
	require.NoError(t, leases.Delete(ctxT(t), "dead1"))
	subject, err := c.Redrive(ctxT(t), "dead1")
	require.NoError(t, err)
	require.Equal(t, "capstan.call.default.default.echo", subject)
	require.Eventually(t, func() bool {
		r, found, err := c.Result(ctxT(t), "dead1")
		return err == nil && found && r.Error == "Tool echo is not permitted for this personality"
	}, 30*time.Second, 20*time.Millisecond, "the redriven call's result replaces the abandonment result")
	letters, err = c.DeadLettersOf(ctxT(t), "dead1")
	require.NoError(t, err)
	require.Empty(t, letters, "a redriven dead letter leaves the DLQ")

	_, err = c.Redrive(ctxT(t), "dead1")
	require.ErrorIs(t, err, client.ErrNoDeadLetter, "a dead letter is redriven once")
}
