package callexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/worker/internal/cancelbook"
	"github.com/capstanhq/capstan/worker/internal/lease"
	"github.com/capstanhq/capstan/worker/internal/observe"
	"go.opentelemetry.io/otel/trace"
)

// Executor takes one delivered call from decode to ack, and owns one slot
// of the worker until its result is stored: it is built per delivery
// (Services.Handle) with exactly what one call needs, and Run reads as the
// call lives: decode, look in the ledger, register, lease, admit,
// (schedule), run, shape, publish, ack. Its other methods are those steps,
// each verb with one meaning: process is the pipeline (admit: the gates;
// run: dry run, or execute, then shape); execute is the tool itself under
// its timeout; deliver publishes a computed result (with retries);
// answerWithoutRunning publishes a refusal; complete audits and acks.
type Executor struct {
	s *Services
	m *bus.Msg
	// ctx carries the call's consumer span: every step's span and log
	// line, and every bus operation's bounded context (boundCtx), derive
	// from it.
	ctx  context.Context
	cs   *observe.CallSpan
	call protocol.Call
	// exclusive: the call's tool is exclusive (tool.SideEffects); its
	// calls run under a lease.
	exclusive bool
	// run is the call's entry in the in-flight book (cancel requests, the
	// slots check), nil until registered.
	run *cancelbook.Call
	// lease is the call's fenced lease, nil for a call of a tool that is
	// not exclusive (a nil lease holds nothing and is never lost).
	lease *lease.Lease
	// decision is the stored decision of a call re-published once decided
	// (readDecision), nil before it is read or for none.
	decision *approval.Decision
	// detached: the audit log finishes the delivery (complete): it acks
	// the call, or hands it back, once the audit record is stored or
	// cannot be, and counts its end (Deps.Finished).
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
	// held: the call waits for approval (or was decided already, and its
	// re-published copy answers it): acknowledged, never answered here.
	held bool
	// approval is the decision of a call that was held, for its audit record.
	approval *protocol.ApprovalStamp
	// blob is the full output to store by reference before the result is
	// published (planBlob), nil for none.
	blob *blobPlan
}

func refuse(call *protocol.Call, decision string, code protocol.Code, msg string) outcome {
	return outcome{result: protocol.Failure(call, code, msg), decision: decision}
}

// Run is the life of one delivery, and the one place that decides what
// becomes of it: answered (a result published, or found already stored),
// handed back (shutdown), retried later (an infrastructure fault), or
// dropped (another run answers the call). Each step returns false when it
// has already decided.
func (e *Executor) Run() {
	if !e.decode() || !e.unanswered() || !e.register() {
		return
	}
	defer e.s.book.Remove(e.call.CallID)
	if !e.takeLease() {
		return
	}
	defer e.lease.Release()
	// An exclusive call must not run twice: its ledger is read once the
	// lease is held. A run that finished stored its result before it
	// released the lease, so a late duplicate, or a copy delivered by a
	// consumer leader cut off from the others, finds it here; read before
	// the lease, a run finishing in between would go unseen.
	if e.exclusive && !e.notInLedger() {
		return
	}
	stopBeat := e.s.leases.Heartbeat(e.m, e.lease, e.run)
	defer stopBeat()
	// (A scheduler hands the call to its executor once it may take a
	// slot; the executor starts here.)
	o := e.process()
	if o.blob != nil && !e.lease.IsLost() {
		e.storeBlob(e.ctx, &e.call, &o)
	}
	e.settle(o)
}

// decode decodes the subject and the body. A malformed call is answered
// and dead-lettered (rejectMalformed). The subject's personality decides;
// a body naming another, or a newer protocol version, is refused.
func (e *Executor) decode() bool {
	s, m := e.s, e.m
	tokens, subjErr := s.names.ParseCallSubject(m.Subject)
	call, err := protocol.DecodeCall(m.Data)
	e.call = call
	if subjErr != nil {
		e.rejectMalformed(protocol.CallTokens{}, nil, subjErr)
		return false
	}
	if err == nil && call.Tool != tokens.Tool {
		err = &protocol.DecodeError{CallID: call.CallID, BatchID: call.BatchID, Field: "tool",
			Reason: fmt.Sprintf("%q does not match the subject's tool %q", call.Tool, tokens.Tool)}
	}
	if err != nil {
		de, _ := protocol.AsDecodeError(err)
		e.rejectMalformed(tokens, de, err)
		return false
	}
	// The subject's personality decides (security.md section 3): NATS
	// permissions bind subjects, never bodies.
	bodyPersonality := e.call.PersonalityID
	e.call.PersonalityID = tokens.Personality
	e.cs.Decoded(&e.call)
	if bodyPersonality != "" && bodyPersonality != tokens.Personality {
		e.answerWithoutRunning(refuse(&e.call, protocol.DecisionPersonality, protocol.CodeInputInvalid,
			protocol.PersonalityMismatch(bodyPersonality, tokens.Personality)))
		return false
	}
	if v := m.Header.Get(protocol.HeaderProtocol); v != "" && v != protocol.Version {
		// A newer client: answer rather than guess at its fields.
		e.answerWithoutRunning(refuse(&e.call, protocol.DecisionDecode, protocol.CodeInputInvalid,
			fmt.Sprintf("invalid call: header Capstan-Protocol %q is not supported (this worker speaks %s)", v, protocol.Version)))
		return false
	}
	return true
}

