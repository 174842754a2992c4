package client_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

// responder is a minimal worker written with raw bus operations: it proves
// the client needs nothing but the wire protocol. Its behaviour depends on
// the tool name:
//
//	never  acks the call and never answers
//	dup    answers twice (values "first" then "second"), as at-least-once delivery may
//	fail   answers execution_failed / "boom"
//	other  answers ok with args.text (or "ok")
type responder struct {
	conn *bus.Conn

	mu       sync.Mutex
	calls    map[string]protocol.Call // by call_id
	subjects map[string]string        // call_id → subject it arrived on
	count    map[string]int           // call_id → deliveries seen
}

// startResponder serves pool on the server at url until the test ends.
func startResponder(t testing.TB, url, prefix, pool string) *responder {
	t.Helper()
	r := &responder{
		conn:     bustest.Conn(t, url, prefix),
		calls:    make(map[string]protocol.Call),
		subjects: make(map[string]string),
		count:    make(map[string]int),
	}
	ctx, cancel := context.WithCancel(context.Background())
	pc, err := r.conn.PoolConsumer(ctx, pool, 5, bus.DefaultAckWait)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_, _ = pc.Fetch(ctx, 256, 100*time.Millisecond, func(m *bus.Msg) { r.handle(ctx, m) })
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func (r *responder) handle(ctx context.Context, m *bus.Msg) {
	defer func() { _ = m.Ack(ctx) }()
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
	r.subjects[call.CallID] = m.Subject
	r.count[call.CallID]++
	r.mu.Unlock()

	res := protocol.Result{CallID: call.CallID, BatchID: call.EffectiveBatchID(), Tool: call.Tool, OK: true, WorkerID: "responder", Deliveries: int(m.Deliveries)}
	switch call.Tool {
	case "never":
		return
	case "fail":
		res.OK, res.Code, res.Error = false, protocol.CodeExecutionFailed, "boom"
	case "dup":
		res.Value = "first"
		r.publish(ctx, &call, res, "")
		res.Value = "second"
		r.publish(ctx, &call, res, "")
		return
	default:
		var a struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(call.Args, &a)
		res.Value = a.Text
		if res.Value == "" {
			res.Value = "ok"
		}
	}
	r.publish(ctx, &call, res, protocol.ResultMsgID(call.CallID))
}

func (r *responder) publish(ctx context.Context, call *protocol.Call, res protocol.Result, msgID string) {
	subject, err := r.conn.Names().ResultSubject(call.PersonalityID, call.EffectiveBatchID(), call.CallID)
	if err != nil {
		return
	}
	data, _ := json.Marshal(res)
	hdr := bus.Header{}
	hdr.Set(protocol.HeaderProtocol, protocol.Version)
	_, _ = r.conn.Publish(ctx, subject, data, hdr, msgID)
}

func (r *responder) call(id string) (protocol.Call, string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[id], r.subjects[id], r.count[id]
}

// newClient connects a client with prefix to url; closed at test end.
func newClient(t *testing.T, url, prefix string) *client.Client {
	t.Helper()
	c, err := client.New(ctxT(t), client.Config{NATSURL: url, NATSCreds: bustest.Creds(url), Prefix: prefix, Name: t.Name()})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// putCatalog writes catalog entries as a worker would.
func putCatalog(t *testing.T, conn *bus.Conn, entries ...protocol.CatalogEntry) {
	t.Helper()
	kv, err := conn.KV(ctxT(t), bus.Tools)
	require.NoError(t, err)
	for _, e := range entries {
		data, err := json.Marshal(e)
		require.NoError(t, err)
		_, err = kv.Put(ctxT(t), e.Name, data)
		require.NoError(t, err)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond every 10ms until it holds or 10s pass.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 10*time.Millisecond, msg)
}
