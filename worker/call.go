package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
)

// opTimeout bounds each bus operation a call handler makes (publish, KV, ack).
const opTimeout = 10 * time.Second

// delivery is one delivered message of a call, taken from decode to ack by
// the handler of one slot: the message, the decoded call and what the
// handler acquires for it along the way. Its methods are the steps of a
// call's life (doc.go); the worker's shared services are reached through w.
type delivery struct {
	w *Worker
	m *bus.Msg
	// ctx carries the call's consumer span: every step's span and log
	// line, and every bus operation's bounded context (boundCtx), derive
	// from it.
	ctx  context.Context
	cs   *callSpan
	call protocol.Call
	// run is the call's entry in the in-flight book (cancel requests, the
	// slots check), nil until registered.
	run *running
	// lease is the call's fenced lease, nil for a call of a tool that is
	// not exclusive (a nil lease holds nothing and is never lost).
	lease *lease
	// detached: the audit log finishes the delivery (complete): it acks
	// the call, or hands it back, once the audit record is stored or
	// cannot be, and counts its end (Worker.calls).
	detached bool
}

// outcome is what processing a call produced.
type outcome struct {
	result   protocol.Result
	decision string
	denials  []string
	// handback: the worker is shutting down; the call goes back to the stream unanswered.
	handback bool
	// infra: an infrastructure fault; the call is redelivered with backoff.
	infra error
	// leaseLost: another worker took the call over; nothing is published.
	leaseLost bool
	// bytes is the size of the published result's body.
	bytes int
	// blob is the full output to store by reference before the result is
	// published (planBlob), nil for none.
	blob *blobPlan
}

func refuse(call *protocol.Call, decision string, code protocol.Code, msg string) outcome {
	return outcome{result: protocol.Failure(call, code, msg), decision: decision}
}

// opCtx bounds one bus operation: opTimeout, and never past the end of the
// shutdown margin (ShutdownMargin after the grace), so that a worker whose
// NATS server is gone still exits in time.
func (w *Worker) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(w.opsBase(), opTimeout)
}

// handle takes one delivered call from decode to its answer, and owns one
// slot until then; the ack may follow later (complete).
func (w *Worker) handle(m *bus.Msg) {
	d := &delivery{w: w, m: m}
	defer func() {
		if !d.detached {
			w.calls.Done()
		}
	}()
	defer func() { <-w.slots }()
	d.ctx, d.cs = w.startCall(m)
	defer d.cs.end()
	defer func() {
		if p := recover(); p != nil {
			d.cs.outcome = "panic"
			// Not the tool (a tool's panic is its execution_failed
			// answer) but the worker's own handling: an infrastructure
			// fault, retried with backoff and dead-lettered after
			// MaxDeliver, so a poison call cannot take the worker down.
			reason := fmt.Sprintf("worker panicked while handling the call: %v", p)
			w.recordFailure(d.ctx, d.call.CallID, reason)
			w.log.ErrorContext(d.ctx, "call handler panicked; call handed back", "subject", m.Subject, "call_id", d.call.CallID, "panic", fmt.Sprint(p))
			if !d.detached { // else the audit log acks it or hands it back
				_ = m.Nak(retryDelay(m.Deliveries))
			}
		}
	}()
	d.handle()
}

