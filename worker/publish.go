package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/worker/internal/observe"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// ResultRetryLimit is how long a worker retries publishing a computed result
// that fails for a reason retrying may cure (the server is unreachable, a
// stream has no leader): then the call is dead-lettered and answered with
// an abandonment result, or, when even that cannot be published, handed
// back for a later delivery (docs/reliability.md, "Publishing results").
const ResultRetryLimit = time.Minute

// ShutdownMargin is how long after the shutdown grace Run takes at most:
// calls handed back, leases released, the catalog left. Every bus
// operation still waiting then gives up, so a worker whose NATS server is
// gone exits within ShutdownGrace + ShutdownMargin.
const ShutdownMargin = 3 * time.Second

// opsBase is the parent context of every bus operation of the worker; it
// ends ShutdownMargin after the grace.
func (w *Worker) opsBase() context.Context {
	if w.ops == nil {
		return context.Background()
	}
	return w.ops
}

// publishResult publishes a call's result in a producer span ("send
// <p>.result.{personality}.{batch_id}.{call_id}", a child of ctx's span)
// whose context the result's traceparent carries. The message never exceeds
// the result limit (the smaller of ResultMaxBytes and the server's max
// payload): a result that does not fit is cut as the budget trim cuts
// (fitMessage), and one the server still refuses for its size is replaced
// by the execution_failed result naming the limit. *res becomes what was
// published; size is its body's length. ctx bounds the publish (boundCtx).
func (w *Worker) publishResult(ctx context.Context, personality, callID string, res *protocol.Result, callHeader bus.Header) (size int, err error) {
	batch := resultBatch(res.BatchID, callID)
	res.BatchID = batch
	subject, err := w.names.ResultSubject(personality, batch, callID)
	if err != nil {
		return 0, err
	}
	sctx, span := w.obs.StartPublish(ctx, subject, callID)
	defer func() { observe.EndPublish(span, err) }()
	hdr := w.header(sctx, callHeader)
	data, err := w.fitMessage(res, hdr)
	if err != nil {
		return 0, fmt.Errorf("encode result: %w", err)
	}
	span.SetAttributes(semconv.MessagingMessageBodySize(len(data)))
	// The first message on the subject wins (bus.PublishFirst): exactly
	// one result per call, decided by the results stream as it stores it.
	err = w.conn.PublishFirst(sctx, subject, data, hdr)
	var tl *bus.TooLargeError
	if errors.As(err, &tl) {
		// The server refused what the connection said it accepts (another
		// node's smaller max payload, or the stream's max_msg_size).
		limit := "the results stream's maximum message size"
		if !tl.Stream {
			limit = w.limitText(tl.Limit)
		}
		*res = w.oversized(*res, len(data), limit)
		if data, err = protocol.EncodeResult(res); err != nil {
			return 0, fmt.Errorf("encode result: %w", err)
		}
		err = w.conn.PublishFirst(sctx, subject, data, hdr)
	}
	if err != nil {
		return 0, fmt.Errorf("publish result: %w", err)
	}
	return len(data), nil
}

// fitMessage encodes res so that the message, headers hdr and msgID
// included, fits the result limit: a result shaped to fit (shapeResult)
// passes unchanged; another one (a refusal quoting a long argument, a dry
// run of a large call, headers larger than reserved) has its text cut to
// fit, or, when it is untrusted output (whose wrapper a cut would break) or
// nothing fits, is replaced by the execution_failed result naming the
// limit.
func (w *Worker) fitMessage(res *protocol.Result, hdr bus.Header) ([]byte, error) {
	limit := min(w.cfg.ResultMaxBytes, w.conn.MaxPayload())
	data, err := protocol.EncodeResult(res)
	if err != nil {
		return nil, err
	}
	size := bus.ExpectFirstSize(len(data), hdr)
	if size <= limit {
		return data, nil
	}
	room := limit - (size - len(data))
	text := res.Error
	if res.OK {
		text = res.Value
	}
	if (res.OK && res.Untrusted) || !fitText(res, text, 0, nil, room, w.cfg.StructuredMaxBytes) {
		*res = w.oversized(*res, len(data), w.limitText(limit))
	}
	return protocol.EncodeResult(res)
}

// boundCtx returns a context for one bus operation caused by ctx: at most
// opTimeout, never past the end of the shutdown margin (opsBase), and
// carrying ctx's span, so the operation's spans and log lines stay in the
// call's trace. A call's context carries nothing else a bus operation reads
// (inbound baggage is never forwarded) and is never cancelled, so the
// operation's context is one child of opsBase; a ctx that can end (a
// result publish that gives up at the end of the grace) ends it too.
func (w *Worker) boundCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() != nil {
		ctx, cancel := context.WithTimeout(ctx, opTimeout)
		stop := context.AfterFunc(w.opsBase(), cancel)
		return ctx, func() { stop(); cancel() }
	}
	return context.WithTimeout(trace.ContextWithSpan(w.opsBase(), trace.SpanFromContext(ctx)), opTimeout)
}

