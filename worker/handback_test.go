package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// A result publish under way when the shutdown grace ends gives up then,
// not at the end of its 10 s operation timeout (nor at the end of the
// shutdown margin): the call is handed back unanswered and a worker started
// later answers it. AckWait is 5 minutes, so only a hand-back (a nak) brings
// the call back within the test: an unacknowledged call would wait AckWait.
func TestResultPublishGivesUpAtTheEndOfTheGrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	logs := &syncBuffer{}
	const grace = 500 * time.Millisecond
	w, err := worker.New(worker.Config{
		NATSURL: e.url, NATSCreds: bustest.Creds(e.url), WorkerID: "held",
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), AckWait: 5 * time.Minute, ShutdownGrace: grace,
	}, echo.Tool())
	require.NoError(t, err)
	started, ended := worker.HoldResultPublishes(w)
	stop := e.runStoppable(w)
	t.Cleanup(stop)

	e.call(protocol.Call{CallID: "held1", Tool: "echo", Args: json.RawMessage(`{"text":"late"}`)})
	select {
	case id := <-started:
		require.Equal(t, "held1", id)
	case <-time.After(30 * time.Second):
		t.Fatal("the result publish did not start")
	}

	// Stop the worker with the publish waiting: the grace passes (the call
	// does not finish), then the publish must give up.
	begin := time.Now()
	stop()
	took := time.Since(begin)
	t.Logf("the worker stopped %s after it was told to", took)
	// A hang guard only (the grace is 0.5 s, the operation timeout 10 s,
	// the margin 3 s); what happened is asserted below.
	require.Less(t, took, 5*time.Second, "the worker took %s to stop\n%s", took, logs.String())

	var held worker.HeldPublish
	select {
	case held = <-ended:
	default:
		t.Fatalf("the held publish had not ended when the worker stopped\n%s", logs.String())
	}
	require.Equal(t, "held1", held.CallID)
	require.ErrorIs(t, held.Err, context.Canceled, "cancelled, not its deadline passed")
	require.True(t, held.GraceOver, "the grace was over when the publish gave up")
	require.False(t, held.MarginOver, "the publish gave up with the grace, not with the shutdown margin")
	require.Empty(t, started, "one attempt: none after the grace")
	require.Empty(t, ended)
	require.Contains(t, logs.String(), `"msg":"result not published before shutdown; call handed back","call_id":"held1"`)

	// Handed back: no result, the call still in the work queue (not
	// acked), and redelivered at once to the next worker, which answers it.
	require.Zero(t, e.resultsOn("held1", "held1"))
	n, err := e.conn.StreamMsgs(ctxT(t), e.names.CallsStream())
	require.NoError(t, err)
	require.Equal(t, uint64(1), n, "the call is not acked")
	e.start(worker.Config{WorkerID: "after", AckWait: 5 * time.Minute})
	r := e.result("held1", "held1")
	require.True(t, r.OK, r.Error)
	require.Equal(t, "late", r.Value)
	require.Equal(t, "after", r.WorkerID)
	require.Equal(t, 2, r.Deliveries)
	e.waitCallsDrained()
	require.Equal(t, 1, e.resultsOn("held1", "held1"))
}
