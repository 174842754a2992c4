package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

func TestEchoRoundTrip(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.start(worker.Config{WorkerID: "w-1"})
	e.call(protocol.Call{CallID: "c1", BatchID: "b1", Tool: "echo", Args: json.RawMessage(`{"text":"hello ✓"}`)})
	r := e.result("b1", "c1")
	require.True(t, r.OK, r.Error)
	require.Equal(t, "hello ✓", r.Value)
	require.Equal(t, "c1", r.CallID)
	require.Equal(t, "b1", r.BatchID)
	require.Equal(t, "echo", r.Tool)
	require.Equal(t, w.ID(), r.WorkerID)
	require.Equal(t, 1, r.Deliveries)
	require.False(t, r.Untrusted)
}

func TestBatchDefaultsToCallID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{})
	e.call(protocol.Call{CallID: "solo", Tool: "echo", Args: json.RawMessage(`{"text":"x"}`)})
	r := e.result("solo", "solo")
	require.Equal(t, "solo", r.BatchID)
}

func TestSameCallPublishedTwiceYieldsOneResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{})
	body := []byte(`{"call_id":"dup","batch_id":"b","tool":"echo","args":{"text":"once"},"session_id":"s"}`)
	// Twice within the dedupe window (same Nats-Msg-Id)...
	e.publishRaw("default", "echo", body, "dup")
	e.publishRaw("default", "echo", body, "dup")
	require.Equal(t, "once", e.result("b", "dup").Value)
	// ...and once more with another message id: the completion record answers it.
	e.publishRaw("default", "echo", body, "dup-again")
	e.waitCallsDrained()
	require.Equal(t, 1, e.resultsOn("b", "dup"))
}

func TestUnknownTool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{})
	e.call(protocol.Call{CallID: "u1", Tool: "nope"})
	r := e.result("u1", "u1")
	require.False(t, r.OK)
	require.Equal(t, protocol.CodeNotAvailable, r.Code)
	require.Equal(t, "Unknown tool: nope", r.Error)
	require.Zero(t, r.DurationMS, "a call that never ran has duration 0")
}

func TestCancelRunningCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, want string
	}{
		{"with reason", `{"reason":"user pressed stop"}`, "cancelled: user pressed stop"},
		{"without reason", ``, "cancelled: by request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.start(worker.Config{})
			started := e.tail(e.names.ProgressStream(), "capstan.progress.internal.default.bc.cc")
			e.call(protocol.Call{CallID: "cc", BatchID: "bc", Tool: "echo",
				Args: json.RawMessage(`{"text":"x","sleep_ms":600000,"progress":[{"message":"sleeping"}]}`)})
			recv(t, started)
			require.NoError(t, e.conn.PublishCore("capstan.cancel.default.cc", []byte(tc.body), nil))
			r := e.result("bc", "cc")
			require.False(t, r.OK)
			require.Equal(t, protocol.CodeExecutionFailed, r.Code)
			require.Equal(t, tc.want, r.Error)
		})
	}
}

func TestCancelBeforeStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{})
	require.NoError(t, e.conn.PublishCore("capstan.cancel.default.early", nil, nil))
	kv, err := e.conn.KV(ctxT(t), bus.Cancels)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, found, err := kv.Get(ctxT(t), "default.early")
		return err == nil && found
	}, 10*time.Second, 10*time.Millisecond, "the worker records the cancel request")
	e.call(protocol.Call{CallID: "early", Tool: "echo", Args: json.RawMessage(`{"text":"x"}`)})
	r := e.result("early", "early")
	require.Equal(t, "cancelled: by request", r.Error)
	require.Zero(t, r.DurationMS)
}

