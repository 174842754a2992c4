package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
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
	subject string
	data    []byte
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
	subject, err := c.names.CallSubject(pool, call.Tool)
	if err != nil {
		return outgoing{}, fmt.Errorf("client: tool catalog routes %s to an invalid pool: %w", call.Tool, err)
	}
	return outgoing{subject: subject, data: data}, nil
}

func refuse(call *Call, code protocol.Code, msg string) *RefusedError {
	return &RefusedError{Result: protocol.Failure(call, code, msg)}
}

// publish stores the call; duplicate reports that its call_id was already
// submitted within the de-duplication window (the first call stands).
func (c *Client) publish(ctx context.Context, callID string, out outgoing) (duplicate bool, err error) {
	hdr := bus.Header{}
	hdr.Set(protocol.HeaderProtocol, protocol.Version)
	duplicate, err = c.conn.Publish(ctx, out.subject, out.data, hdr, callID)
	if err != nil {
		return false, fmt.Errorf("client: submit %s: %w", callID, err)
	}
	return duplicate, nil
}