// handle is the life of one delivery, and the one place that decides what
// becomes of it: answered (a result published, or found already stored),
// handed back (shutdown), retried later (an infrastructure fault), or
// dropped (another run answers the call).
func (d *delivery) handle() {
	w, m, cs := d.w, d.m, d.cs
	tokens, subjErr := w.names.ParseCallSubject(m.Subject)
	call, err := protocol.DecodeCall(m.Data)
	d.call = call
	if subjErr != nil {
		d.rejectMalformed(protocol.CallTokens{}, nil, subjErr)
		return
	}
	if err == nil && call.Tool != tokens.Tool {
		err = &protocol.DecodeError{CallID: call.CallID, BatchID: call.BatchID, Field: "tool",
			Reason: fmt.Sprintf("%q does not match the subject's tool %q", call.Tool, tokens.Tool)}
	}
	if err != nil {
		de, _ := protocol.AsDecodeError(err)
		d.rejectMalformed(tokens, de, err)
		return
	}
	// The subject's personality decides (security.md section 3): NATS
	// permissions bind subjects, never bodies.
	bodyPersonality := d.call.PersonalityID
	d.call.PersonalityID = tokens.Personality
	cs.decoded(&d.call)
	if bodyPersonality != "" && bodyPersonality != tokens.Personality {
		d.answerWithoutRunning(refuse(&d.call, protocol.DecisionPersonality, protocol.CodeInputInvalid,
			protocol.PersonalityMismatch(bodyPersonality, tokens.Personality)))
		return
	}
	if v := m.Header.Get(protocol.HeaderProtocol); v != "" && v != protocol.Version {
		// A newer client: answer rather than guess at its fields.
		d.answerWithoutRunning(refuse(&d.call, protocol.DecisionDecode, protocol.CodeInputInvalid,
			fmt.Sprintf("invalid call: header Capstan-Protocol %q is not supported (this worker speaks %s)", v, protocol.Version)))
		return
	}

	// The results stream is the ledger (docs/reliability.md): a call has
	// been answered iff its result subject holds a message. Reading it
	// costs a round trip, so it is read only where an answer may already
	// be there: on a redelivery, and for a call of an exclusive tool once
	// its lease is held (below). Any other duplicate runs and finds out
	// when its result is refused.
	h, known := w.lookup(d.call.Tool)
	exclusive := known && h.SideEffects.NeedsLease()
	if m.Deliveries > 1 && !exclusive && d.settledByLedger() {
		return
	}

	r := &running{seq: m.StreamSeq, personality: d.call.PersonalityID, tool: d.call.Tool}
	if ok, seq := w.inflight.add(d.call.CallID, r); !ok {
		if seq != m.StreamSeq {
			// Another copy of a call this worker is running: look again
			// once it has finished (its result then answers it).
			_ = m.Nak(time.Second)
		}
		// Else a redelivery of the very message being run: the running
		// handler acks it.
		cs.outcome = "in_progress"
		return
	}
	defer w.inflight.remove(d.call.CallID)
	d.run = r
	// Only calls of exclusive tools run under a lease ("never two at
	// once"); for the others a nil lease holds nothing and is never lost.
	if exclusive {
		l, err := w.takeLease(d.ctx, d.call.CallID)
		if errors.Is(err, bus.ErrKeyExists) {
			// Another worker holds the lease: let it finish; look again later.
			w.recordFailure(d.ctx, d.call.CallID, "call lease held by another worker")
			_ = m.Nak(w.timing.Heartbeat())
			cs.outcome = "in_progress"
			return
		}
		if err != nil {
			w.retryLater(d.ctx, m, &d.call, fmt.Errorf("take call lease: %w", err))
			cs.outcome = "retry"
			return
		}
		d.lease = l
	}
	defer d.lease.release()
	// An exclusive call must not run twice: its ledger is read once the
	// lease is held. A run that finished stored its result before it
	// released the lease, so a late duplicate, or a copy delivered by a
	// consumer leader cut off from the others, finds it here; read before
	// the lease, a run finishing in between would go unseen.
	if exclusive && d.settledByLedger() {
		return
	}
	stopBeat := w.heartbeat(m, d.lease, r)
	defer stopBeat()
	o := d.process()
	if o.blob != nil && !d.lease.isLost() {
		w.storeBlob(d.ctx, &d.call, &o)
	}
	switch {
	case o.handback:
		_ = m.Nak(0)
		cs.outcome = "handback"
	case o.leaseLost || d.lease.isLost():
		w.log.WarnContext(d.ctx, "call abandoned by this worker: its lease was lost to another worker, which answers it", "call_id", d.call.CallID, "tool", d.call.Tool)
		cs.outcome = "lease_lost"
	case o.infra != nil:
		w.retryLater(d.ctx, m, &d.call, o.infra)
		cs.outcome = "retry"
	default:
		d.deliver(o)
	}
}