// TestWorkerRecordCarriesItsSlots: the workers bucket tells a console the
// worker's concurrency and its calls in flight.
func TestWorkerRecordCarriesItsSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{WorkerID: "slots-1", Concurrency: 3})
	kv, err := e.conn.KV(ctxT(t), bus.Workers)
	require.NoError(t, err)
	entry, found, err := kv.Get(ctxT(t), "slots-1")
	require.NoError(t, err)
	require.True(t, found)
	var rec struct {
		Concurrency int  `json:"concurrency"`
		InFlight    *int `json:"in_flight"`
	}
	require.NoError(t, json.Unmarshal(entry.Value, &rec))
	require.Equal(t, 3, rec.Concurrency)
	require.NotNil(t, rec.InFlight)
	require.Zero(t, *rec.InFlight)
}

// TestCancelBeforeTheWorkerStarted: a worker that starts after a cancel
// request was sent (and recorded by another worker) finds it in the cancels
// bucket when it starts, and never starts the call.
func TestCancelBeforeTheWorkerStarted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A worker of another pool (a tool name belongs to one pool) receives
	// the request and records it.
	other := echo.Tool()
	other.Name = "other_echo"
	e.start(worker.Config{Pool: "other", WorkerID: "other-1"}, other)
	require.NoError(t, e.conn.PublishCore("capstan.cancel.default.late", []byte(`{"reason":"changed my mind"}`), nil))
	kv, err := e.conn.KV(ctxT(t), bus.Cancels)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, found, err := kv.Get(ctxT(t), "default.late")
		return err == nil && found
	}, 10*time.Second, 10*time.Millisecond, "the first worker records the cancel request")
	e.call(protocol.Call{CallID: "late", Tool: "echo", Args: json.RawMessage(`{"text":"x"}`)})
	// The call's pool gets its first worker only now.
	e.start(worker.Config{WorkerID: "default-1"})
	r := e.result("late", "late")
	require.Equal(t, "cancelled: changed my mind", r.Error)
	require.Zero(t, r.DurationMS)
}

func TestTimeouts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		workerMax time.Duration
		timeoutMS int64
		want      string
	}{
		{"call timeout", time.Minute, 1500, "timed out after 1.5s"},
		{"capped by the worker maximum", 300 * time.Millisecond, 60000, "timed out after 300ms"},
		{"worker default", 250 * time.Millisecond, 0, "timed out after 250ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.start(worker.Config{CallTimeout: tc.workerMax})
			e.call(protocol.Call{CallID: "t", Tool: "echo", TimeoutMS: tc.timeoutMS, Args: json.RawMessage(`{"text":"x","sleep_ms":600000}`)})
			r := e.result("t", "t")
			require.Equal(t, protocol.CodeExecutionFailed, r.Code)
			require.Equal(t, tc.want, r.Error)
		})
	}
}

func TestDeadlinePassedBeforeStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{})
	past := time.Now().Add(-time.Minute)
	e.call(protocol.Call{CallID: "late", Tool: "echo", Deadline: &past, Args: json.RawMessage(`{"text":"x"}`)})
	r := e.result("late", "late")
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Equal(t, "deadline exceeded before start", r.Error)
	require.Zero(t, r.DurationMS)

	future := time.Now().Add(time.Hour)
	e.call(protocol.Call{CallID: "ontime", Tool: "echo", Deadline: &future, Args: json.RawMessage(`{"text":"x"}`)})
	require.True(t, e.result("ontime", "ontime").OK)
}

func boomTool() tool.Tool {
	return tool.Tool{Name: "boom", Description: "panics", Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
		panic("kaboom")
	}}
}

func failTool() tool.Tool {
	return tool.Tool{Name: "fail", Description: "returns an error", Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
		return tool.Result{}, errBoom
	}}
}

func TestPanickingToolBecomesExecutionFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{}, echo.Tool(), boomTool(), failTool())
	e.call(protocol.Call{CallID: "p1", Tool: "boom"})
	r := e.result("p1", "p1")
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Equal(t, "tool boom panicked: kaboom", r.Error)

	e.call(protocol.Call{CallID: "f1", Tool: "fail"})
	r = e.result("f1", "f1")
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Equal(t, "boom", r.Error)

	// The worker survives and keeps answering.
	e.call(protocol.Call{CallID: "after", Tool: "echo", Args: json.RawMessage(`{"text":"still here"}`)})
	require.Equal(t, "still here", e.result("after", "after").Value)
}

