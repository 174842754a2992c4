package callexec

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/pipeline"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/ratelimit"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker/internal/cancelbook"
	"github.com/capstanhq/capstan/worker/internal/diskguard"
	"github.com/capstanhq/capstan/worker/internal/lease"
	"github.com/capstanhq/capstan/worker/internal/observe"
	"github.com/capstanhq/capstan/worker/internal/toolset"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.22.0"
	"go.opentelemetry.io/otel/trace"
)

// admission is what the gates resolved for a call they let through.
type admission struct {
	h     *toolset.Hosted
	p     *capability.Personality
	tc    *tool.Context
	grant *capability.Grant
}

// process runs the execution pipeline of tools.md on a decoded call, in
// order; the first gate that refuses decides the result. Each phase is a
// child span of the call's consumer span (carried by ctx): policy, then
// execute_tool <tool> (with the tool's secret resolutions, HTTP requests and
// processes below it) and reduce.
func (e *Executor) process() outcome {
	s, ctx, call, r := e.s, e.ctx, &e.call, e.run
	pctx, policy := s.obs.Phase(ctx, "policy")
	var a admission
	o := e.admit(pctx, call, r, &a)
	if o.decision == "" && o.infra == nil {
		// The approval gate comes after every other gate (approvals.md).
		o, _ = e.approvalGate(pctx, call, &a)
	}
	decision := cmp.Or(o.decision, protocol.DecisionAllowed)
	if o.held {
		decision = "held"
	}
	if a.p != nil {
		observe.SetAttributes(policy, telemetry.AttrPersonality.String(a.p.ID), telemetry.AttrDecision.String(decision))
	} else {
		observe.SetAttributes(policy, telemetry.AttrDecision.String(decision))
	}
	if o.infra != nil {
		policy.SetStatus(codes.Error, "infrastructure fault")
	}
	if observe.IsDenial(o.decision) {
		s.obs.Denied(pctx, policy, o.decision, string(o.result.Code))
	}
	policy.End()
	if o.decision != "" || o.infra != nil || o.held {
		return o
	}
	ran := e.runTool(ctx, call, r, a)
	ran.approval = o.approval
	return ran
}

// admit runs gates 1 to 9. It returns the refusal (or infrastructure fault)
// that stops the call, or the zero outcome (no decision) with a filled in.
func (e *Executor) admit(traceCtx context.Context, call *protocol.Call, r *cancelbook.Call, a *admission) outcome {
	s := e.s
	ctx, cancel := context.WithTimeout(traceCtx, OpTimeout)
	defer cancel()

	// A call cancelled or past its deadline is not started at all.
	if cause := r.PendingCause(); cause != nil {
		return refuse(call, protocol.DecisionCancelled, protocol.CodeExecutionFailed, cause.Error())
	}
	if call.Deadline != nil && time.Now().After(*call.Deadline) {
		return refuse(call, protocol.DecisionDeadline, protocol.CodeExecutionFailed, "deadline exceeded before start")
	}
	if e.m.Header.Get(protocol.HeaderApproval) != "" {
		if o, stop := e.readDecision(ctx, call); stop {
			return o
		}
	}

	// 2. Unknown tool.
	h, ok := s.tools.Lookup(call.Tool)
	if !ok {
		if msg := s.mcp.Unavailable(call.Tool); msg != "" {
			// A tool of a hosted MCP server that could not list its tools.
			return refuse(call, protocol.DecisionAvailable, protocol.CodeNotAvailable, msg)
		}
		return refuse(call, protocol.DecisionUnknownTool, protocol.CodeNotAvailable, "Unknown tool: "+call.Tool)
	}
	// 3. Surface gate.
	if ref := capability.ExcludeGate(call.Tool, call.ExcludeTools); ref != nil {
		return refusal(call, ref)
	}
	pid := cmp.Or(call.PersonalityID, s.cfg.DefaultPersonality)
	p, err := s.policies.Current(ctx, pid)
	if err != nil {
		return refuse(call, protocol.DecisionPersonality, protocol.CodeNotAvailable, err.Error())
	}
	a.p = p
	// 4. Toolset, MCP-server and plugin filters; 5. permissions.
	if ref := pipeline.Surface(&h.Tool, p, call); ref != nil {
		return refusal(call, ref)
	}
	tc := s.toolContext(call, p)
	// 6. Availability.
	if h.Available != nil && !available(ctx, h, tc) {
		return refuse(call, protocol.DecisionAvailable, protocol.CodeNotAvailable, "Tool "+call.Tool+" is not currently available")
	}
	// 7. Fleet-wide rate limit (counted once for a call held for
	// approval: when it was held, not again when approved).
	if o, stop := rateLimit(ctx, s.limiter, call, p, e.decision); stop {
		return o
	}
	// 8. Arguments; 9. capabilities: registration-time validation against
	// this personality, fail-closed backends, resolution.
	if ref := pipeline.Arguments(&h.Tool, h.Schema, p, call); ref != nil {
		return refusal(call, ref)
	}
	if msg := s.missingBackend(&h.Tool); msg != "" {
		return refuse(call, protocol.DecisionCapability, protocol.CodeNotAvailable, msg)
	}
	grant, ref := pipeline.Resolve(&h.Tool, p, call)
	if ref != nil {
		return refusal(call, ref)
	}
	if msg := s.processNetworkRefused(grant); msg != "" {
		return refuse(call, protocol.DecisionCapability, protocol.CodeNotAvailable, msg)
	}
	if !call.DryRun && diskguard.Needed(grant) {
		// Hand back: a worker with space, or this one later, runs it.
		if err := s.disk.Low(); err != nil {
			return outcome{infra: err}
		}
	}
	if grant.FS != nil {
		tc.WorkingDir = grant.FS.WorkingDir
	}
	a.h, a.tc, a.grant = h, tc, grant
	return outcome{}
}

