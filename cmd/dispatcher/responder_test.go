package main

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

// responder is a minimal worker built from raw bus operations, so these
// tests do not depend on the real worker. By tool name:
//
//	never   no answer
//	fail    execution_failed / "boom"
//	chatty  two progress events (user 50% "half", internal "done"), then ok
//	other   ok with args.text (or "ok"), "[dry-run]" for dry runs
type responder struct {
	conn  *bus.Conn
	mu    sync.Mutex
	calls map[string]protocol.Call
}

func startResponder(t *testing.T, url string) *responder {
	t.Helper()
	r := &responder{conn: bustest.Conn(t, url, ""), calls: make(map[string]protocol.Call)}
	ctx, cancel := context.WithCancel(context.Background())
	pc, err := r.conn.PoolConsumer(ctx, protocol.DefaultPool, 5, bus.DefaultAckWait)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = pc.Fetch(ctx, 64, 100*time.Millisecond, func(m *bus.Msg) {
				r.handle(ctx, m)
				_ = m.Ack(ctx)
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func (r *responder) handle(ctx context.Context, m *bus.Msg) {
	call, err := protocol.DecodeCall(m.Data)
	if err != nil {
		return
	}
	// Version 2: the subject's personality token decides.
	if tokens, err := r.conn.Names().ParseCallSubject(m.Subject); err == nil {
		call.PersonalityID = tokens.Personality
	}
	r.mu.Lock()
	r.calls[call.CallID] = call
	r.mu.Unlock()
	res := protocol.Result{CallID: call.CallID, BatchID: call.EffectiveBatchID(), Tool: call.Tool, OK: true, WorkerID: "responder"}
	switch {
	case call.Tool == "never":
		return
	case call.Tool == "fail":
		res.OK, res.Code, res.Error = false, protocol.CodeExecutionFailed, "boom"
	case call.DryRun:
		res.Value = "[dry-run] " + call.Tool
	default:
		if call.Tool == "chatty" {
			half := 50.0
			r.progress(ctx, &call, protocol.AudienceUser, "half", &half, 1)
			r.progress(ctx, &call, protocol.AudienceInternal, "done", nil, 2)
		}
		var a struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(call.Args, &a)
		res.Value = a.Text
		if res.Value == "" {
			res.Value = "ok"
		}
	}
	subject, _ := r.conn.Names().ResultSubject(call.PersonalityID, call.EffectiveBatchID(), call.CallID)
	data, _ := json.Marshal(res)
	_, _ = r.conn.Publish(ctx, subject, data, nil, protocol.ResultMsgID(call.CallID))
}

func (r *responder) progress(ctx context.Context, call *protocol.Call, a protocol.Audience, msg string, pct *float64, seq int64) {
	p := protocol.Progress{Type: protocol.ProgressType, CallID: call.CallID, BatchID: call.EffectiveBatchID(), ToolName: call.Tool,
		Message: msg, Percent: pct, Audience: a, Seq: seq, Time: time.Now()}
	subject, _ := r.conn.Names().ProgressSubject(a, call.PersonalityID, call.EffectiveBatchID(), call.CallID)
	data, _ := json.Marshal(p)
	_, _ = r.conn.Publish(ctx, subject, data, nil, "")
}

// all returns the calls received so far.
func (r *responder) all() map[string]protocol.Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]protocol.Call, len(r.calls))
	for k, v := range r.calls {
		out[k] = v
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runT runs the dispatcher with env as its whole environment.
func runT(t *testing.T, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runApp(t, ctxT(t), nil, env, stdin, args...)
}

// runApp runs the dispatcher; configure, if not nil, adjusts the app first.
func runApp(t *testing.T, ctx context.Context, configure func(*app), env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut syncBuffer
	a := newApp(getenvFrom(env), bytes.NewBufferString(stdin), &out, &errOut)
	if configure != nil {
		configure(a)
	}
	code = a.main(ctx, args)
	return code, out.String(), errOut.String()
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}