// publishFault says why a publish to stream failed, as the reason label of
// the publish-failures metric, and whether retrying cannot cure it: a
// message too large, a subject this user may not publish to, or a stream
// that does not exist (asked of the server: no answer may also mean a
// clustered stream without a leader for a moment).
func (w *Worker) publishFault(err error, stream string) (reason string, permanent bool) {
	switch {
	case errors.Is(err, bus.ErrTooLarge):
		return "too_large", true
	case errors.Is(err, bus.ErrPermissionDenied):
		return "permission_denied", true
	case errors.Is(err, bus.ErrNoStream):
		ctx, cancel := w.opCtx()
		defer cancel()
		if ok, cerr := w.conn.StreamExists(ctx, stream); cerr == nil && !ok {
			return "no_stream", true
		}
		return "no_response", false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "timeout", false
	}
	return "unavailable", false
}

// undeliverable handles a call whose result can never be published
// (permission denied, the results stream missing): the call is
// dead-lettered with the reason, acked and audited, so its slot is freed and it does not run again. When the dead
// letter cannot be published either, the call's redelivery is stopped
// (retrying cannot cure that) or, for a fault that may pass, asked for
// later.
func (d *delivery) undeliverable(o outcome, cause error) {
	w, ctx, m, call := d.w, d.ctx, d.m, &d.call
	reason := capReason("result not publishable: " + cause.Error())
	if err := w.deadLetter(m, dlqToolToken(call.Tool), reason); err != nil {
		dreason, permanent := w.publishFault(err, w.names.DLQStream())
		w.obs.PublishFailed(ctx, "dead_letter", dreason)
		if !permanent {
			w.retryLater(ctx, m, call, errors.New(reason))
			observe.SetOutcome(ctx, "retry")
			return
		}
		w.log.ErrorContext(ctx, "call dropped: neither its result nor its dead letter can be published", "call_id", call.CallID, "tool", call.Tool,
			"error", cause, "dead_letter_error", err)
		_ = m.Term(reason)
		observe.SetOutcome(ctx, "terminated")
		w.audit(ctx, call, failed(o, reason), int(m.Deliveries))
		return
	}
	w.ack(ctx, m, call.CallID)
	w.audit(ctx, call, failed(o, reason), int(m.Deliveries))
	observe.SetOutcome(ctx, "dead_lettered")
	w.log.ErrorContext(ctx, "result not publishable; call dead-lettered", "call_id", call.CallID, "tool", call.Tool, "error", cause)
}

// abandonUnpublished gives up the outcome o of a run whose result could not
// be published for ResultRetryLimit: the call is dead-lettered and answered
// with the abandonment result, which keeps the run's duration_ms (the tool
// ran) but none of its output. When the dead letter cannot be published either (the
// bus is still down), the call is handed back with backoff: a later
// delivery runs it again, and after MaxDeliver deliveries the advisory's
// handler abandons it.
func (d *delivery) abandonUnpublished(ran outcome, cause error) {
	w, ctx, m, call := d.w, d.ctx, d.m, &d.call
	reason := capReason(fmt.Sprintf("result not published within %s: %v", w.retryLimit, cause))
	if err := w.deadLetter(m, dlqToolToken(call.Tool), reason); err != nil {
		dreason, _ := w.publishFault(err, w.names.DLQStream())
		w.obs.PublishFailed(ctx, "dead_letter", dreason)
		w.retryLater(ctx, m, call, errors.New(reason))
		observe.SetOutcome(ctx, "retry")
		return
	}
	o := refuse(call, protocol.DecisionAbandoned, protocol.CodeExecutionFailed,
		fmt.Sprintf("call abandoned after %d deliveries: %s", max(m.Deliveries, 1), reason))
	o.result.DurationMS = ran.result.DurationMS
	pctx, cancel := w.boundCtx(ctx)
	defer cancel()
	if err := d.publish(pctx, &o); err != nil {
		// The dead letter holds the call; its caller's wait ends with
		// "Tool result missing".
		rreason, _ := w.publishFault(err, w.names.ResultsStream())
		w.obs.PublishFailed(ctx, "result", rreason)
		w.log.WarnContext(ctx, "abandonment result not published", "call_id", call.CallID, "error", err)
	}
	d.complete(o)
}

// failed is o with its result replaced by the execution_failed result
// reason, for the audit record of a call whose result never went out.
func failed(o outcome, reason string) outcome {
	res := o.result
	o.result = protocol.Result{CallID: res.CallID, BatchID: res.BatchID, Tool: res.Tool, Code: protocol.CodeExecutionFailed,
		Error: reason, DurationMS: res.DurationMS, Blob: res.Blob}
	o.bytes = 0
	return o
}

// dlqToolToken is the <tool> token of a call's dead-letter subject.
func dlqToolToken(tool string) string {
	if protocol.ValidToken(tool) {
		return tool
	}
	return invalidToolToken
}