// settledByLedger reads the call's result subject: a call already answered
// is audited and acked without running (answeredBefore), and a read that
// fails hands the call back for later. It reports whether either happened.
func (d *delivery) settledByLedger() bool {
	stored, err := d.w.storedResult(d.ctx, &d.call)
	if err != nil {
		d.w.retryLater(d.ctx, d.m, &d.call, err)
		d.cs.outcome = "retry"
		return true
	}
	if stored != nil {
		d.answeredBefore(stored)
		d.cs.outcome = "duplicate"
		return true
	}
	return false
}

// storedResult returns the result the results stream holds for call, or
// nil when it holds none.
func (w *Worker) storedResult(ctx context.Context, call *protocol.Call) (*bus.Msg, error) {
	subject, err := w.names.ResultSubject(call.PersonalityID, resultBatch(call.EffectiveBatchID(), call.CallID), call.CallID)
	if err != nil {
		return nil, err
	}
	ctx, cancel := w.boundCtx(ctx)
	defer cancel()
	m, err := w.conn.LastMsg(ctx, w.names.ResultsStream(), subject)
	switch {
	case errors.Is(err, bus.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("look up result: %w", err)
	}
	return m, nil
}

// answeredBefore acks a delivery of a call whose result is already stored,
// without running it, once an audit record of the delivery is stored (the
// worker that stored the result may have died before its own record was).
func (d *delivery) answeredBefore(stored *bus.Msg) {
	w, call := d.w, &d.call
	o := outcome{decision: protocol.DecisionAnswered, bytes: len(stored.Data)}
	if json.Unmarshal(stored.Data, &o.result) != nil {
		o.result = protocol.Result{CallID: call.CallID, BatchID: call.EffectiveBatchID(), Tool: call.Tool}
	}
	if err := w.audit(d.ctx, call, o, int(d.m.Deliveries)); err != nil {
		w.retryLater(d.ctx, d.m, call, fmt.Errorf("write audit record: %w", err))
		return
	}
	w.ack(d.ctx, d.m, call.CallID)
	w.log.DebugContext(d.ctx, "call already answered; delivery acknowledged without running it", "call_id", call.CallID, "deliveries", d.m.Deliveries)
}

// resultBatch is the batch token of a result subject: the call's batch id, or
// its call id when the batch id is not a valid token (protocol.md).
func resultBatch(batch, callID string) string {
	if protocol.ValidToken(batch) {
		return batch
	}
	return callID
}

// deliver publishes a computed result while this worker holds the call's
// lease (if it has one), retrying the publish (never the execution) while
// the bus is unavailable, then completes the call (audit and ack). A
// result the results stream refuses because it holds one already is
// dropped (lostRace). The call's heartbeat keeps running meanwhile. If the
// lease is lost, the result is dropped: the lease holder answers the call.
// If the worker is forced to stop before the result is out, the call is
// handed back. A publish that retrying cannot cure (permission denied, no
// results stream) dead-letters the call at once (undeliverable); retries
// end after ResultRetryLimit with a dead letter and an abandonment result
// (abandonUnpublished). The call's in-flight entry records, for /readyz,
// how long the result has been unpublishable.
func (d *delivery) deliver(o outcome) {
	w, ctx, l, r := d.w, d.ctx, d.lease, d.run
	delay := 100 * time.Millisecond
	start := time.Now()
	for attempt := 1; ; attempt++ {
		held, err := l.confirm()
		if !held {
			w.log.WarnContext(ctx, "result dropped: the call's lease was lost to another worker, which answers it", "call_id", d.call.CallID, "tool", d.call.Tool)
			setOutcome(ctx, "lease_lost")
			return
		}
		permanent := false
		if err == nil {
			// At the end of the grace an attempt under way gives up: the
			// call is handed back.
			pctx, cancel := w.boundCtx(ctx)
			stop := context.AfterFunc(w.execBase, cancel)
			err = d.publish(pctx, &o)
			stop()
			cancel()
			if err != nil && !errors.Is(err, bus.ErrSubjectTaken) {
				var reason string
				reason, permanent = w.publishFault(err, w.names.ResultsStream())
				w.obs.publishFailed(ctx, "result", reason)
			}
		}
		if err == nil {
			r.unstuck(stuckResult)
			injectFault("after-result-publish")
			break
		}
		if errors.Is(err, bus.ErrSubjectTaken) {
			// Another run of the call (a duplicate, or a redelivery
			// while this one ran) stored its result first: that one is
			// the call's result.
			r.unstuck(stuckResult)
			d.lostRace()
			return
		}
		r.stuck(stuckResult, err)
		if w.execBase.Err() != nil {
			w.log.WarnContext(ctx, "result not published before shutdown; call handed back", "call_id", d.call.CallID, "error", err)
			_ = d.m.Nak(0)
			setOutcome(ctx, "handback")
			return
		}
		if permanent {
			d.undeliverable(o, err)
			return
		}
		if time.Since(start) >= w.retryLimit {
			d.abandonUnpublished(o, err)
			return
		}
		w.log.WarnContext(ctx, "cannot publish result; retrying", "call_id", d.call.CallID, "attempt", attempt, "retry_in", delay.String(), "error", err)
		sleepOrDone(w.execBase, l, delay)
		delay = min(delay*2, 5*time.Second)
	}
	d.complete(o)
}

// answerWithoutRunning answers a call that was never run (refused before
// execution, or malformed): publish the result, audit and ack. A publish
// failure hands the call back with backoff (at most MaxDeliver times), one
// that retrying cannot cure dead-letters it at once.
func (d *delivery) answerWithoutRunning(o outcome) {
	w, ctx := d.w, d.ctx
	pctx, cancel := w.boundCtx(ctx)
	err := d.publish(pctx, &o)
	cancel()
	if errors.Is(err, bus.ErrSubjectTaken) {
		d.lostRace()
		return
	}
	if err != nil {
		reason, permanent := w.publishFault(err, w.names.ResultsStream())
		w.obs.publishFailed(ctx, "result", reason)
		if permanent {
			d.undeliverable(o, err)
			return
		}
		w.retryLater(d.ctx, d.m, &d.call, err)
		setOutcome(ctx, "retry")
		return
	}
	d.complete(o)
}

// publish stamps the result with this worker and the delivery count and
// publishes it; o.result and o.bytes become what was published (a result
// too large for the message limit is replaced, see publishResult). ctx is
// the call's context, or one that ends it earlier.
// publish publishes o's result under ctx, which bounds it (boundCtx).
func (d *delivery) publish(ctx context.Context, o *outcome) (err error) {
	o.result.WorkerID = d.w.cfg.WorkerID
	o.result.Deliveries = int(d.m.Deliveries)
	o.bytes, err = d.w.sendResult(ctx, d.call.PersonalityID, d.call.CallID, &o.result, d.m.Header)
	return err
}

// complete finishes a call whose result is stored. It queues the call's
// audit record; the audit log acks the call once the record is stored
// (without waiting: the stored result answers a redelivery), and the
// handler does not wait for that: the call's slot is free for the next
// call as soon as its result is stored, and the delivery is detached (its
// end is counted when the ack is sent). complete releases the lease,
// records the call in the metrics and its span, and logs its outcome (with
// the trace id of the call's span). An audit record that cannot be stored
// leaves the call unacknowledged for a redelivery, which finds the result
// and writes the record then (answeredBefore).
func (d *delivery) complete(o outcome) {
	w, ctx, call, m := d.w, d.ctx, &d.call, d.m
	if subject, line, err := w.auditRecord(call, o, int(m.Deliveries)); err != nil {
		w.retryLater(ctx, m, call, fmt.Errorf("write audit record: %w", err))
	} else {
		d.detached = true
		w.audits.writeThen(subject, line, func(err error) {
			if err == nil {
				w.ack(ctx, m, call.CallID)
				w.calls.Done()
				return
			}
			// Not on the audit log's goroutine: retryLater writes the
			// failure reason, a bus operation.
			go func() {
				defer w.calls.Done()
				w.log.WarnContext(ctx, "cannot write audit record", "call_id", call.CallID, "error", err)
				w.retryLater(ctx, m, call, fmt.Errorf("write audit record: %w", err))
			}()
		})
	}
	d.lease.release()
	w.recordAnswer(ctx, call, o)
	lvl := slog.LevelInfo
	if !o.result.OK {
		lvl = slog.LevelWarn
	}
	w.log.LogAttrs(ctx, lvl, "call finished", slog.String("call_id", call.CallID), slog.String("tool", call.Tool),
		slog.Bool("ok", o.result.OK), slog.String("code", string(o.result.Code)), slog.String("decision", o.decision),
		slog.Int64("duration_ms", o.result.DurationMS), slog.Uint64("deliveries", d.m.Deliveries))
}

// lostRace acks a call whose result another run stored first, without
// publishing this run's result; its audit record was written by the run
// that won.
func (d *delivery) lostRace() {
	d.w.ack(d.ctx, d.m, d.call.CallID)
	setOutcome(d.ctx, "duplicate")
	d.w.log.InfoContext(d.ctx, "result not published: another run of the call stored its result first", "call_id", d.call.CallID, "tool", d.call.Tool)
}

// header returns the headers of a message caused by a call: the protocol
// version and the trace context (never baggage): the one of ctx's span when
// it has a valid one, else the call's own.
func (w *Worker) header(ctx context.Context, callHeader bus.Header) bus.Header {
	h := bus.Header{protocol.HeaderProtocol: {protocol.Version}}
	for _, k := range []string{protocol.HeaderTraceparent, protocol.HeaderTracestate} {
		// A trace header longer than W3C asks to propagate is dropped: it
		// would eat into the room of the result.
		if v := callHeader.Get(k); v != "" && len(v) <= maxTraceHeader {
			h.Set(k, v)
		}
	}
	telemetry.Inject(ctx, h)
	return h
}

// ack acknowledges a call whose result is stored, without waiting for the
// server: a lost ack means a redelivery that finds the result. ctx carries
// the call's span, for the log.
func (w *Worker) ack(ctx context.Context, m *bus.Msg, callID string) {
	if err := m.AckNoWait(); err != nil {
		w.log.WarnContext(ctx, "ack failed; the call will be redelivered and acked when it finds its result", "call_id", callID, "error", err)
	}
}

// retryLater records an infrastructure fault and asks for redelivery with
// backoff. After MaxDeliver deliveries the server's advisory makes a worker
// dead-letter the call and publish its abandonment result. ctx carries the
// call's span: the failure record is written, and the fault logged, in it.
func (w *Worker) retryLater(ctx context.Context, m *bus.Msg, call *protocol.Call, cause error) {
	w.recordFailure(ctx, call.CallID, cause.Error())
	delay := retryDelay(m.Deliveries)
	w.log.WarnContext(ctx, "infrastructure fault; call will be redelivered", "call_id", call.CallID, "tool", call.Tool,
		"deliveries", m.Deliveries, "retry_in", delay.String(), "error", cause)
	_ = m.Nak(delay)
}

// recordFailure keeps the last infrastructure failure of a call for its
// abandonment message. The write is bounded like every bus operation
// (boundCtx) and keeps ctx's span.
func (w *Worker) recordFailure(ctx context.Context, callID, reason string) {
	if callID == "" {
		return
	}
	ctx, cancel := w.boundCtx(ctx)
	defer cancel()
	if _, err := w.kv.failures.Put(ctx, callID, []byte(capReason(reason))); err != nil {
		w.log.WarnContext(ctx, "cannot record failure reason", "call_id", callID, "error", err)
	}
}

// retryDelay is the redelivery delay after an infrastructure fault on the
// given delivery: 1s, 2s, 4s, 8s, then 15s (bus.RetryBackoffText).
func retryDelay(deliveries uint64) time.Duration {
	if deliveries < 1 {
		deliveries = 1
	}
	return min(time.Second<<min(deliveries-1, 4), 15*time.Second)
}