// rateLimit is gate 7, the fleet-wide rate limit of p for the call's tool:
// stop is true with the refusal (or the infrastructure fault) when the call
// may not run now.
func rateLimit(ctx context.Context, limiter Limiter, call *protocol.Call, p *capability.Personality, approved *approval.Decision) (o outcome, stop bool) {
	lim, ok := p.RateLimits[call.Tool]
	if !ok || approved != nil {
		return outcome{}, false
	}
	dec, err := limiter.Allow(ctx, p.ID, call.Tool, lim.Requests, lim.Window)
	if err != nil {
		return outcome{infra: err}, true
	}
	if !dec.Allowed {
		o := refuse(call, protocol.DecisionRateLimit, protocol.CodeNotAvailable,
			ratelimit.Message(call.Tool, lim.Requests, lim.WindowText, p.ID, dec.RetryAfter))
		o.result.RetryAfterMS = dec.RetryAfter.Milliseconds()
		return o, true
	}
	return outcome{}, false
}

// runTool takes an admitted call through steps 10 to 15: dry run, or execution
// then reduce, redact, trim and wrap.
func (e *Executor) runTool(ctx context.Context, call *protocol.Call, r *cancelbook.Call, a admission) outcome {
	s := e.s
	h, tc := a.h, a.tc
	// 10. Dry run: nothing runs.
	if call.DryRun {
		if cs := observe.CallSpanFrom(ctx); cs != nil {
			cs.DryRun()
		}
		text, err := shape.DryRun(call.Tool, call.Args)
		if err != nil {
			return refuse(call, protocol.DecisionDryRun, protocol.CodeInputInvalid, err.Error())
		}
		return outcome{result: protocol.Result{CallID: call.CallID, BatchID: call.EffectiveBatchID(), Tool: call.Tool, OK: true, Value: text}, decision: protocol.DecisionDryRun}
	}
	// 11. Execute, in the execute_tool span; accessor denials are its events.
	ectx, exec := s.obs.ExecuteTool(ctx, h.Name, call.CallID)
	rec := &denials{onAdd: func(code string) { s.obs.Denied(ectx, exec, "accessor", code) }}
	s.attach(tc, a.grant, rec)
	s.obs.TraceAccessors(tc)
	start := time.Now()
	var res tool.Result
	cause := s.mcp.SendTo(h.Name, a.grant)
	if cause != nil {
		// A hosted url server's secrets may not go to its host for this
		// personality: refused, as the fetch accessor refuses a request,
		// before anything is sent.
		rec.add(cause)
	} else {
		res, cause = e.execute(ectx, h, call, tc, r)
	}
	switch {
	case errors.Is(cause, cancelbook.ErrShutdown):
		exec.SetAttributes(semconv.ErrorTypeKey.String("shutdown"))
	case isInfra(cause):
		exec.SetAttributes(semconv.ErrorTypeKey.String("infrastructure"))
		exec.SetStatus(codes.Error, "infrastructure fault")
	case cause != nil:
		exec.SetAttributes(semconv.ErrorTypeKey.String(string(tool.CodeExecutionFailed)))
		exec.SetStatus(codes.Error, string(tool.CodeExecutionFailed))
	case !res.OK:
		code := string(cmp.Or(res.Code, tool.CodeExecutionFailed))
		exec.SetAttributes(semconv.ErrorTypeKey.String(code))
		exec.SetStatus(codes.Error, code)
	}
	exec.End()
	if errors.Is(cause, cancelbook.ErrShutdown) {
		return outcome{handback: true}
	}
	if errors.Is(cause, lease.ErrLost) {
		return outcome{leaseLost: true}
	}
	if isInfra(cause) {
		// The reason is stored, logged and may end in a dead letter: no
		// secret value the call resolved may be in it.
		return outcome{infra: errors.New(s.creds.Redact(shape.Redact(cause.Error(), secretValues(tc))))}
	}
	if cause != nil {
		res = tool.Fail(tool.CodeExecutionFailed, cause.Error())
	}
	// 12–15. Reduce, redact, trim, wrap, within the result's size limit.
	_, reduce := s.obs.Phase(ctx, "reduce")
	blobs := s.blobsAllowed(h, a.p)
	limit := s.resultLimit()
	if blobs {
		limit -= blobRefReserve
	}
	out, body := e.shapeResult(h, call, tc, res, limit)
	observe.SetAttributes(reduce, telemetry.AttrTruncated.Bool(out.Truncated))
	reduce.End()
	out.DurationMS = time.Since(start).Milliseconds()
	o := outcome{result: out, decision: protocol.DecisionAllowed, denials: rec.list()}
	if blobs {
		o.blob = s.planBlob(res, body, &out, tc)
	}
	return o
}