// unanswered reports whether the call may still need an answer. The
// results stream is the ledger (docs/reliability.md): a call has been
// answered iff its result subject holds a message. Reading it costs a
// round trip, so it is read only where an answer may already be there: on
// a redelivery, and for a call of an exclusive tool once its lease is held
// (Run). Any other duplicate runs and finds out when its result is
// refused.
func (e *Executor) unanswered() bool {
	h, known := e.s.tools.Lookup(e.call.Tool)
	e.exclusive = known && h.SideEffects.NeedsLease()
	if e.m.Deliveries <= 1 || e.exclusive {
		return true
	}
	return e.notInLedger()
}

// notInLedger reads the call's result subject (from the stream's leader):
// a call already answered is audited and acked without running
// (answeredBefore), and a read that fails hands the call back for later.
// It reports whether the call may run.
func (e *Executor) notInLedger() bool {
	s, m, cs := e.s, e.m, e.cs
	stored, err := s.storedResult(e.ctx, &e.call)
	if err != nil {
		s.retryLater(e.ctx, m, &e.call, err)
		cs.Outcome = "retry"
		return false
	}
	if stored != nil {
		e.answeredBefore(stored)
		cs.Outcome = "duplicate"
		return false
	}
	return true
}

// register enters the call in the in-flight book, which gives it the
// cancel request booked for it, if any, under the same lock that books
// requests. A copy of a call this worker runs already is not run.
func (e *Executor) register() bool {
	m := e.m
	r := &cancelbook.Call{Seq: m.StreamSeq, Personality: e.call.PersonalityID, Tool: e.call.Tool}
	if ok, seq := e.s.book.Add(e.call.CallID, r); !ok {
		if seq != m.StreamSeq {
			// Another copy of a call this worker is running: look again
			// once it has finished (its result then answers it).
			_ = m.Nak(time.Second)
		}
		// Else a redelivery of the very message being run: the running
		// handler acks it.
		e.cs.Outcome = "in_progress"
		return false
	}
	e.run = r
	return true
}

// takeLease takes the fenced lease of a call of an exclusive tool ("never
// two at once"); for the others a nil lease holds nothing and is never
// lost.
func (e *Executor) takeLease() bool {
	if !e.exclusive {
		return true
	}
	s, m := e.s, e.m
	l, err := s.leases.Take(e.ctx, e.call.CallID)
	if errors.Is(err, bus.ErrKeyExists) {
		// Another worker holds the lease: let it finish; look again later.
		s.recordFailure(e.ctx, e.call.CallID, "call lease held by another worker")
		_ = m.Nak(s.timing.Heartbeat())
		e.cs.Outcome = "in_progress"
		return false
	}
	if err != nil {
		s.retryLater(e.ctx, m, &e.call, fmt.Errorf("take call lease: %w", err))
		e.cs.Outcome = "retry"
		return false
	}
	e.lease = l
	return true
}

// settle decides what becomes of a processed call: handed back, dropped
// (its lease lost), retried later, or answered (deliver).
func (e *Executor) settle(o outcome) {
	s, m, cs := e.s, e.m, e.cs
	switch {
	case o.handback:
		_ = m.Nak(0)
		cs.Outcome = "handback"
	case o.held:
		s.ack(e.ctx, m, e.call.CallID)
		cs.Outcome = "held"
	case o.leaseLost || e.lease.IsLost():
		s.log.WarnContext(e.ctx, "call abandoned by this worker: its lease was lost to another worker, which answers it", "call_id", e.call.CallID, "tool", e.call.Tool)
		cs.Outcome = "lease_lost"
	case o.infra != nil:
		s.retryLater(e.ctx, m, &e.call, o.infra)
		cs.Outcome = "retry"
	default:
		e.deliver(o)
	}
}

