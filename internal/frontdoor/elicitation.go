package frontdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/protocol"
)

// A call held for approval (the personality's approval section) is asked
// of the MCP client when its session may decide: the personality sets
// approval.self and the client declared the elicitation capability. The front door follows the
// call's progress events; at its approval_required event it sends one
// elicitation/create naming the tool, the arguments and the reach the call
// would get, and turns the answer into the caller's own decision
// (client.ApproveOwn / client.DenyOwn). The call's result then arrives as
// usual: an ordinary result once approved, "not_available:
// APPROVAL_DENIED: <reason>" once denied.
//
// A client of protocol 2026-07-28 or later may not be sent requests while
// it waits for a result (multi round-trip requests, SEP-2322): it is asked
// in the result instead. The tools/call is answered "input required" with
// the same elicitation under the key ApprovalInput and a request state
// naming the held call (signed by the front door, for this session and
// personality); the client's retry of the call with the answer decides the
// held call and waits for its result, without publishing another call.

// Answers of the elicitation a held call sends (elicitationSchema).
const (
	// ElicitApprove is the boolean property of the answer: true approves
	// the call, false denies it.
	ElicitApprove = "approve"
	// ElicitReason is the optional string property of the answer: the
	// reason of the decision (a denial's reason in APPROVAL_DENIED), one
	// line, at most approval.MaxReason characters (longer is cut).
	ElicitReason = "reason"
)

// Reasons of the denials an elicitation answer gives without a reason of
// its own.
const (
	// DeclinedReason denies a call whose elicitation was answered "decline",
	// or "accept" with approve false and no reason.
	DeclinedReason = "declined by the user"
	// CancelledReason denies a call whose elicitation was answered "cancel"
	// (dismissed without a choice): the agent gets its answer at once
	// instead of waiting for an approver until the hold expires.
	CancelledReason = "cancelled by the user"
)

// DefaultDecider is the decider's name ("by") of a decision answered by an
// MCP client whose session has no token name (stdio); an HTTP session's
// decisions carry its token's name.
const DefaultDecider = "mcp client"