func TestProgressLandsOnAudienceSubject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{})
	internal := e.tail(e.names.ProgressStream(), "capstan.progress.internal.>")
	user := e.tail(e.names.ProgressStream(), "capstan.progress.user.>")
	e.call(protocol.Call{CallID: "pc", BatchID: "pb", Tool: "echo", Args: json.RawMessage(
		`{"text":"x","progress":[{"message":"one"},{"message":"two","percent":50,"audience":"user"},{"message":"three","audience":"internal"}]}`)})
	require.True(t, e.result("pb", "pc").OK)

	m := recv(t, internal)
	require.Equal(t, "capstan.progress.internal.default.pb.pc", m.Subject)
	var ev protocol.Progress
	require.NoError(t, json.Unmarshal(m.Data, &ev))
	require.Equal(t, protocol.Progress{Type: "progress", CallID: "pc", BatchID: "pb", ToolName: "echo", Message: "one",
		Audience: protocol.AudienceInternal, Seq: 1, Time: ev.Time}, ev)

	m = recv(t, user)
	require.Equal(t, "capstan.progress.user.default.pb.pc", m.Subject)
	require.NoError(t, json.Unmarshal(m.Data, &ev))
	require.Equal(t, "two", ev.Message)
	require.Equal(t, int64(2), ev.Seq)
	require.InDelta(t, 50, *ev.Percent, 0)

	m = recv(t, internal)
	require.NoError(t, json.Unmarshal(m.Data, &ev))
	require.Equal(t, "three", ev.Message)
	require.Equal(t, int64(3), ev.Seq)
	select {
	case m := <-user:
		t.Fatalf("user subscriber got a second event: %s", m.Subject)
	default:
	}
}

func TestInvalidProgressIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bad := tool.Tool{Name: "bad_progress", Execute: func(_ context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
		if err := tc.Emit(tool.Progress{Message: "x", Audience: "admin"}); err == nil {
			return tool.OK("accepted"), nil
		} else {
			return tool.OK(err.Error()), nil
		}
	}}
	e.start(worker.Config{}, bad)
	e.call(protocol.Call{CallID: "ip", Tool: "bad_progress"})
	require.Equal(t, `invalid progress event: audience "admin" must be internal, user or dashboard`, e.result("ip", "ip").Value)
}

func TestConcurrencyBoundsRunningCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var running, peak atomic.Int64
	release := make(chan struct{})
	slow := tool.Tool{Name: "slow", Execute: func(ctx context.Context, _ json.RawMessage, _ *tool.Context) (tool.Result, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return tool.OK("done"), nil
	}}
	e.start(worker.Config{Concurrency: 3}, slow)
	for i := range 9 {
		id := "k" + string(rune('a'+i))
		e.call(protocol.Call{CallID: id, BatchID: "conc", Tool: "slow"})
	}
	require.Eventually(t, func() bool { return running.Load() == 3 }, 20*time.Second, 10*time.Millisecond)
	cons, err := e.conn.PersonalityConsumer(ctxT(t), "default", "default", 5, bus.DefaultAckWait, 0)
	require.NoError(t, err)
	_, unacked, err := cons.Pending(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 3, unacked, "the worker pulls only as many calls as it has free slots")
	close(release)
	for i := range 9 {
		require.True(t, e.result("conc", "k"+string(rune('a'+i))).OK)
	}
	require.EqualValues(t, 3, peak.Load())
}

func TestMalformedCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{})
	dlq := e.tail(e.names.DLQStream(), "capstan.dlq.>")

	// Undecodable: dead-lettered with its headers, no result.
	e.publishRaw("default", "echo", []byte(`not json`), "")
	m := recv(t, dlq)
	require.Equal(t, "capstan.dlq.echo", m.Subject)
	require.Equal(t, "not json", string(m.Data))
	require.Equal(t, "invalid call: body must be a JSON object", m.Header.Get("Capstan-Dead-Reason"))
	require.Equal(t, "1", m.Header.Get("Capstan-Deliveries"))
	require.Equal(t, "capstan.call.default.default.echo", m.Header.Get("Capstan-Original-Subject"))
	require.Equal(t, protocol.Version, m.Header.Get("Capstan-Protocol"), "original headers are kept")
	_, err := time.Parse(time.RFC3339, m.Header.Get("Capstan-Dead-At"))
	require.NoError(t, err)

	// Readable call_id, bad field: dead-lettered and answered.
	e.publishRaw("default", "echo", []byte(`{"call_id":"m1","batch_id":"mb","tool":"echo","args":[],"session_id":"s"}`), "")
	r := e.result("mb", "m1")
	require.Equal(t, protocol.CodeInputInvalid, r.Code)
	require.Equal(t, `invalid call: field "args" must be a JSON object`, r.Error)
	require.Equal(t, "capstan.dlq.echo", recv(t, dlq).Subject)

	// Invalid batch_id: the result goes to <p>.result.<call>.<call>.
	e.publishRaw("default", "echo", []byte(`{"call_id":"m2","batch_id":"a b","tool":"echo","args":{},"session_id":"s"}`), "")
	r = e.result("m2", "m2")
	require.Equal(t, `invalid call: field "batch_id" must match ^[A-Za-z0-9_-]{1,128}$`, r.Error)
	recv(t, dlq)

	// Tool field that does not match the subject.
	e.publishRaw("default", "echo", []byte(`{"call_id":"m3","tool":"other","args":{},"session_id":"s"}`), "")
	r = e.result("m3", "m3")
	require.Equal(t, `invalid call: field "tool" "other" does not match the subject's tool "echo"`, r.Error)
	recv(t, dlq)
	e.waitCallsDrained()
}

func TestAbandonedAfterMaxDeliveries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Another (phantom) worker holds the call's lease, so every delivery is
	// handed back until MaxDeliver is reached.
	leases, err := e.conn.KV(ctxT(t), bus.Leases)
	require.NoError(t, err)
	_, err = leases.Create(ctxT(t), "ab", []byte("ghost"), 0)
	require.NoError(t, err)
	dlq := e.tail(e.names.DLQStream(), "capstan.dlq.>")
	// Only calls of exclusive tools run under a lease: this echo is one.
	exclusive := echo.Tool()
	exclusive.SideEffects = tool.SideEffectsExclusive
	e.start(worker.Config{MaxDeliver: 1}, exclusive)
	e.call(protocol.Call{CallID: "ab", Tool: "echo", Args: json.RawMessage(`{"text":"x"}`)})
	r := e.result("ab", "ab")
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Equal(t, "call abandoned after 1 deliveries: call lease held by another worker", r.Error)
	m := recv(t, dlq)
	require.Equal(t, "capstan.dlq.echo", m.Subject)
	require.Equal(t, "call lease held by another worker", m.Header.Get("Capstan-Dead-Reason"))
	require.Equal(t, "1", m.Header.Get("Capstan-Deliveries"))
	e.waitCallsDrained()
}

