package worker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/internal/tools/memory"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ledgerTool counts its executions; the first one blocks until its context
// ends and records the cause, later ones return at once.
type ledgerTool struct {
	runs      atomic.Int32
	started   chan struct{}
	firstDone chan error
}

func newLedgerTool() *ledgerTool {
	return &ledgerTool{started: make(chan struct{}, 16), firstDone: make(chan error, 1)}
}

func (l *ledgerTool) tool() tool.Tool {
	return tool.Tool{Name: "ledger", Description: "counts executions", Execute: func(ctx context.Context, _ json.RawMessage, _ *tool.Context) (tool.Result, error) {
		n := l.runs.Add(1)
		l.started <- struct{}{}
		if n == 1 {
			<-ctx.Done()
			l.firstDone <- context.Cause(ctx)
			return tool.OK("first"), nil
		}
		return tool.OK("run " + string(rune('0'+n))), nil
	}}
}

// holdTool is an exclusive tool, "hold", whose calls run until the test
// releases them (or until their context ends); it counts its executions.
type holdTool struct {
	runs    atomic.Int32
	started chan struct{}
	release chan struct{}
}

func newHoldTool() *holdTool {
	return &holdTool{started: make(chan struct{}, 4), release: make(chan struct{})}
}

func (h *holdTool) tool() tool.Tool {
	return tool.Tool{Name: "hold", Description: "runs until released", SideEffects: tool.SideEffectsExclusive,
		Execute: func(ctx context.Context, _ json.RawMessage, _ *tool.Context) (tool.Result, error) {
			h.runs.Add(1)
			h.started <- struct{}{}
			select {
			case <-h.release:
				return tool.OK("released"), nil
			case <-ctx.Done():
				return tool.Result{}, context.Cause(ctx)
			}
		}}
}

// waitStarted waits until a call of the tool has started.
func (h *holdTool) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-h.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not start")
	}
}

func TestLeaseLostMidCallIsNeitherAnsweredNorAcked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lt := newLedgerTool()
	e.start(worker.Config{AckWait: 3 * time.Second}, lt.tool())
	leases, err := e.conn.KV(ctxT(t), bus.Leases)
	require.NoError(t, err)

	e.call(protocol.Call{CallID: "stolen", Tool: "ledger"})
	<-lt.started
	// Another worker takes the call over (as after a stall past the lease
	// TTL): the first run is cancelled at the next heartbeat and publishes
	// nothing.
	_, err = leases.Put(ctxT(t), "stolen", []byte("thief"))
	require.NoError(t, err)
	select {
	case cause := <-lt.firstDone:
		require.ErrorContains(t, cause, "call lease lost to another worker")
	case <-time.After(30 * time.Second):
		t.Fatal("the first run was not cancelled after its lease was lost")
	}
	require.Zero(t, e.resultsOn("stolen", "stolen"))
	// The thief goes away without answering: the call is redelivered after
	// AckWait and answered once.
	require.NoError(t, leases.Delete(ctxT(t), "stolen"))
	r := e.result("stolen", "stolen")
	require.True(t, r.OK, r.Error)
	require.Equal(t, "run 2", r.Value)
	require.Equal(t, 2, r.Deliveries)
	e.waitCallsDrained()
	require.Equal(t, 1, e.resultsOn("stolen", "stolen"))
	require.EqualValues(t, 2, lt.runs.Load())
}

func TestRedeliveredCallWithStoredResultIsNotRunAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A worker published the result of "done1" and died before recording
	// completion and acking: the result is stored, the call is pending with
	// one delivery behind it.
	cons, err := e.conn.PoolConsumer(ctxT(t), "default", 5, 3*time.Second)
	require.NoError(t, err)
	e.call(protocol.Call{CallID: "done1", Tool: "ledger"})
	got, err := cons.Fetch(ctxT(t), 1, 5*time.Second, func(m *bus.Msg) { require.NoError(t, m.Nak(0)) })
	require.NoError(t, err)
	require.Equal(t, 1, got)
	res, _ := json.Marshal(protocol.Result{CallID: "done1", BatchID: "done1", Tool: "ledger", OK: true, Value: "from the dead worker"})
	_, err = e.conn.Publish(ctxT(t), "capstan.result.default.done1.done1", res, bus.Header{protocol.HeaderProtocol: {protocol.Version}}, protocol.ResultMsgID("done1"))
	require.NoError(t, err)

	lt := newLedgerTool()
	e.start(worker.Config{AckWait: 3 * time.Second}, lt.tool())
	e.waitCallsDrained()
	require.Zero(t, lt.runs.Load(), "a call whose result is stored must not run again")
	require.Equal(t, 1, e.resultsOn("done1", "done1"))
	require.Equal(t, "from the dead worker", e.result("done1", "done1").Value)
}