// elicitationSchema is the requested schema of every approval question: a
// required boolean ElicitApprove and an optional string ElicitReason.
var elicitationSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"approve":{"type":"boolean","title":"Approve","description":"Run the call once, with exactly these arguments"},` +
	`"reason":{"type":"string","title":"Reason","description":"Why (optional; shown to the agent when you deny)"}` +
	`},"required":["approve"]}`)

// ApprovalInput is the key of the approval question in the inputRequests
// of an input-required tools/call result, and of its answer in the
// retry's inputResponses.
const ApprovalInput = "capstan_approval"

// protocolNoServerRequests is the first MCP protocol version on which a
// server may not send requests while serving one (SEP-2322): a client of
// that version is asked in the tools/call result.
const protocolNoServerRequests = "2026-07-28"

// Bounds of the approval question's text.
const (
	maxQuestionArgs = 2000 // characters of the arguments' JSON
	maxQuestionList = 10   // entries of each grant list
)

// approvalAsker asks the MCP client of one tools/call to decide the call
// when it is held for approval. A nil *approvalAsker does nothing.
type approvalAsker struct {
	p   *personalityServer
	ss  *mcp.ServerSession
	by  string
	log *slog.Logger
	// inResult: the client is asked in the tools/call result (protocol
	// 2026-07-28 and later), else with elicitation/create.
	inResult bool
	session  string
	user     string
	// ctx ends when the tools/call request does (stop): the question is
	// withdrawn once the call has its result.
	ctx    context.Context
	cancel context.CancelFunc
	// needed is closed at the approval_required event when inResult.
	needed chan struct{}

	mu      sync.Mutex
	asked   bool
	stopped bool
	held    client.ApprovalRequest
	wg      sync.WaitGroup
}

// newApprovalAsker returns the asker of one tools/call, or nil when its
// session cannot decide: the personality does not set approval.self (as
// last read, at the tool-list refreshes), or the client did not declare
// form elicitation.
func (p *personalityServer) newApprovalAsker(ctx context.Context, req *mcp.CallToolRequest, log *slog.Logger) *approvalAsker {
	if !p.selfApproval.Load() || !clientElicits(req.Session) {
		return nil
	}
	actx, cancel := context.WithCancel(ctx)
	return &approvalAsker{p: p, ss: req.Session, by: decider(req), log: log,
		inResult: req.Session.InitializeParams().ProtocolVersion >= protocolNoServerRequests,
		session:  sessionID(req), user: tokenUser(tokenInfo(req)),
		ctx: actx, cancel: cancel, needed: make(chan struct{})}
}

// decider is the name a request's decisions carry: its token's name, else
// DefaultDecider.
func decider(req *mcp.CallToolRequest) string {
	if by := tokenName(req); by != "" {
		return by
	}
	return DefaultDecider
}

// clientElicits reports whether the session's client declared the form
// elicitation capability.
func clientElicits(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return false
	}
	e := ip.Capabilities.Elicitation
	return e.Form != nil || e.URL == nil // neither: form (the SDK's reading)
}

// onEvent asks the question at the call's first approval_required event.
// It never blocks: the question runs on its own goroutine, or is left to
// the request's result (inputNeeded).
func (a *approvalAsker) onEvent(ev client.Progress) {
	if a == nil || ev.Kind != protocol.ProgressKindApprovalRequired || ev.Approval == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.asked || a.stopped {
		return
	}
	a.asked = true
	a.held = *ev.Approval
	if a.inResult {
		close(a.needed)
		return
	}
	held := a.held
	a.wg.Go(func() { a.ask(held) })
}

// inputNeeded is closed when the client is to be asked in the request's
// result; nil when it never is.
func (a *approvalAsker) inputNeeded() <-chan struct{} {
	if a == nil || !a.inResult {
		return nil
	}
	return a.needed
}

// inputRequired is the input-required result asking the client to decide
// the held call (after inputNeeded was closed).
func (a *approvalAsker) inputRequired(callID string) *mcp.CallToolResult {
	a.mu.Lock()
	held := a.held
	a.mu.Unlock()
	state := a.p.front.states.seal(heldState{Personality: a.p.id, Session: a.session, User: a.user,
		CallID: held.CallID, ArgsSHA256: held.ArgsSHA256, Tool: held.Tool})
	return &mcp.CallToolResult{
		Meta:          mcp.Meta{MetaCallID: callID},
		InputRequests: mcp.InputRequestMap{ApprovalInput: approvalElicitation(held)},
		RequestState:  state,
	}
}

// stop withdraws an unanswered question and waits for the asking goroutine.
func (a *approvalAsker) stop() {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	a.cancel()
	a.wg.Wait()
}

// approvalElicitation is the elicitation of a held call.
func approvalElicitation(held client.ApprovalRequest) *mcp.ElicitParams {
	return &mcp.ElicitParams{Mode: "form", Message: approvalQuestion(held), RequestedSchema: elicitationSchema}
}

// ask sends the elicitation (until the hold expires or the request ends)
// and decides the call by the answer. A failed or unanswered question
// leaves the call held for an approver.
func (a *approvalAsker) ask(held client.ApprovalRequest) {
	log := a.log.With("args_sha256", held.ArgsSHA256)
	ctx := a.ctx
	if !held.ExpiresAt.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, held.ExpiresAt)
		defer cancel()
	}
	log.InfoContext(ctx, "call held for approval; asking the MCP client (elicitation)")
	res, err := a.ss.Elicit(ctx, approvalElicitation(held))
	if err != nil {
		if ctx.Err() == nil {
			log.WarnContext(ctx, "the MCP client did not answer the approval question; the call waits for an approver", "error", err)
		}
		return
	}
	a.p.decide(ctx, log, held.CallID, held.ArgsSHA256, a.by, res)
}

// decide sends the decision of an answer to the approval question of the
// held call callID. The user decided: the decision is sent even when the
// request has just ended. A refused decision (decided already, expired) is
// logged; the call's result says what became of it.
func (p *personalityServer) decide(ctx context.Context, log *slog.Logger, callID, argsSHA256, by string, res *mcp.ElicitResult) {
	approve, reason, ok := decisionOf(res)
	if !ok {
		log.WarnContext(ctx, "the MCP client's answer to the approval question is not one of accept, decline, cancel; the call waits for an approver",
			"action", res.Action)
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	var err error
	decision := protocol.ApprovalDenied
	if approve {
		decision = protocol.ApprovalApproved
		_, err = p.c.ApproveOwn(dctx, callID, argsSHA256, reason, by)
	} else {
		_, err = p.c.DenyOwn(dctx, callID, reason, by)
	}
	var refused *client.DecisionRefusedError
	switch {
	case errors.As(err, &refused):
		log.WarnContext(ctx, "the MCP client's decision was refused", "decision", decision, "by", by, "error", refused.Reason)
	case err != nil:
		log.ErrorContext(ctx, "the MCP client's decision could not be sent; the call waits for an approver", "decision", decision, "error", err)
	default:
		log.InfoContext(ctx, "MCP client decided the held call", "decision", decision, "by", by, "action", res.Action)
	}
}

// resumeHeld serves the retry of a tools/call answered "input required":
// its request state names the held call (for this personality, session and
// token), its inputResponses carry the answer under ApprovalInput. The
// answer decides the call, and the request waits for the call's result as
// the first one did; no call is published.
func (p *personalityServer) resumeHeld(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	session := sessionID(req)
	user := tokenUser(tokenInfo(req))
	st, err := p.front.states.open(req.Params.RequestState)
	if err != nil || st.Personality != p.id || st.Session != session || st.User != user || st.Tool != req.Params.Name {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: "requestState: not a request state this MCP front door gave this session for this tool"}
	}
	res, ok := req.Params.InputResponses[ApprovalInput].(*mcp.ElicitResult)
	if !ok || res == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: "inputResponses: " + ApprovalInput + " must be the answer of the approval question (an elicitation result)"}
	}
	requestID := requestIDOf(req)
	key := requestKey{user: user, session: session, id: requestID}
	defer p.front.cancels.take(key)
	ctx = withTraceContext(ctx, req.Params.Meta)
	log := p.log.With("call_id", st.CallID, "tool", st.Tool, "mcp_session_id", session, "mcp_request_id", requestID)

	relay := newProgressRelay(ctx, req)
	if relay != nil {
		// The events up to the approval_required one were forwarded to the
		// first request already.
		stop, err := p.follow(ctx, st.CallID, func(ev client.Progress) {
			if ev.Kind != protocol.ProgressKindApprovalRequired {
				relay.forward(ev)
			}
		})
		if err != nil {
			log.WarnContext(ctx, "the call's progress cannot be followed: no MCP progress notifications for this call", "error", err)
			relay = nil
		} else {
			defer stop()
		}
	}
	defer relay.stop()

	p.decide(ctx, log.With("args_sha256", st.ArgsSHA256), st.CallID, st.ArgsSHA256, decider(req), res)
	call := client.Call{CallID: st.CallID, Tool: st.Tool, PersonalityID: p.id}
	return p.answer(ctx, key, &call, log, relay, nil, time.Now())
}

// decisionOf turns an elicitation answer into a decision: "accept" with
// approve true approves (with the optional reason); "accept" with approve
// false and "decline" deny with the reason given, else DeclinedReason;
// "cancel" denies with CancelledReason. ok is false for any other action.
func decisionOf(res *mcp.ElicitResult) (approve bool, reason string, ok bool) {
	switch res.Action {
	case "accept":
		approve, _ = res.Content[ElicitApprove].(bool)
		r, _ := res.Content[ElicitReason].(string)
		reason = oneLine(r, approval.MaxReason)
		if !approve && reason == "" {
			reason = DeclinedReason
		}
		return approve, reason, true
	case "decline":
		return false, DeclinedReason, true
	case "cancel":
		return false, CancelledReason, true
	default:
		return false, "", false
	}
}

// approvalQuestion is the message of the approval question of a held call:
// the tool, its arguments as the worker summarised them (secret values
// redacted, the JSON cut after maxQuestionArgs characters), the reach the
// call would get, and when the hold expires.
func approvalQuestion(h client.ApprovalRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Approve this call of the tool %s? It runs once, with exactly these arguments, only if you approve.\n", h.Tool)
	fmt.Fprintf(&b, "Arguments: %s\n", questionArgs(h.Summary.Args))
	g := h.Summary.Grant
	var reach []string
	for _, l := range []struct {
		name string
		list []string
	}{
		{"hosts", g.Hosts}, {"reads", g.ReadPaths}, {"writes", g.WritePaths},
		{"runs", g.Binaries}, {"secrets", g.Secrets}, {"key-value", g.KV},
	} {
		if len(l.list) == 0 {
			continue
		}
		list := l.list
		more := ""
		if len(list) > maxQuestionList {
			list, more = list[:maxQuestionList], fmt.Sprintf(" and %d more", len(l.list)-maxQuestionList)
		}
		reach = append(reach, l.name+": "+strings.Join(list, ", ")+more)
	}
	if len(reach) == 0 {
		b.WriteString("Reach: nothing beyond the tool itself (no hosts, paths, binaries, secrets or key-value scopes).\n")
	} else {
		b.WriteString("Reach: " + strings.Join(reach, "; ") + ".\n")
	}
	fmt.Fprintf(&b, "Call %s", h.CallID)
	if !h.ExpiresAt.IsZero() {
		fmt.Fprintf(&b, "; without a decision it expires at %s", h.ExpiresAt.UTC().Format(time.RFC3339))
	}
	b.WriteString(".")
	return b.String()
}

// questionArgs renders summarised arguments as compact JSON, cut after
// maxQuestionArgs characters.
func questionArgs(args json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, args); err != nil || buf.Len() == 0 {
		return "(none)"
	}
	s := buf.String()
	if utf8.RuneCountInString(s) > maxQuestionArgs {
		s = string([]rune(s)[:maxQuestionArgs]) + "… (cut)"
	}
	return s
}

// oneLine collapses runs of spaces and control characters to one space and
// cuts s to n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if r := []rune(s); len(r) > n {
		s = strings.TrimSpace(string(r[:n]))
	}
	return s
}