// storedResult returns the result the results stream holds for call, or
// nil when it holds none.
func (s *Services) storedResult(ctx context.Context, call *protocol.Call) (*bus.Msg, error) {
	subject, err := s.names.ResultSubject(call.PersonalityID, resultBatch(call.EffectiveBatchID(), call.CallID), call.CallID)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.BoundCtx(ctx)
	defer cancel()
	m, err := s.bus.LastMsg(ctx, s.names.ResultsStream(), subject)
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
func (e *Executor) answeredBefore(stored *bus.Msg) {
	s, call := e.s, &e.call
	o := outcome{decision: protocol.DecisionAnswered, bytes: len(stored.Data)}
	if json.Unmarshal(stored.Data, &o.result) != nil {
		o.result = protocol.Result{CallID: call.CallID, BatchID: call.EffectiveBatchID(), Tool: call.Tool}
	}
	if err := s.audit(e.ctx, call, o, int(e.m.Deliveries)); err != nil {
		s.retryLater(e.ctx, e.m, call, fmt.Errorf("write audit record: %w", err))
		return
	}
	s.ack(e.ctx, e.m, call.CallID)
	s.log.DebugContext(e.ctx, "call already answered; delivery acknowledged without running it", "call_id", call.CallID, "deliveries", e.m.Deliveries)
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
func (e *Executor) deliver(o outcome) {
	s, ctx, l, r := e.s, e.ctx, e.lease, e.run
	delay := 100 * time.Millisecond
	start := time.Now()
	for attempt := 1; ; attempt++ {
		held, err := l.Confirm()
		if !held {
			s.log.WarnContext(ctx, "result dropped: the call's lease was lost to another worker, which answers it", "call_id", e.call.CallID, "tool", e.call.Tool)
			observe.SetOutcome(ctx, "lease_lost")
			return
		}
		permanent := false
		if err == nil {
			// At the end of the grace an attempt under way gives up: the
			// call is handed back.
			pctx, cancel := s.BoundCtx(ctx)
			stop := context.AfterFunc(s.execBase, cancel)
			err = e.publish(pctx, &o)
			stop()
			cancel()
			if err != nil && !errors.Is(err, bus.ErrSubjectTaken) {
				var reason string
				reason, permanent = s.publishFault(err, s.names.ResultsStream())
				s.obs.PublishFailed(ctx, "result", reason)
			}
		}
		if err == nil {
			r.Unstuck(cancelbook.StuckResult)
			injectFault("after-result-publish")
			break
		}
		if errors.Is(err, bus.ErrSubjectTaken) {
			// Another run of the call (a duplicate, or a redelivery
			// while this one ran) stored its result first: that one is
			// the call's result.
			r.Unstuck(cancelbook.StuckResult)
			e.lostRace()
			return
		}
		r.Stuck(cancelbook.StuckResult, err)
		if s.execBase.Err() != nil {
			s.log.WarnContext(ctx, "result not published before shutdown; call handed back", "call_id", e.call.CallID, "error", err)
			_ = e.m.Nak(0)
			observe.SetOutcome(ctx, "handback")
			return
		}
		if permanent {
			e.undeliverable(o, err)
			return
		}
		if time.Since(start) >= s.cfg.RetryLimit {
			e.abandonUnpublished(o, err)
			return
		}
		s.log.WarnContext(ctx, "cannot publish result; retrying", "call_id", e.call.CallID, "attempt", attempt, "retry_in", delay.String(), "error", err)
		lease.SleepOrDone(s.execBase, l, delay)
		delay = min(delay*2, 5*time.Second)
	}
	e.complete(o)
}

// answerWithoutRunning answers a call that was never run (refused before
// execution, or malformed): publish the result, audit and ack. A publish
// failure hands the call back with backoff (at most MaxDeliver times), one
// that retrying cannot cure dead-letters it at once.
func (e *Executor) answerWithoutRunning(o outcome) {
	s, ctx := e.s, e.ctx
	pctx, cancel := s.BoundCtx(ctx)
	err := e.publish(pctx, &o)
	cancel()
	if errors.Is(err, bus.ErrSubjectTaken) {
		e.lostRace()
		return
	}
	if err != nil {
		reason, permanent := s.publishFault(err, s.names.ResultsStream())
		s.obs.PublishFailed(ctx, "result", reason)
		if permanent {
			e.undeliverable(o, err)
			return
		}
		s.retryLater(e.ctx, e.m, &e.call, err)
		observe.SetOutcome(ctx, "retry")
		return
	}
	e.complete(o)
}

// publish stamps the result with this worker and the delivery count and
// publishes it; o.result and o.bytes become what was published (a result
// too large for the message limit is replaced, see publishResult). ctx is
// the call's context, or one that ends it earlier.
// publish publishes o's result under ctx, which bounds it (boundCtx).
func (e *Executor) publish(ctx context.Context, o *outcome) (err error) {
	o.result.WorkerID = e.s.cfg.WorkerID
	o.result.Deliveries = int(e.m.Deliveries)
	o.bytes, err = e.s.sendResult(ctx, e.call.PersonalityID, e.call.CallID, &o.result, e.m.Header)
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
func (e *Executor) complete(o outcome) {
	s, ctx, call, m := e.s, e.ctx, &e.call, e.m
	if subject, line, err := s.auditRecord(call, o, int(m.Deliveries)); err != nil {
		s.retryLater(ctx, m, call, fmt.Errorf("write audit record: %w", err))
	} else {
		e.detached = true
		s.audits.WriteThen(subject, line, func(err error) {
			if err == nil {
				s.ack(ctx, m, call.CallID)
				s.finished()
				return
			}
			// Not on the audit log's goroutine: retryLater writes the
			// failure reason, a bus operation.
			go func() {
				defer s.finished()
				s.log.WarnContext(ctx, "cannot write audit record", "call_id", call.CallID, "error", err)
				s.retryLater(ctx, m, call, fmt.Errorf("write audit record: %w", err))
			}()
		})
	}
	e.lease.Release()
	s.obs.RecordAnswer(ctx, call.Tool, &o.result, o.decision)
	lvl := slog.LevelInfo
	if !o.result.OK {
		lvl = slog.LevelWarn
	}
	s.log.LogAttrs(ctx, lvl, "call finished", slog.String("call_id", call.CallID), slog.String("tool", call.Tool),
		slog.String("personality", call.PersonalityID),
		slog.Bool("ok", o.result.OK), slog.String("code", string(o.result.Code)), slog.String("decision", o.decision),
		slog.Int64("duration_ms", o.result.DurationMS), slog.Uint64("deliveries", e.m.Deliveries))
}

// lostRace acks a call whose result another run stored first, without
// publishing this run's result; its audit record was written by the run
// that won.
func (e *Executor) lostRace() {
	e.s.ack(e.ctx, e.m, e.call.CallID)
	observe.SetOutcome(e.ctx, "duplicate")
	e.s.log.InfoContext(e.ctx, "result not published: another run of the call stored its result first", "call_id", e.call.CallID, "tool", e.call.Tool)
}

// header returns the headers of a message caused by a call: the protocol
// version and the trace context (never baggage): the one of ctx's span when
// it has a valid one, else the call's own.
func (s *Services) header(ctx context.Context, callHeader bus.Header) bus.Header {
	h := bus.Header{protocol.HeaderProtocol: {protocol.Version}}
	// The call's own headers are copied only where Inject will not write
	// the span context of ctx: it writes the traceparent of a valid one,
	// and its tracestate when it has one.
	sc := trace.SpanContextFromContext(ctx)
	for _, k := range []string{protocol.HeaderTraceparent, protocol.HeaderTracestate} {
		if sc.IsValid() && (k == protocol.HeaderTraceparent || sc.TraceState().Len() > 0) {
			continue
		}
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
func (s *Services) ack(ctx context.Context, m *bus.Msg, callID string) {
	if err := m.AckNoWait(); err != nil {
		s.log.WarnContext(ctx, "ack failed; the call will be redelivered and acked when it finds its result", "call_id", callID, "error", err)
	}
}

// retryLater records an infrastructure fault and asks for redelivery with
// backoff. After MaxDeliver deliveries the server's advisory makes a worker
// dead-letter the call and publish its abandonment result. ctx carries the
// call's span: the failure record is written, and the fault logged, in it.
func (s *Services) retryLater(ctx context.Context, m *bus.Msg, call *protocol.Call, cause error) {
	s.recordFailure(ctx, call.CallID, cause.Error())
	delay := retryDelay(m.Deliveries)
	s.log.WarnContext(ctx, "infrastructure fault; call will be redelivered", "call_id", call.CallID, "tool", call.Tool,
		"deliveries", m.Deliveries, "retry_in", delay.String(), "error", cause)
	_ = m.Nak(delay)
}

// recordFailure keeps the last infrastructure failure of a call for its
// abandonment message. The write is bounded like every bus operation
// (boundCtx) and keeps ctx's span.
func (s *Services) recordFailure(ctx context.Context, callID, reason string) {
	if callID == "" {
		return
	}
	ctx, cancel := s.BoundCtx(ctx)
	defer cancel()
	if _, err := s.failures.Put(ctx, callID, []byte(capReason(reason))); err != nil {
		s.log.WarnContext(ctx, "cannot record failure reason", "call_id", callID, "error", err)
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