// poison is a structured value that panics when the worker encodes it: a
// fault in the worker's own handling, not in the tool.
type poison struct{}

func (poison) MarshalJSON() ([]byte, error) { panic("poisoned encoder") }

func TestPoisonCallIsDeadLetteredAndWorkerKeepsServing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var runs atomic.Int32
	poisonTool := tool.Tool{Name: "poison", Description: "returns an unencodable result", Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
		runs.Add(1)
		return tool.Result{OK: true, Value: "v", Structured: map[string]any{"x": poison{}}}, nil
	}}
	dlq := e.tail(e.names.DLQStream(), "capstan.dlq.>")
	e.start(worker.Config{MaxDeliver: 2}, echo.Tool(), poisonTool)
	e.call(protocol.Call{CallID: "pz", Tool: "poison"})
	e.call(protocol.Call{CallID: "ok1", Tool: "echo", Args: json.RawMessage(`{"text":"served"}`)})
	require.Equal(t, "served", e.result("ok1", "ok1").Value)

	r := e.result("pz", "pz")
	require.False(t, r.OK)
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Equal(t, "call abandoned after 2 deliveries: worker panicked while handling the call: poisoned encoder", r.Error)
	m := recv(t, dlq)
	require.Equal(t, "capstan.dlq.poison", m.Subject)
	require.Equal(t, "2", m.Header.Get(protocol.HeaderDeliveries))
	require.EqualValues(t, 2, runs.Load())

	e.call(protocol.Call{CallID: "ok2", Tool: "echo", Args: json.RawMessage(`{"text":"still serving"}`)})
	require.Equal(t, "still serving", e.result("ok2", "ok2").Value)
	e.waitCallsDrained()
}

func TestAckWaitMustMatchThePool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{AckWait: 3 * time.Second})
	w, err := worker.New(worker.Config{NATSURL: e.url, NATSCreds: bustest.Creds(e.url), AckWait: 4 * time.Second, Logger: quietLogger()}, echo.Tool())
	require.NoError(t, err)
	err = w.Run(ctxT(t))
	require.ErrorContains(t, err, "ack wait is 3s, want 4s (CAPSTAN_ACK_WAIT must be the same on every worker of a pool)")
}

func TestKVUnavailableHandsTheCallBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{MaxDeliver: 2}, memory.Tools()...)
	// The storage bucket disappears under a running worker.
	auth, err := nats.NkeyOptionFromSeed(bustest.Creds(e.url))
	require.NoError(t, err)
	nc, err := nats.Connect(e.url, auth)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.NoError(t, js.DeleteStream(ctxT(t), "KV_capstan_storage"))
	e.call(protocol.Call{CallID: "kv1", Tool: "kv_set", Args: json.RawMessage(`{"key":"k","value":"v"}`)})
	r := e.result("kv1", "kv1")
	require.False(t, r.OK)
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Regexp(t, `^call abandoned after 2 deliveries: kv set: capability backend unavailable: `, r.Error,
		"a storage fault is retried and dead-lettered, never answered as the tool's failure")
	require.Equal(t, 2, r.Deliveries)
}