func TestCatalogAndPoolOwnership(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.start(worker.Config{WorkerID: "cat-1"})
	kv, err := e.conn.KV(ctxT(t), bus.Tools)
	require.NoError(t, err)
	entry, found, err := kv.Get(ctxT(t), "echo")
	require.NoError(t, err)
	require.True(t, found)
	var ce protocol.CatalogEntry
	require.NoError(t, json.Unmarshal(entry.Value, &ce))
	require.Equal(t, "echo", ce.Name)
	require.Equal(t, "default", ce.Pool)
	require.Equal(t, []string{w.ID()}, ce.Workers)
	require.JSONEq(t, `{}`, string(ce.Capabilities))
	require.Contains(t, string(ce.Schema), `"sleep_ms"`)

	other, err := worker.New(worker.Config{NATSURL: e.url, NATSCreds: bustest.Creds(e.url), Pool: "other", WorkerID: "cat-2", Logger: quietLogger()}, echo.Tool())
	require.NoError(t, err)
	err = other.Run(ctxT(t))
	require.ErrorContains(t, err, "tool echo is already registered by live worker cat-1 of pool default; a tool name belongs to one pool")
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  worker.Config
		want string
	}{
		{"pool", worker.Config{Pool: "a.b"}, `Config.Pool "a.b" must match`},
		{"prefix", worker.Config{Prefix: "x y"}, `Config.Prefix "x y" must match`},
		{"concurrency", worker.Config{Concurrency: -1}, "Config.Concurrency must be at least 1, got -1"},
		{"secrets", worker.Config{SecretsBackend: "s3"}, `Config.SecretsBackend "s3" must be vault, file, env or none`},
		{"secrets file", worker.Config{SecretsBackend: "file"}, `Config.SecretsFile must be set when Config.SecretsBackend is "file"`},
		{"vault without login", worker.Config{SecretsBackend: "vault"}, `Config.SecretsBackend "vault": Config.Vault.Token or Config.Vault.RoleID (with Config.Vault.SecretID) must be set`},
		{"vault token and approle", worker.Config{SecretsBackend: "vault", Vault: worker.VaultConfig{Token: "t", RoleID: "r", SecretID: "s"}}, "Config.Vault.Token and Config.Vault.RoleID are both set: choose token or AppRole login"},
		{"vault role without secret id", worker.Config{SecretsBackend: "vault", Vault: worker.VaultConfig{RoleID: "r"}}, "Config.Vault.SecretID must be set with Config.Vault.RoleID"},
		{"vault bad address", worker.Config{SecretsBackend: "vault", Vault: worker.VaultConfig{Addr: "ht!tp://x", Token: "t"}}, "Config.Vault.Addr: "},
		{"vault missing ca file", worker.Config{SecretsBackend: "vault", Vault: worker.VaultConfig{Token: "t", CACert: "/nonexistent/ca.pem"}}, "Config.Vault.CACert: "},
		{"worker id", worker.Config{WorkerID: "a b"}, `Config.WorkerID "a b" must be`},
		{"ack wait", worker.Config{AckWait: time.Second}, "Config.AckWait must be at least 3s, got 1s"},
		{"blob sizes", worker.Config{Blobs: worker.BlobConfig{MinBytes: 100, MaxBytes: 50}}, "Config.Blobs.MinBytes (100) must not exceed Config.Blobs.MaxBytes (50)"},
		{"process network", worker.Config{ProcessNetwork: "open"}, `Config.ProcessNetwork "open" must be confined or unconfined`},
		{"unknown tool", worker.Config{Tools: []string{"echo", "nope"}}, `Config.Tools names "nope", which is not a known tool`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := worker.New(tc.cfg, echo.Tool())
			require.ErrorContains(t, err, tc.want)
		})
	}
	// A program that fills Config from its own settings finds the field.
	_, err := worker.New(worker.Config{Concurrency: -1, Pool: "a.b"}, echo.Tool())
	var fe *worker.FieldError
	require.ErrorAs(t, err, &fe)
	require.Contains(t, []string{"Concurrency", "Pool"}, fe.Field)
	_, err = worker.New(worker.Config{}, tool.Tool{Name: "Bad-Name", Execute: boomTool().Execute})
	require.ErrorContains(t, err, "must be snake_case")
	_, err = worker.New(worker.Config{}, echo.Tool(), echo.Tool())
	require.ErrorContains(t, err, "tool echo is given twice")
}

