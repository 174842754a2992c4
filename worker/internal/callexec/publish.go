package callexec

import (
	"context"
	"errors"
	"fmt"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/worker/internal/observe"
	"go.opentelemetry.io/otel/trace"
)

// opsBase is the parent context of every bus operation of the worker; it
// ends ShutdownMargin after the grace.
func (s *Services) opsBase() context.Context {
	if s.ops == nil {
		return context.Background()
	}
	return s.ops
}

// PublishResult publishes a call's result in a producer span ("send
// <p>.result.{personality}.{batch_id}.{call_id}", a child of ctx's span)
// whose context the result's traceparent carries. The message never exceeds
// the result limit (the smaller of ResultMaxBytes and the server's max
// payload): a result that does not fit is cut as the budget trim cuts
// (fitMessage), and one the server still refuses for its size is replaced
// by the execution_failed result naming the limit. *res becomes what was
// published; size is its body's length. ctx bounds the publish (boundCtx).
func (s *Services) PublishResult(ctx context.Context, personality, callID string, res *protocol.Result, callHeader bus.Header) (size int, err error) {
	batch := resultBatch(res.BatchID, callID)
	res.BatchID = batch
	subject, err := s.names.ResultSubject(personality, batch, callID)
	if err != nil {
		return 0, err
	}
	sctx, span := s.obs.StartPublish(ctx, subject, callID)
	defer func() { span.End(err) }()
	hdr := s.header(sctx, callHeader)
	data, err := s.fitMessage(res, hdr)
	if err != nil {
		return 0, fmt.Errorf("encode result: %w", err)
	}
	span.SetBodySize(len(data))
	// The first message on the subject wins (bus.PublishFirst): exactly
	// one result per call, decided by the results stream as it stores it.
	err = s.bus.PublishFirst(sctx, subject, data, hdr)
	var tl *bus.TooLargeError
	if errors.As(err, &tl) {
		// The server refused what the connection said it accepts (another
		// node's smaller max payload, or the stream's max_msg_size).
		limit := "the results stream's maximum message size"
		if !tl.Stream {
			limit = s.limitText(tl.Limit)
		}
		*res = s.oversized(*res, len(data), limit)
		if data, err = protocol.EncodeResult(res); err != nil {
			return 0, fmt.Errorf("encode result: %w", err)
		}
		err = s.bus.PublishFirst(sctx, subject, data, hdr)
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
func (s *Services) fitMessage(res *protocol.Result, hdr bus.Header) ([]byte, error) {
	limit := min(s.cfg.ResultMaxBytes, s.bus.MaxPayload())
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
	if (res.OK && res.Untrusted) || !fitText(res, text, 0, nil, room, s.cfg.StructuredMaxBytes) {
		*res = s.oversized(*res, len(data), s.limitText(limit))
	}
	return protocol.EncodeResult(res)
}

// BoundCtx returns a context for one bus operation caused by ctx: at most
// OpTimeout, never past the end of the shutdown margin (opsBase), and
// carrying ctx's span, so the operation's spans and log lines stay in the
// call's trace. A call's context carries nothing else a bus operation reads
// (inbound baggage is never forwarded) and is never cancelled, so the
// operation's context is one child of opsBase; a ctx that can end (a
// result publish that gives up at the end of the grace) ends it too.
func (s *Services) BoundCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() != nil {
		ctx, cancel := context.WithTimeout(ctx, OpTimeout)
		stop := context.AfterFunc(s.opsBase(), cancel)
		return ctx, func() { stop(); cancel() }
	}
	return context.WithTimeout(trace.ContextWithSpan(s.opsBase(), trace.SpanFromContext(ctx)), OpTimeout)
}

// publishFault says why a publish to stream failed, as the reason label of
// the publish-failures metric, and whether retrying cannot cure it: a
// message too large, a subject this user may not publish to, or a stream
// that does not exist (asked of the server: no answer may also mean a
// clustered stream without a leader for a moment).
func (s *Services) publishFault(err error, stream string) (reason string, permanent bool) {
	switch {
	case errors.Is(err, bus.ErrTooLarge):
		return "too_large", true
	case errors.Is(err, bus.ErrPermissionDenied):
		return "permission_denied", true
	case errors.Is(err, bus.ErrNoStream):
		ctx, cancel := s.opCtx()
		defer cancel()
		if ok, cerr := s.bus.StreamExists(ctx, stream); cerr == nil && !ok {
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
func (e *Executor) undeliverable(o outcome, cause error) {
	s, ctx, m, call := e.s, e.ctx, e.m, &e.call
	reason := capReason("result not publishable: " + cause.Error())
	if err := s.deadLetter(m, dlqToolToken(call.Tool), reason); err != nil {
		dreason, permanent := s.publishFault(err, s.names.DLQStream())
		s.obs.PublishFailed(ctx, "dead_letter", dreason)
		if !permanent {
			s.retryLater(ctx, m, call, errors.New(reason))
			observe.SetOutcome(ctx, "retry")
			return
		}
		s.log.ErrorContext(ctx, "call dropped: neither its result nor its dead letter can be published", "call_id", call.CallID, "tool", call.Tool,
			"error", cause, "dead_letter_error", err)
		_ = m.Term(reason)
		observe.SetOutcome(ctx, "terminated")
		s.audit(ctx, call, failed(o, reason), int(m.Deliveries))
		return
	}
	s.ack(ctx, m, call.CallID)
	s.audit(ctx, call, failed(o, reason), int(m.Deliveries))
	observe.SetOutcome(ctx, "dead_lettered")
	s.log.ErrorContext(ctx, "result not publishable; call dead-lettered", "call_id", call.CallID, "tool", call.Tool, "error", cause)
}

// abandonUnpublished gives up the outcome o of a run whose result could not
// be published for ResultRetryLimit: the call is dead-lettered and answered
// with the abandonment result, which keeps the run's duration_ms (the tool
// ran) but none of its output. When the dead letter cannot be published either (the
// bus is still down), the call is handed back with backoff: a later
// delivery runs it again, and after MaxDeliver deliveries the advisory's
// handler abandons it.
func (e *Executor) abandonUnpublished(ran outcome, cause error) {
	s, ctx, m, call := e.s, e.ctx, e.m, &e.call
	reason := capReason(fmt.Sprintf("result not published within %s: %v", s.cfg.RetryLimit, cause))
	if err := s.deadLetter(m, dlqToolToken(call.Tool), reason); err != nil {
		dreason, _ := s.publishFault(err, s.names.DLQStream())
		s.obs.PublishFailed(ctx, "dead_letter", dreason)
		s.retryLater(ctx, m, call, errors.New(reason))
		observe.SetOutcome(ctx, "retry")
		return
	}
	o := refuse(call, protocol.DecisionAbandoned, protocol.CodeExecutionFailed,
		fmt.Sprintf("call abandoned after %d deliveries: %s", max(m.Deliveries, 1), reason))
	o.result.DurationMS = ran.result.DurationMS
	pctx, cancel := s.BoundCtx(ctx)
	defer cancel()
	if err := e.publish(pctx, &o); err != nil {
		// The dead letter holds the call; its caller's wait ends with
		// "Tool result missing".
		rreason, _ := s.publishFault(err, s.names.ResultsStream())
		s.obs.PublishFailed(ctx, "result", rreason)
		s.log.WarnContext(ctx, "abandonment result not published", "call_id", call.CallID, "error", err)
	}
	e.complete(o)
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
