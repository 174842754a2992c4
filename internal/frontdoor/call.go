package frontdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/client/envelope"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
)

// Meta keys of the _meta of every tools/call result.
const (
	// MetaCallID is the Capstan call_id: `dispatcher result <call_id>
	// --personality <p>` shows the stored result, also after the MCP
	// connection is gone.
	MetaCallID = "capstan/call_id"
	// MetaCode is the result's code (failures only).
	MetaCode = "capstan/code"
)

// CancelReason is the reason of the Capstan cancel published when an MCP
// client cancels its tools/call, followed by ": <the client's reason>" when
// it gave one; the call's result is then "execution_failed: cancelled: by
// MCP client[: <reason>]".
const CancelReason = "by MCP client"

// maxClientReason bounds the client's reason copied into a cancel, in
// characters (on one line).
const maxClientReason = 200

// publishTimeout bounds publishing a call or a cancel request; both run
// without the request's context so that a request cancelled mid-publish
// still either publishes or fails clearly.
const publishTimeout = 10 * time.Second

var (
	errNoResult     = errors.New("no result before the wait ended")
	errShuttingDown = errors.New("the MCP front door is shutting down")
	// errInputRequired ends the wait of a held call whose client is asked
	// in the request's result (elicitation.go).
	errInputRequired = errors.New("the call is held for approval and the client is asked to decide")
)

// callTool runs one tools/call as a Capstan call of the session's
// personality and turns its result into an MCP result.
//
// The request's context ends for different reasons that mean different
// things, and the SDK does not tell them apart, so the transports record
// MCP cancellations (requests.go). An MCP cancellation
// (notifications/cancelled) cancels the Capstan call too. A lost connection
// (stdin closed, a failed write, a closed session) or the front door's
// shutdown (Server.Close, a signal) leaves the call running: its result
// stays in the results stream (MetaCallID names it).
func (p *personalityServer) callTool(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if req.Params.RequestState != "" || len(req.Params.InputResponses) > 0 {
		return p.resumeHeld(ctx, req) // the retry of a call held for approval (elicitation.go)
	}
	args := bytes.TrimSpace(req.Params.Arguments)
	if len(args) == 0 || bytes.Equal(args, []byte("null")) {
		args = []byte("{}")
	}
	session := sessionID(req)
	requestID := requestIDOf(req)
	key := requestKey{user: tokenUser(tokenInfo(req)), session: session, id: requestID}
	defer p.front.cancels.take(key) // forget a cancellation that came too late
	call := client.Call{
		CallID:        client.NewID(),
		Tool:          req.Params.Name,
		Args:          json.RawMessage(args),
		SessionID:     session,
		SessionKey:    SessionKey(tokenName(req), requestID),
		Platform:      Platform,
		PersonalityID: p.id,
		AgentID:       tokenName(req),
		TimeoutMS:     p.front.cfg.CallTimeout.Milliseconds(),
	}
	ctx = withTraceContext(ctx, req.Params.Meta)
	log := p.log.With("call_id", call.CallID, "tool", call.Tool, "mcp_session_id", session, "mcp_request_id", requestID)
	start := time.Now()

	// The call's progress events are followed from before it is published:
	// they become progress notifications (with a progress token) and its
	// approval_required event a question to the user (elicitation.go).
	relay := newProgressRelay(ctx, req)
	asker := p.newApprovalAsker(ctx, req, log)
	if relay != nil || asker != nil {
		stop, err := p.follow(ctx, call.CallID, relay.forward, asker.onEvent)
		if err != nil {
			log.WarnContext(ctx, "the call's progress cannot be followed: no MCP progress notifications and no approval question for this call", "error", err)
			relay, asker = nil, nil
		} else {
			defer stop()
		}
	}
	defer relay.stop()
	defer asker.stop()

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	err := p.c.Submit(pctx, &call)
	cancel()
	if err != nil {
		var refused *client.RefusedError
		if errors.As(err, &refused) {
			return toolResult(refused.Result), nil
		}
		log.ErrorContext(ctx, "call not published", "error", err)
		return toolResult(protocol.Failure(&call, protocol.CodeExecutionFailed, "the call could not be published: "+err.Error())), nil
	}
	return p.answer(ctx, key, &call, log, relay, asker, start)
}

// answer waits for the result of a published call and turns it into the
// answer of the request key: the result; nothing when the request ended
// (after cancelling the call when its client cancelled it); or, when the
// asker asks in the request's result, the input-required result asking
// the client to decide the held call (elicitation.go).
func (p *personalityServer) answer(ctx context.Context, key requestKey, call *client.Call, log *slog.Logger,
	relay *progressRelay, asker *approvalAsker, start time.Time) (*mcp.CallToolResult, error) {
	r, err := p.await(ctx, call.CallID, asker.inputNeeded())
	switch {
	case err == nil:
		relay.drain()
		log.InfoContext(ctx, "mcp call", "ok", r.OK, "code", string(r.Code), "duration_ms", time.Since(start).Milliseconds())
		return toolResult(r), nil
	case errors.Is(err, errInputRequired):
		log.InfoContext(ctx, "call held for approval; asking the MCP client (input required)")
		return asker.inputRequired(call.CallID), nil
	case errors.Is(err, errNoResult):
		log.WarnContext(ctx, "mcp call without result before the wait ended", "wait", p.front.cfg.Wait.String())
		return toolResult(protocol.Failure(call, protocol.CodeExecutionFailed, client.ResultMissing)), nil
	case ctx.Err() != nil || errors.Is(err, errShuttingDown):
		if reason, cancelled := p.front.cancels.take(key); cancelled && key.id != "" && ctx.Err() != nil {
			p.cancel(ctx, log, call.CallID, reason)
			return nil, ctx.Err()
		}
		log.InfoContext(ctx, "MCP request ended before its result; the call continues and its result stays in the results stream",
			"reason", err.Error())
		return nil, fmt.Errorf("call %s continues, but this request ended: %w", call.CallID, err)
	default:
		log.ErrorContext(ctx, "waiting for the result failed", "error", err)
		return toolResult(protocol.Failure(call, protocol.CodeExecutionFailed, "waiting for the result failed: "+err.Error())), nil
	}
}