func TestReducerRegistry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, err := worker.New(worker.Config{NATSURL: e.url, NATSCreds: bustest.Creds(e.url), Logger: quietLogger()}, echo.Tool())
	require.NoError(t, err)
	upper := func(r tool.Result, _ json.RawMessage, _ *tool.Context) tool.Result {
		r.Value = strings.ToUpper(r.Value)
		return r
	}
	unregister, err := w.RegisterReducer("echo", upper)
	require.NoError(t, err)
	_, err = w.RegisterReducer("echo", upper)
	require.Error(t, err, "a second reducer for one tool is an error")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-w.Ready()
	e.call(protocol.Call{CallID: "rd", Tool: "echo", Args: json.RawMessage(`{"text":"quiet"}`)})
	require.Equal(t, "QUIET", e.result("rd", "rd").Value)
	unregister()
	unregister()
	e.call(protocol.Call{CallID: "rd2", Tool: "echo", Args: json.RawMessage(`{"text":"quiet"}`)})
	require.Equal(t, "quiet", e.result("rd2", "rd2").Value)
	cancel()
	require.NoError(t, <-done)
}

func TestCopyOfRunningCallIsAnsweredOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{})
	started := e.tail(e.names.ProgressStream(), "capstan.progress.internal.default.cp.cp")
	body := []byte(`{"call_id":"cp","tool":"echo","args":{"text":"x","sleep_ms":1000,"progress":[{"message":"go"}]},"session_id":"s"}`)
	e.publishRaw("default", "echo", body, "cp-1")
	recv(t, started)
	e.publishRaw("default", "echo", body, "cp-2") // a second copy, outside JetStream's de-duplication
	require.True(t, e.result("cp", "cp").OK)
	// The copy is acked from the completion record well before AckWait (30s).
	require.Eventually(t, func() bool {
		n, err := e.conn.StreamMsgs(ctxT(t), e.names.CallsStream())
		return err == nil && n == 0
	}, 15*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, e.resultsOn("cp", "cp"))
}

func TestUnsupportedProtocolVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{})
	body := []byte(`{"call_id":"v3","tool":"echo","args":{"text":"x"},"session_id":"s"}`)
	_, err := e.conn.Publish(ctxT(t), "capstan.call.default.default.echo", body, bus.Header{"Capstan-Protocol": {"3"}}, "v3")
	require.NoError(t, err)
	r := e.result("v3", "v3")
	require.Equal(t, protocol.CodeInputInvalid, r.Code)
	require.Equal(t, `invalid call: header Capstan-Protocol "3" is not supported (this worker speaks 2)`, r.Error)
	// No header at all is accepted (clients in other languages may omit it).
	_, err = e.conn.Publish(ctxT(t), "capstan.call.default.default.echo", []byte(`{"call_id":"v0","tool":"echo","args":{"text":"x"},"session_id":"s"}`), nil, "v0")
	require.NoError(t, err)
	require.True(t, e.result("v0", "v0").OK)
}

func TestDeadLetterDropsPublishControlHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{})
	dlq := e.tail(e.names.DLQStream(), "capstan.dlq.>")
	hdr := bus.Header{"Nats-Expected-Stream": {"CAPSTAN_CALLS"}, "Nats-Expected-Last-Sequence": {"0"}, "X-Trace": {"keep"}}
	_, err := e.conn.Publish(ctxT(t), "capstan.call.default.default.echo", []byte(`broken`), hdr, "ctl-1")
	require.NoError(t, err)
	m := recv(t, dlq)
	require.Equal(t, "broken", string(m.Data))
	require.Equal(t, "keep", m.Header.Get("X-Trace"))
	require.Equal(t, "ctl-1", m.Header.Get("Nats-Msg-Id"), "the original Nats-Msg-Id is kept")
	require.Empty(t, m.Header.Get("Nats-Expected-Stream"))
	e.waitCallsDrained()
}
