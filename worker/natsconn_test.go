package worker_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/capstanhq/capstan/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// TestWorkerUsesTheCallersConnection runs a worker on a NATS connection the
// test opened: it serves calls on it, starts no server of its own, and
// leaves the connection open when it stops.
func TestWorkerUsesTheCallersConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	opt, err := nats.NkeyOptionFromSeed(bustest.Creds(e.url))
	require.NoError(t, err)
	nc, err := nats.Connect(e.url, opt)
	require.NoError(t, err)
	defer nc.Close()

	_, err = worker.New(worker.Config{NATSConn: nc, NATSURL: e.url}, echo.Tool())
	require.EqualError(t, err, "Config.NATSConn is set: Config.NATSURL and Config.NATSCreds must be empty")

	w, err := worker.New(worker.Config{NATSConn: nc, WorkerID: "own-conn", Logger: quietLogger(), ShutdownGrace: time.Millisecond}, echo.Tool())
	require.NoError(t, err)
	stop := workertest.Start(t, w, nil)
	_, running := w.Embedded()
	require.False(t, running)
	e.call(protocol.Call{CallID: "oc1", Tool: "echo", Args: json.RawMessage(`{"text":"mine"}`)})
	r := e.result("oc1", "oc1")
	require.True(t, r.OK, r.Error)
	require.Equal(t, "own-conn", r.WorkerID)
	stop() // fails the test if Run returned an error
	require.True(t, nc.IsConnected(), "the caller's connection stays open")
}