// cancel publishes the Capstan cancel of a call whose MCP client cancelled
// its request.
func (p *personalityServer) cancel(ctx context.Context, log *slog.Logger, callID, clientReason string) {
	reason := CancelReason
	clientReason = strings.Join(strings.FieldsFunc(clientReason, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if r := []rune(clientReason); len(r) > maxClientReason {
		clientReason = string(r[:maxClientReason])
	}
	if clientReason != "" {
		reason += ": " + clientReason
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := p.c.Cancel(cctx, callID, reason); err != nil {
		log.ErrorContext(ctx, "MCP client cancelled the request, but the Capstan cancel failed", "error", err)
		return
	}
	log.InfoContext(ctx, "MCP client cancelled the request; Capstan call cancelled", "reason", reason)
}

// await waits for the result of the call. It returns errNoResult when
// Config.Wait passed, errShuttingDown when the Server closed,
// errInputRequired when inputNeeded is closed first, and the cause of ctx's
// end when the request ended.
func (p *personalityServer) await(ctx context.Context, callID string, inputNeeded <-chan struct{}) (client.Result, error) {
	wctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	wctx, cancelWait := context.WithTimeoutCause(wctx, p.front.cfg.Wait, errNoResult)
	defer cancelWait()
	if inputNeeded != nil {
		done := wctx.Done()
		go func() {
			select {
			case <-inputNeeded:
				cancel(errInputRequired)
			case <-done:
			}
		}()
	}
	stopReq := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stopReq()
	stopSrv := context.AfterFunc(p.front.ctx, func() { cancel(errShuttingDown) })
	defer stopSrv()
	r, err := p.c.Await(wctx, "", callID)
	if err == nil {
		return r, nil
	}
	if cause := context.Cause(wctx); cause != nil {
		return client.Result{}, cause
	}
	return client.Result{}, err
}

// toolResult turns a Capstan result into an MCP tool result, as
// client/envelope renders MCP results: ok → the value as text content (and
// a structured payload that is a JSON object as structuredContent); failure
// → isError with "<code>: <message>"; either text followed by the lines
// naming a stored blob or structured content left out (envelope.Text).
func toolResult(r client.Result) *mcp.CallToolResult {
	meta := mcp.Meta{MetaCallID: r.CallID}
	out := &mcp.CallToolResult{Meta: meta, IsError: !r.OK, Content: []mcp.Content{&mcp.TextContent{Text: envelope.Text(r)}}}
	if !r.OK {
		meta[MetaCode] = string(r.Code)
		return out
	}
	if s := bytes.TrimSpace(r.Structured); len(s) > 0 && s[0] == '{' && json.Valid(s) {
		out.StructuredContent = json.RawMessage(s)
	}
	return out
}

// withTraceContext returns ctx carrying the W3C trace context of a request's
// _meta (traceparent, tracestate), so that the call's producer span, and so
// its traceparent header, continue the MCP client's trace.
func withTraceContext(ctx context.Context, meta mcp.Meta) context.Context {
	h := map[string][]string{}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v, ok := meta[k].(string); ok && v != "" {
			h[k] = []string{v}
		}
	}
	if len(h) == 0 {
		return ctx
	}
	return telemetry.Extract(ctx, h)
}

// sessionID is the session_id of a call: the MCP session id (stdio sessions
// get a generated one), or a fresh id for a request without a session.
func sessionID(req *mcp.CallToolRequest) string {
	if req.Session != nil {
		if id := req.Session.ID(); id != "" {
			return id
		}
	}
	return "mcp-" + client.NewID()
}

// SessionKey is the session_key of a call: "mcp:<token name>:<MCP request
// id>" for HTTP sessions and "mcp:stdio:<MCP request id>" for stdio, so the
// MCP request a call answers can be found in audit records and logs.
func SessionKey(tokenName, requestID string) string {
	if tokenName == "" {
		tokenName = "stdio"
	}
	return "mcp:" + tokenName + ":" + requestID
}

// tokenName is the name of the bearer token of an HTTP request ("" for
// stdio).
func tokenName(req *mcp.CallToolRequest) string {
	return tokenLabel(tokenInfo(req))
}

// tokenInfo is the verified bearer token of an HTTP request (nil for stdio).
func tokenInfo(req *mcp.CallToolRequest) *auth.TokenInfo {
	if req.Extra == nil {
		return nil
	}
	return req.Extra.TokenInfo
}

// tokenLabel is the name a verified token carries.
func tokenLabel(ti *auth.TokenInfo) string {
	if ti == nil {
		return ""
	}
	name, _ := ti.Extra[extraName].(string)
	return name
}