// TestUnrefreshableLeaseTurnsReadinessRed: the leases bucket is deleted
// under a worker (one slot, AckWait 3 s) while it runs a call of an
// exclusive tool. Deleting the bucket's stream is the simplest realistic
// fault (an operator's or an accident's change behind Capstan's back; a
// server from deploy/nats cannot have its permissions changed mid-test):
// nothing recreates the bucket while the worker runs (EnsureTopology runs
// when a component connects), every lease write then fails at once (no
// stream answers a publish on the bucket's subjects), and the calls stream
// still takes the heartbeat's InProgress, so the call is neither
// redelivered nor cancelled.
//
// /readyz stays green right after the fault, and fails its slots check,
// naming the call and the refresh's error, only once the lease has gone
// unrefreshed for longer than AckWait (counted from its last refresh). When the tool returns, its result is
// held back: the lease cannot be confirmed (a fenced refresh) before the
// publish, so the publish is retried, and /readyz names the result as
// unpublishable with the lease's error. When the bucket comes back (a
// component connects and recreates it), the worker takes the lease again
// in the new bucket and publishes the result it kept: the call is answered
// once, on delivery 1, by its only execution, its lease is released, and
// /readyz is green again.
func TestUnrefreshableLeaseTurnsReadinessRed(t *testing.T) {
	t.Parallel()
	const ackWait = 3 * time.Second
	e := newEnv(t)
	hold := newHoldTool()
	w := e.start(worker.Config{AckWait: ackWait, Concurrency: 1}, hold.tool())
	js := e.js() // connected before the fault: a raw connection ensures nothing

	leaseTaken := time.Now() // no later than the lease is taken
	e.call(protocol.Call{CallID: "held", Tool: "hold"})
	hold.waitStarted(t)
	_, found, err := e.conn.ReadKey(ctxT(t), bus.Leases, "held")
	require.NoError(t, err)
	require.True(t, found, "an exclusive call runs under a lease")

	faultAt := time.Now()
	require.NoError(t, js.DeleteStream(ctxT(t), "KV_"+e.names.LeasesBucket()))
	code, rd := readiness(t, w.Handler())
	require.Equal(t, http.StatusOK, code, "%+v", rd)
	require.Equal(t, "ok", rd.Checks["slots"], "a lease may fail to refresh for up to AckWait")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, rd = readiness(t, w.Handler())
		assert.Equal(c, http.StatusServiceUnavailable, code)
		assert.Contains(c, rd.Checks["slots"], "lease not refreshed")
	}, 30*time.Second, 100*time.Millisecond, "the slots check names the call whose lease cannot be refreshed")
	require.Greater(t, time.Since(leaseTaken), ackWait, "not before the lease went unrefreshed for longer than AckWait")
	require.Equal(t, "not_ready", rd.Status)
	slots := rd.Checks["slots"]
	m := regexp.MustCompile(`^1 of 1 slots held by calls that cannot finish: call held \(hold\): lease not refreshed for (\d+)s: bus: update ` +
		e.names.LeasesBucket() + `/held: nats: no response from stream$`).FindStringSubmatch(slots)
	require.NotNil(t, m, slots)
	unrefreshed, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	// Counted from the last refresh (at most AckWait/3 before the fault).
	require.GreaterOrEqual(t, time.Duration(unrefreshed)*time.Second, ackWait, slots)
	t.Logf("slots failing %s after the fault: %s", time.Since(faultAt).Round(100*time.Millisecond), slots)
	require.EqualValues(t, 1, hold.runs.Load(), "the call runs on: a refresh that fails is not a lost lease")
	require.Empty(t, hold.started, "not redelivered meanwhile: the heartbeat's InProgress still reaches the calls stream")

	// The tool returns; the lease cannot be confirmed, so its result is
	// held back and retried.
	close(hold.release)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, rd = readiness(t, w.Handler())
		assert.Contains(c, rd.Checks["slots"], "result unpublishable")
	}, 30*time.Second, 100*time.Millisecond, "the slots check names the result held back")
	slots = rd.Checks["slots"]
	require.Regexp(t, `^1 of 1 slots held by calls that cannot finish: call held \(hold\): result unpublishable for \d+s: bus: update `+
		e.names.LeasesBucket()+`/held: nats: no response from stream$`, slots)
	require.Zero(t, e.resultsOn("held", "held"), "no result while the lease cannot be confirmed")

	// A component that connects recreates the missing bucket.
	bustest.Conn(t, e.url, "")
	r := e.result("held", "held")
	require.True(t, r.OK, "%s: %s", r.Code, r.Error)
	require.Equal(t, "released", r.Value)
	require.Equal(t, 1, r.Deliveries)
	e.waitCallsDrained()
	require.Equal(t, 1, e.resultsOn("held", "held"))
	require.EqualValues(t, 1, hold.runs.Load())
	// The result was published under a lease taken again in the new
	// bucket, and that lease was then released: its key's last message
	// there is the release's purge marker.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s, err := js.Stream(ctxT(t), "KV_"+e.names.LeasesBucket())
		if !assert.NoError(c, err) {
			return
		}
		m, err := s.GetLastMsgForSubject(ctxT(t), "$KV."+e.names.LeasesBucket()+".held")
		if assert.NoError(c, err) {
			assert.Equal(c, "PURGE", m.Header.Get("KV-Operation"))
		}
	}, 10*time.Second, 50*time.Millisecond, "the lease taken again in the new bucket is released")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, rd = readiness(t, w.Handler())
		assert.Equal(c, http.StatusOK, code)
		assert.Equal(c, "ok", rd.Checks["slots"])
	}, 10*time.Second, 100*time.Millisecond, "/readyz green once the slot is free")
}

