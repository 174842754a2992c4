package worker_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry/telemetrytest"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/worker"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestResultPublishPermissionDeniedIsDeadLetteredAtOnce: a worker whose NATS
// user may not publish the results of one personality (deploy/nats's worker
// user, less <p>.result.denied.>) gets its result refused by the server. The
// refusal is not retried: the call is dead-lettered with the reason naming
// the refused publish, acked (delivered once, gone from the calls stream),
// audited as execution_failed, no result is stored, and the only slot is
// free again for a call of another personality, answered normally. The
// failure is counted once in capstan.publish.failures (result,
// permission_denied). Not parallel: the deployment configuration takes its
// users' passwords from the environment.
func TestResultPublishPermissionDeniedIsDeadLetteredAtOnce(t *testing.T) {
	for _, u := range []string{"worker", "operator", "backend", "approver", "tenant-researcher", "tenant-support"} {
		t.Setenv("CAPSTAN_NATS_"+strings.ToUpper(strings.ReplaceAll(u, "-", "_"))+"_PASSWORD", u+"-test-password")
	}
	const adminPassword = "admin-test-password"
	url := bustest.ConfigServer(t, filepath.Join("..", "deploy", "nats", "nats-1.conf"), func(o *server.Options) {
		found := false
		for _, u := range o.Users {
			if u.Username == "worker" {
				// auth.conf's names assume the prefix "capstan".
				u.Permissions.Publish.Deny = append(u.Permissions.Publish.Deny, "capstan.result.denied.>")
				found = true
			}
		}
		require.True(t, found, "deploy/nats has a worker user")
		// The test's own connection: an administrator added for the
		// occasion (auth.conf), which reads the calls consumer, the dead
		// letters and the audit stream.
		o.Users = append(o.Users, &server.User{Username: "admin", Password: adminPassword})
	})
	adminURL := bustest.UserURL(url, "admin", adminPassword)
	c, err := bus.Connect(ctxT(t), bus.Config{URL: adminURL, Name: t.Name()})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	e := &env{t: t, url: adminURL, conn: c, names: c.Names()}
	require.Equal(t, "capstan", e.names.Prefix())
	e.putPersonality("denied", "id: denied\n")
	e.putPersonality("allowed", "id: allowed\n")

	mp, reader := telemetrytest.Metrics(t)
	// One slot: the call of "allowed" is answered only if the refused call
	// freed it.
	w, err := worker.New(worker.Config{NATSURL: bustest.UserURL(url, "worker", "worker-test-password"), Concurrency: 1,
		Logger: quietLogger(), ShutdownGrace: 2 * time.Second, MeterProvider: mp}, echo.Tool())
	require.NoError(t, err)
	e.run(w)
	dlq := e.tail(e.names.DLQStream(), e.names.Prefix()+".dlq.>")
	audit := e.tail(e.names.AuditStream(), e.names.Prefix()+".audit.echo")

	e.call(protocol.Call{CallID: "refused", Tool: "echo", PersonalityID: "denied", Args: json.RawMessage(`{"text":"x"}`)})
	// Within recv's 30 s: a worker that retried the refusal would dead-letter
	// the call only after worker.ResultRetryLimit (1 min).
	d := recv(t, dlq)
	require.Regexp(t, `^result not publishable: publish result: bus: publish capstan\.result\.denied\.refused\.refused: `+
		`the NATS server refused this user's publish to "capstan\.result\.denied\.refused\.refused": `+
		`Permissions Violation for Publish to "capstan\.result\.denied\.refused\.refused"`, d.Header.Get(protocol.HeaderDeadReason))
	var dead protocol.Call
	require.NoError(t, json.Unmarshal(d.Data, &dead))
	require.Equal(t, "refused", dead.CallID)

	rec, _ := auditOn(t, audit, "refused")
	require.False(t, rec.OK)
	require.Equal(t, protocol.CodeExecutionFailed, rec.Code)
	require.Equal(t, "denied", rec.PersonalityID)
	require.Equal(t, 1, rec.Deliveries)
	require.Zero(t, rec.ResultBytes, "no result was published")

	// The slot is free and the worker serves the personality whose results
	// it may publish.
	e.call(protocol.Call{CallID: "served", Tool: "echo", PersonalityID: "allowed", Args: json.RawMessage(`{"text":"still serving"}`)})
	r := e.result("served", "served")
	require.True(t, r.OK, "%s: %s", r.Code, r.Error)
	require.Equal(t, "still serving", r.Value)

	// Acked, never redelivered: the calls stream (work queue) is empty, and
	// its consumer delivered each call once and waits for no ack.
	e.waitCallsDrained()
	nc, err := nats.Connect(url, nats.UserInfo("admin", adminPassword))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	// One consumer per personality (scheduling): each delivered its call
	// once and waits for no ack.
	for _, personality := range []string{"denied", "allowed"} {
		cons, err := js.Consumer(ctxT(t), e.names.CallsStream(), protocol.PersonalityConsumer("default", personality))
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			ci, err := cons.Info(ctxT(t))
			return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0
		}, 30*time.Second, 50*time.Millisecond)
		ci, err := cons.Info(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, uint64(1), ci.Delivered.Consumer, "one call of %s, one delivery", personality)
		require.Zero(t, ci.NumRedelivered)
	}

	require.Zero(t, e.resultsOn("refused", "refused"), "no result stored for the refused call")
	dead2, err := e.conn.Messages(ctxT(t), e.names.DLQStream(), e.names.Prefix()+".dlq.>")
	require.NoError(t, err)
	require.Len(t, dead2, 1, "dead-lettered once")

	code, rd := readiness(t, w.Handler())
	require.Equal(t, http.StatusOK, code, "%+v", rd)
	require.Equal(t, "ok", rd.Checks["slots"])
	// Counted once, by kind and reason: not retried; the dead letter went out.
	require.Equal(t, 1.0, publishFailures(t, reader, "result", "permission_denied"))
	require.Zero(t, publishFailures(t, reader, "result", "unavailable"))
	require.Zero(t, publishFailures(t, reader, "dead_letter", "permission_denied"))
}