func refusal(call *protocol.Call, r *capability.Refusal) outcome {
	return refuse(call, r.Decision, protocol.Code(r.Code), r.Message)
}

// available asks a tool's availability check, treating a panic as unavailable.
func available(ctx context.Context, h *toolset.Hosted, tc *tool.Context) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return h.Available(ctx, tc)
}

// toolContext builds the tool's view of the call.
func (s *Services) toolContext(call *protocol.Call, p *capability.Personality) *tool.Context {
	tc := pipeline.ToolContext(call, p)
	tc.EmitFunc = s.emitter(call, tc)
	return tc
}

// execute runs the tool with the call's timeout. It returns the tool's result,
// or the cause that ended the call early (cancel request, timeout, shutdown).
// A tool that ignores its context is abandoned when the context ends.
// traceCtx gives the tool's context its span (and nothing else: the call's
// cancellation comes from the worker).
func (e *Executor) execute(traceCtx context.Context, h *toolset.Hosted, call *protocol.Call, tc *tool.Context, r *cancelbook.Call) (tool.Result, error) {
	s := e.s
	timeout := s.cfg.CallTimeout
	if call.TimeoutMS > 0 {
		timeout = min(timeout, time.Duration(call.TimeoutMS)*time.Millisecond)
	}
	ctx, cancel := context.WithCancelCause(trace.ContextWithSpan(s.execBase, trace.SpanFromContext(traceCtx)))
	defer cancel(context.Canceled)
	r.SetCancel(cancel)
	timer := time.AfterFunc(timeout, func() { cancel(&cancelbook.TimeoutError{D: timeout}) })
	defer timer.Stop()

	type ran struct {
		res tool.Result
		err error
	}
	done := make(chan ran, 1)
	s.runners.run(func() {
		injectCallFault(call)
		res, err := pipeline.Call(ctx, &h.Tool, call.Args, tc)
		done <- ran{res: res, err: err}
	})
	var out ran
	select {
	case out = <-done:
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		return tool.Result{}, context.Cause(ctx)
	}
	return pipeline.Outcome(h.Name, out.res, out.err)
}

// shapeResult applies steps 12–15 (pipeline.Shape): reducer, secret
// redaction, budget trim and untrusted wrapping, with the result held to
// limit bytes encoded; a result no message can carry becomes the oversized
// failure. body is the text published before the untrusted wrap or
// stripping: what planBlob compares with the full output.
func (e *Executor) shapeResult(h *toolset.Hosted, call *protocol.Call, tc *tool.Context, res tool.Result, limit int) (out protocol.Result, body string) {
	s := e.s
	if s.creds != nil {
		// The worker's own credentials go too (security.md section 1),
		// after the call's secrets: a structured value that cannot be
		// encoded panics with its message redacted of both.
		defer func() {
			if p := recover(); p != nil {
				panic(s.creds.Redact(fmt.Sprint(p)))
			}
		}()
		res = s.creds.RedactResult(shape.RedactResult(res, secretValues(tc)))
	}
	out, body, fits := pipeline.Shape(&h.Tool, s.reducers, call, tc, res, s.cfg.WorkerID, pipeline.Limits{Bytes: limit, StructuredBytes: s.cfg.StructuredMaxBytes})
	if !fits {
		out = s.oversized(out, encodedLen(&out), s.limitText(min(s.cfg.ResultMaxBytes, s.bus.MaxPayload())))
	}
	return out, body
}

// secretValues returns the secret values the call's accessor resolved, for
// redaction (pipeline.SecretValues).
func secretValues(tc *tool.Context) []string { return pipeline.SecretValues(tc) }