// TestLeaseBucketGoneForGoodAbandonsTheHeldResult: as in
// TestUnrefreshableLeaseTurnsReadinessRed, the leases bucket's stream is
// deleted under a running call of an exclusive tool (one slot, AckWait
// 3 s), but here nothing ever recreates it: no component connects to the
// server during the test. Once the lease has gone unrefreshed for longer
// than AckWait (so that confirming it needs a refresh, which fails), the
// tool returns; its result is held back and retried, the lease's error
// making it unpublishable, until the retry limit (shortened to 10 s; each
// failed confirmation takes about half a second, the client retrying a
// publish nobody answers, and the backoff grows to 3.2 s by then, so the
// worker gives up a little over 10 s after the tool returned, and /readyz
// names the held result from 5 s on). Then the worker gives up as deliver
// does for any result it cannot publish (abandonUnpublished): it dead-letters
// the call (`result not published within 10s: <the lease's error>`),
// publishes the abandonment result (with the run's duration_ms, none of
// its output) without confirming the lease again, audits the call (decision abandoned) and acks it. The call is answered
// once, by its only execution, and /readyz is green again; the bucket is
// still gone.
func TestLeaseBucketGoneForGoodAbandonsTheHeldResult(t *testing.T) {
	t.Parallel()
	const ackWait, retryLimit = 3 * time.Second, 10 * time.Second
	e := newEnv(t)
	hold := newHoldTool()
	w, err := worker.New(worker.Config{NATSURL: e.url, NATSCreds: bustest.Creds(e.url), WorkerID: "gone-1", AckWait: ackWait, Concurrency: 1,
		ShutdownGrace: 2 * time.Second, Logger: quietLogger()}, hold.tool())
	require.NoError(t, err)
	worker.SetResultRetryLimit(w, retryLimit)
	e.run(w)
	js := e.js() // connected before the fault: a raw connection ensures nothing
	dlq := e.tail(e.names.DLQStream(), e.names.Prefix()+".dlq.>")
	audit := e.tail(e.names.AuditStream(), e.names.Prefix()+".audit.hold")
	bucket := e.names.LeasesBucket()
	leaseErr := "bus: update " + bucket + "/gone: nats: no response from stream"

	e.call(protocol.Call{CallID: "gone", Tool: "hold"})
	hold.waitStarted(t)
	_, found, err := e.conn.ReadKey(ctxT(t), bus.Leases, "gone")
	require.NoError(t, err)
	require.True(t, found, "an exclusive call runs under a lease")
	code, rd := readiness(t, w.Handler())
	require.Equal(t, http.StatusOK, code, "%+v", rd)

	require.NoError(t, js.DeleteStream(ctxT(t), "KV_"+bucket))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, rd = readiness(t, w.Handler())
		assert.Equal(c, http.StatusServiceUnavailable, code)
		assert.Regexp(c, `^1 of 1 slots held by calls that cannot finish: call gone \(hold\): lease not refreshed for \d+s: `+regexp.QuoteMeta(leaseErr)+`$`, rd.Checks["slots"])
	}, 30*time.Second, 100*time.Millisecond, "the slots check names the call whose lease cannot be refreshed")

	// The tool returns; the lease cannot be confirmed, so its result is
	// held back and retried.
	close(hold.release)
	released := time.Now()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, rd = readiness(t, w.Handler())
		assert.Equal(c, http.StatusServiceUnavailable, code)
		assert.Contains(c, rd.Checks["slots"], "result unpublishable")
	}, 30*time.Second, 50*time.Millisecond, "the slots check names the result held back")
	require.Regexp(t, `^1 of 1 slots held by calls that cannot finish: call gone \(hold\): result unpublishable for \d+s: `+regexp.QuoteMeta(leaseErr)+`$`, rd.Checks["slots"])
	require.Zero(t, e.resultsOn("gone", "gone"), "no result while the lease cannot be confirmed")

	// The retry limit passes: the call is dead-lettered with the lease's
	// error as the reason...
	reason := "result not published within 10s: " + leaseErr
	d := recv(t, dlq)
	t.Logf("dead-lettered %s after the tool returned", time.Since(released).Round(100*time.Millisecond))
	require.Equal(t, e.names.Prefix()+".dlq.hold", d.Subject)
	require.Equal(t, reason, d.Header.Get(protocol.HeaderDeadReason))
	require.Equal(t, "1", d.Header.Get(protocol.HeaderDeliveries))
	require.Equal(t, e.names.Prefix()+".call.default.default.hold", d.Header.Get(protocol.HeaderOriginalSubject))
	dead, err := protocol.DecodeCall(d.Data)
	require.NoError(t, err)
	require.Equal(t, "gone", dead.CallID, "the dead letter holds the call's body")

	// ...and answered with its abandonment result, published although the
	// lease still cannot be confirmed; it carries this worker's id and the
	// run's duration (the tool ran, held past AckWait), but none of its
	// output.
	r := e.result("gone", "gone")
	require.False(t, r.OK)
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Equal(t, "call abandoned after 1 deliveries: "+reason, r.Error)
	require.Equal(t, 1, r.Deliveries)
	require.Equal(t, "gone-1", r.WorkerID)
	require.GreaterOrEqual(t, r.DurationMS, ackWait.Milliseconds(), "duration_ms is the run's: the tool was held past AckWait")
	require.Empty(t, r.Value)

	// Acked: the calls stream no longer holds the call, and its
	// personality's consumer has nothing pending or unacknowledged.
	e.waitCallsDrained()
	cons, err := js.Consumer(ctxT(t), e.names.CallsStream(), protocol.PersonalityConsumer("default", "default"))
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		info, err := cons.Info(ctxT(t))
		if assert.NoError(c, err) {
			assert.Zero(c, info.NumAckPending)
			assert.Zero(c, info.NumPending)
			assert.Zero(c, info.NumRedelivered)
		}
	}, 10*time.Second, 50*time.Millisecond)

	rec, _ := auditOn(t, audit, "gone")
	require.Equal(t, protocol.DecisionAbandoned, rec.Decision)
	require.False(t, rec.OK)
	require.Equal(t, protocol.CodeExecutionFailed, rec.Code)
	require.Equal(t, 1, rec.Deliveries)
	require.Equal(t, "gone-1", rec.WorkerID)
	require.Equal(t, r.DurationMS, rec.DurationMS, "the record's duration is the result's")
	require.Positive(t, rec.ResultBytes, "the record counts the abandonment result")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, rd = readiness(t, w.Handler())
		assert.Equal(c, http.StatusOK, code)
		assert.Equal(c, "ok", rd.Checks["slots"])
	}, 10*time.Second, 100*time.Millisecond, "/readyz green once the slot is free")

	// Answered once, by the only execution, with one dead letter; and the
	// bucket never came back.
	require.Equal(t, 1, e.resultsOn("gone", "gone"))
	require.EqualValues(t, 1, hold.runs.Load())
	require.Empty(t, hold.started, "not redelivered")
	n, err := e.conn.StreamMsgs(ctxT(t), e.names.DLQStream())
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = js.Stream(ctxT(t), "KV_"+bucket)
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
}
