package worker_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// A call's slot is free once its result is stored: with one slot, a second
// call is answered while the first call's audit record still waits to be
// stored. Neither call is acked (both stay in the work queue) until its
// audit record is stored.
func TestSlotIsFreeOnceTheResultIsStoredAndTheAckWaitsForTheAuditRecord(t *testing.T) {
	e := newEnv(t)
	w, err := worker.New(worker.Config{
		NATSURL: e.url, NATSCreds: bustest.Creds(e.url), Logger: quietLogger(),
		Concurrency: 1, ShutdownGrace: 2 * time.Second,
	}, echo.Tool())
	require.NoError(t, err)
	release := worker.HoldAuditRecords(w)
	e.run(w)
	t.Cleanup(release) // runs before the worker is stopped: cleanups run last in, first out
	audits := e.tail(e.names.AuditStream(), e.names.AuditFilter())

	e.call(protocol.Call{CallID: "first", Tool: "echo", Args: json.RawMessage(`{"text":"one"}`)})
	require.Equal(t, "one", e.result("first", "first").Value)
	e.call(protocol.Call{CallID: "second", Tool: "echo", Args: json.RawMessage(`{"text":"two"}`)})
	require.Equal(t, "two", e.result("second", "second").Value, "answered in the one slot while the first call's audit record is held")

	n, err := e.conn.StreamMsgs(ctxT(t), e.names.CallsStream())
	require.NoError(t, err)
	require.Equal(t, uint64(2), n, "no call is acked before its audit record is stored")
	select {
	case m := <-audits:
		t.Fatalf("an audit message was stored while held: %s", m.Data)
	default:
	}

	release()
	rec, _ := auditOn(t, audits, "first")
	require.True(t, rec.OK)
	rec, _ = auditOn(t, audits, "second")
	require.True(t, rec.OK)
	e.waitCallsDrained()
}
