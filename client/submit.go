package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// RefusedError reports a call the client refused before publishing it: an
// invalid call (input_invalid, with the same message a worker would give) or
// a tool the catalog says no pool hosts (not_available / "Unknown tool:
// <name>"). Result is the answer the caller should use in place of a
// worker's; telling it from an infrastructure error is errors.As.
type RefusedError struct {
	Result Result
}

// Error returns "client: call <id> refused: <code>: <message>".
func (e *RefusedError) Error() string {
	return fmt.Sprintf("client: call %s refused: %s: %s", e.Result.CallID, e.Result.Code, e.Result.Error)
}

// outgoing is a checked call ready to publish.
type outgoing struct {
	subject     string
	data        []byte
	tool, batch string
}

// Submit publishes one call and returns once JetStream has stored it; it does
// not wait for the result (see Await). It fills an empty call.CallID with a
// NewID and nil call.Args with {}, so the caller can Await the call.
//
// The call is checked first exactly as a worker decodes it (tokens, required
// fields, types, the 1 MiB limit); a bad call is refused with a *RefusedError
// holding an input_invalid result, and so is an unknown tool when the catalog
// has at least one tool of the default pool (not_available / "Unknown tool:
// <name>"). A tool in the catalog is published to its pool, any other to
// "default". Submitting a call_id again within the de-duplication window
// (15 min) is a no-op: the first call stands, and its result is published in
// the first call's batch.
func (c *Client) Submit(ctx context.Context, call *Call) error {
	out, err := c.prepare(call)
	if err != nil {
		return err
	}
	_, err = c.publish(ctx, call.CallID, out)
	return err
}

// prepare fills defaults, checks the call and routes it. Every error is a
// *RefusedError except a pool name from the catalog that is not a token.
func (c *Client) prepare(call *Call) (outgoing, error) {
	if call.CallID == "" {
		call.CallID = NewID()
	}
	if call.Args == nil {
		call.Args = json.RawMessage("{}")
	}
	if call.PersonalityID == "" {
		call.PersonalityID = c.personality
	}
	data, err := protocol.EncodeCall(call)
	if err != nil {
		return outgoing{}, refuse(call, protocol.CodeInputInvalid, "invalid call: "+err.Error())
	}
	if _, err := protocol.DecodeCall(data); err != nil {
		return outgoing{}, refuse(call, protocol.CodeInputInvalid, err.Error())
	}
	pool, unknown := c.route(call.Tool)
	if unknown {
		return outgoing{}, refuse(call, protocol.CodeNotAvailable, "Unknown tool: "+call.Tool)
	}
	subject, err := c.names.CallSubject(pool, call.PersonalityID, call.Tool)
	if err != nil {
		return outgoing{}, fmt.Errorf("client: tool catalog routes %s to an invalid pool: %w", call.Tool, err)
	}
	return outgoing{subject: subject, data: data, tool: call.Tool, batch: call.EffectiveBatchID()}, nil
}

func refuse(call *Call, code protocol.Code, msg string) *RefusedError {
	return &RefusedError{Result: protocol.Failure(call, code, msg)}
}

// publish stores the call; duplicate reports that its call_id was already
// submitted within the de-duplication window (the first call stands).
//
// Each publication is a producer span ("send <subject>", OTel messaging and
// GenAI attributes, never the arguments) whose context is injected into the
// call's traceparent and tracestate headers: the worker's consumer span
// links to it.
func (c *Client) publish(ctx context.Context, callID string, out outgoing) (duplicate bool, err error) {
	ctx, span := c.tracer.Start(ctx, "send "+out.subject, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		semconv.MessagingSystemKey.String("nats"),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
		semconv.MessagingDestinationName(out.subject),
		semconv.MessagingMessageID(callID),
		semconv.MessagingMessageBodySize(len(out.data)),
		telemetry.GenAIToolName.String(out.tool),
		telemetry.GenAIToolCallID.String(toolCallID(ctx, callID)),
		telemetry.AttrBatchID.String(out.batch),
	))
	defer span.End()
	hdr := bus.Header{}
	hdr.Set(protocol.HeaderProtocol, protocol.Version)
	telemetry.Inject(ctx, hdr)
	duplicate, err = c.conn.Publish(ctx, out.subject, out.data, hdr, callID)
	if err != nil {
		span.SetStatus(codes.Error, "publish failed")
		span.SetAttributes(semconv.ErrorTypeOther)
		return false, fmt.Errorf("client: submit %s: %w", callID, err)
	}
	if duplicate {
		span.SetAttributes(telemetry.AttrDuplicate.Bool(true))
	}
	return duplicate, nil
}
