package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/internal/telemetry/telemetrytest"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const (
	traceSecret = "s3cr3t-trace-value-7731"
	argNeedle   = "argument-needle-4242"
)

// lookupTool touches every accessor a span is made for: it resolves a
// secret, sends it to an HTTP server in the URL and a header, runs a process
// with it as an argument, and returns it (the worker redacts it).
func lookupTool() tool.Tool {
	return tool.Tool{
		Name:   "lookup",
		Schema: json.RawMessage(`{"type":"object","properties":{"url":{"type":"string"},"q":{"type":"string"}},"required":["url","q"]}`),
		Capabilities: tool.Capabilities{
			Secrets:    []string{"providers/github/*"},
			SecretsRaw: []string{"providers/github/*"}, // it puts the value in a URL and a process argument
			Network:    &tool.Network{AllowedHosts: []string{"*"}},
			Process:    &tool.Process{AllowedBinaries: []string{"echo"}},
		},
		Execute: func(ctx context.Context, raw json.RawMessage, tc *tool.Context) (tool.Result, error) {
			var a struct{ URL, Q string }
			if err := json.Unmarshal(raw, &a); err != nil {
				return tool.Result{}, err
			}
			tok, err := tc.Secrets.Secret(ctx, "providers/github/token")
			if err != nil {
				return tool.Result{}, err
			}
			resp, err := tc.Fetch.Fetch(ctx, tool.Request{Method: "GET", URL: a.URL + "/search/" + a.Q + "?token=" + tok,
				Header: map[string][]string{"Authorization": {"Bearer " + tok}}})
			if err != nil {
				return tool.Result{}, err
			}
			out, err := tc.Process.Run(ctx, tool.Command{Binary: "echo", Args: []string{a.Q, tok}})
			if err != nil {
				return tool.Result{}, err
			}
			return tool.OK(fmt.Sprintf("%s | %s | %s", resp.Body, bytes.TrimSpace(out.Stdout), tok)), nil
		},
	}
}

// traced is a worker and a client, each with its own in-memory span
// recorder, as two processes exporting to one collector would be.
type traced struct {
	e                    *env
	c                    *client.Client
	w                    *worker.Worker
	workerSpans, clSpans *tracetest.SpanRecorder
	srv                  *httptest.Server
	logs                 *syncBuffer
	metrics              func(name string, attrs ...attribute.KeyValue) float64
}

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

func newTraced(t *testing.T) *traced {
	t.Helper()
	e := newEnv(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("found"))
	}))
	t.Cleanup(srv.Close)
	e.putPersonality("agent", `id: agent
permissions: [web:read]
safety:
  network:
    allow: ["127.0.0.1:*"]
    allow_private_urls: true
secrets: {send_to: {"providers/github/*": ["127.0.0.1:*"]}}
process: {allow: [echo]}
`)
	wtp, wrec := telemetrytest.Tracing(t)
	ctp, crec := telemetrytest.Tracing(t)
	mp, reader := telemetrytest.Metrics(t)
	logs := &syncBuffer{}
	env := map[string]string{"CAPSTAN_SECRET_PROVIDERS_GITHUB_TOKEN": traceSecret}
	needsPerm := tool.Tool{Name: "admin_only", Permissions: []string{"admin:write"},
		Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) { return tool.OK("x"), nil }}
	w := e.start(worker.Config{
		WorkerID: "w1", Getenv: func(k string) string { return env[k] },
		TracerProvider: wtp, MeterProvider: mp,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}, lookupTool(), needsPerm, boomTool())
	c, err := client.New(ctxT(t), client.Config{NATSURL: e.url, NATSCreds: bustest.Creds(e.url), Name: t.Name(), TracerProvider: ctp})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &traced{e: e, c: c, w: w, workerSpans: wrec, clSpans: crec, srv: srv, logs: logs,
		metrics: func(name string, attrs ...attribute.KeyValue) float64 {
			return telemetrytest.Sum(t, reader, name, attrs...)
		}}
}

// run submits one call through the client and returns its result.
func (tr *traced) run(t *testing.T, call client.Call) client.Result {
	t.Helper()
	if call.SessionID == "" {
		call.SessionID = "s1"
	}
	res := tr.c.ExecuteParallel(ctxT(t), client.Turn{BatchID: call.BatchID}, []client.Call{call})
	require.Len(t, res, 1)
	return res[0]
}

// consumerSpan waits until the worker has ended the consumer span of callID.
func (tr *traced) consumerSpan(t *testing.T, callID string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, s := range tr.workerSpans.Ended() {
			if s.SpanKind() == trace.SpanKindConsumer && attr(s, "gen_ai.tool.call.id") == callID {
				found = s
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
	return found
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

func childrenOf(spans []sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan) map[string]sdktrace.ReadOnlySpan {
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.Parent().SpanID() == parent.SpanContext().SpanID() && s.Parent().TraceID() == parent.SpanContext().TraceID() {
			out[s.Name()] = s
		}
	}
	return out
}

func names(m map[string]sdktrace.ReadOnlySpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// requireClean fails when any part of any span holds one of needles.
func requireClean(t *testing.T, spans []sdktrace.ReadOnlySpan, needles ...string) {
	t.Helper()
	check := func(where, text string) {
		for _, n := range needles {
			require.NotContains(t, text, n, where)
		}
	}
	for _, s := range spans {
		check("span name", s.Name())
		check("status of "+s.Name(), s.Status().Description)
		for _, kv := range s.Attributes() {
			check(fmt.Sprintf("attribute %s of %s", kv.Key, s.Name()), kv.Value.String())
		}
		for _, ev := range s.Events() {
			check("event of "+s.Name(), ev.Name)
			for _, kv := range ev.Attributes {
				check(fmt.Sprintf("event attribute %s of %s", kv.Key, s.Name()), kv.Value.String())
			}
		}
		for _, l := range s.Links() {
			for _, kv := range l.Attributes {
				check("link attribute of "+s.Name(), kv.Value.String())
			}
		}
	}
}

// TestTraceOfOneCall follows one call across a real embedded NATS: the
// client's producer span, the worker's consumer span linked to it and its
// children, and no secret or argument value anywhere.
func TestTraceOfOneCall(t *testing.T) {
	t.Parallel()
	tr := newTraced(t)
	args := fmt.Sprintf(`{"url":%q,"q":%q}`, tr.srv.URL, argNeedle)
	r := tr.run(t, client.Call{CallID: "trace1", BatchID: "turn1", Tool: "lookup", PersonalityID: "agent", Args: json.RawMessage(args)})
	require.True(t, r.OK, r.Error)
	require.Equal(t, "found | "+argNeedle+" [REDACTED] | [REDACTED]", r.Value)

	consumer := tr.consumerSpan(t, "trace1")
	var producer sdktrace.ReadOnlySpan
	for _, s := range tr.clSpans.Ended() {
		if s.Name() == "send capstan.call.default.agent.lookup" {
			producer = s
		}
	}
	require.NotNil(t, producer)

	// The consumer span continues the producer's trace and links to it.
	require.Equal(t, "process capstan.call.default.agent.lookup", consumer.Name())
	require.Equal(t, producer.SpanContext().TraceID(), consumer.SpanContext().TraceID())
	require.Equal(t, producer.SpanContext().SpanID(), consumer.Parent().SpanID())
	require.True(t, consumer.Parent().IsRemote())
	require.Len(t, consumer.Links(), 1)
	require.Equal(t, producer.SpanContext().SpanID(), consumer.Links()[0].SpanContext.SpanID())
	for k, v := range map[string]string{
		"messaging.system": "nats", "messaging.operation.type": "process", "messaging.operation.name": "process",
		"messaging.destination.name": "capstan.call.default.agent.lookup", "messaging.consumer.group.name": "default",
		"messaging.message.id": "trace1", "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "trace1",
		"capstan.batch.id": "turn1", "capstan.worker.id": "w1", "capstan.deliveries": "1",
		"capstan.outcome": "ok", "capstan.decision": "allowed",
	} {
		require.Equal(t, v, attr(consumer, k), k)
	}

	spans := tr.workerSpans.Ended()
	kids := childrenOf(spans, consumer)
	require.ElementsMatch(t, []string{"policy", "execute_tool lookup", "reduce", "send capstan.result.{personality}.{batch_id}.{call_id}"}, names(kids))
	require.Equal(t, "agent", attr(kids["policy"], "capstan.personality.id"))
	exec := kids["execute_tool lookup"]
	for k, v := range map[string]string{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "trace1", "gen_ai.tool.type": "function"} {
		require.Equal(t, v, attr(exec, k), k)
	}
	grand := childrenOf(spans, exec)
	require.ElementsMatch(t, []string{"resolve secret", "GET", "run process"}, names(grand))
	require.Equal(t, trace.SpanKindClient, grand["GET"].SpanKind())
	require.Equal(t, "200", attr(grand["GET"], "http.response.status_code"))
	require.Equal(t, "echo", attr(grand["run process"], "process.executable.name"))
	require.Equal(t, "0", attr(grand["run process"], "process.exit.code"))
	publish := kids["send capstan.result.{personality}.{batch_id}.{call_id}"]
	require.Equal(t, trace.SpanKindProducer, publish.SpanKind())
	require.Equal(t, "capstan.result.agent.turn1.trace1", attr(publish, "messaging.destination.name"))

	// The result carries the publish span's trace context.
	m, err := tr.e.conn.LastMsg(ctxT(t), tr.e.names.ResultsStream(), "capstan.result.agent.turn1.trace1")
	require.NoError(t, err)
	sc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), m.Header))
	require.Equal(t, publish.SpanContext().SpanID(), sc.SpanID())

	// Neither the secret nor any argument value is on any span.
	all := append(tr.clSpans.Ended(), spans...)
	requireClean(t, all, traceSecret, argNeedle, "/search/")

	// The log line of the outcome leads to the trace.
	require.Eventually(t, func() bool {
		return strings.Contains(tr.logs.String(), `"trace_id":"`+consumer.SpanContext().TraceID().String()+`"`)
	}, 10*time.Second, 10*time.Millisecond)
	for line := range strings.SplitSeq(tr.logs.String(), "\n") {
		if strings.Contains(line, `"msg":"call finished"`) && strings.Contains(line, "trace1") {
			for _, key := range []string{`"call_id":"trace1"`, `"tool":"lookup"`, `"personality":"agent"`, `"code":""`, `"duration_ms":`, `"trace_id":"`} {
				require.Contains(t, line, key)
			}
		}
	}
	require.NotContains(t, tr.logs.String(), traceSecret)

	// The rendering in docs/operations.md comes from here.
	t.Log("\n" + telemetrytest.Render(telemetrytest.Trace(all, consumer.SpanContext().TraceID()), true))
}

// TestDenialsAreSpanEvents checks that a gate's refusal and an accessor's
// denial are events naming the rule and the code, without the detail.
func TestDenialsAreSpanEvents(t *testing.T) {
	t.Parallel()
	tr := newTraced(t)
	r := tr.run(t, client.Call{CallID: "deny1", Tool: "admin_only", PersonalityID: "agent"})
	require.False(t, r.OK)
	consumer := tr.consumerSpan(t, "deny1")
	policy := childrenOf(tr.workerSpans.Ended(), consumer)["policy"]
	require.NotNil(t, policy)
	require.Len(t, policy.Events(), 1)
	ev := policy.Events()[0]
	require.Equal(t, telemetry.EventDenial, ev.Name)
	require.ElementsMatch(t, []attribute.KeyValue{telemetry.AttrGate.String("permission"), telemetry.AttrDenialCode.String("not_available")}, ev.Attributes)
	require.Equal(t, "not_available", attr(consumer, "capstan.outcome"))
	require.Equal(t, "Error", consumer.Status().Code.String())

	hostArg := "needle-host-" + argNeedle + ".example"
	r = tr.run(t, client.Call{CallID: "deny2", Tool: "lookup", PersonalityID: "agent",
		Args: json.RawMessage(fmt.Sprintf(`{"url":"http://%s","q":"x"}`, hostArg))})
	require.Contains(t, r.Error, "HOST_NOT_ALLOWED")
	consumer = tr.consumerSpan(t, "deny2")
	exec := childrenOf(tr.workerSpans.Ended(), consumer)["execute_tool lookup"]
	require.NotNil(t, exec)
	require.Len(t, exec.Events(), 1)
	require.ElementsMatch(t, []attribute.KeyValue{telemetry.AttrGate.String("accessor"), telemetry.AttrDenialCode.String("HOST_NOT_ALLOWED")}, exec.Events()[0].Attributes)
	require.Empty(t, childrenOf(tr.workerSpans.Ended(), exec)["GET"], "a denied request makes no HTTP span")
	requireClean(t, tr.workerSpans.Ended(), traceSecret, argNeedle)
}

// TestForeignTraceparentIsHonoured publishes calls the way a client in
// another language would: raw JSON with a lower-case traceparent header.
func TestForeignTraceparentIsHonoured(t *testing.T) {
	t.Parallel()
	tr := newTraced(t)
	const traceID, spanID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	publish := func(callID, headerName string) {
		body, err := json.Marshal(protocol.Call{CallID: callID, Tool: "admin_only", SessionID: "s", Args: json.RawMessage(`{}`)})
		require.NoError(t, err)
		h := bus.Header{headerName: {"00-" + traceID + "-" + spanID + "-01"}, "tracestate": {"vendor=opaque"}}
		_, err = tr.e.conn.Publish(ctxT(t), "capstan.call.default.default.admin_only", body, h, callID)
		require.NoError(t, err)
	}
	publish("py1", "traceparent")
	consumer := tr.consumerSpan(t, "py1")
	require.Equal(t, traceID, consumer.SpanContext().TraceID().String())
	require.Equal(t, spanID, consumer.Parent().SpanID().String())
	require.Len(t, consumer.Links(), 1)
	require.Equal(t, spanID, consumer.Links()[0].SpanContext.SpanID().String())
	require.Equal(t, "vendor=opaque", consumer.SpanContext().TraceState().String())

	// A header spelled in another case is not the trace context.
	publish("py2", "Traceparent")
	consumer = tr.consumerSpan(t, "py2")
	require.NotEqual(t, traceID, consumer.SpanContext().TraceID().String())
	require.False(t, consumer.Parent().IsValid())
	require.Empty(t, consumer.Links())
}

// TestMetricsMoveWithCalls checks the counters as calls succeed and fail.
func TestMetricsMoveWithCalls(t *testing.T) {
	t.Parallel()
	tr := newTraced(t)
	toolAttr := func(n string) attribute.KeyValue { return telemetry.GenAIToolName.String(n) }
	outcome := func(o string) attribute.KeyValue { return telemetry.AttrOutcome.String(o) }

	args := json.RawMessage(fmt.Sprintf(`{"url":%q,"q":"a"}`, tr.srv.URL))
	for i := range 2 {
		r := tr.run(t, client.Call{CallID: fmt.Sprintf("ok%d", i), Tool: "lookup", PersonalityID: "agent", Args: args})
		require.True(t, r.OK, r.Error)
	}
	r := tr.run(t, client.Call{CallID: "bad1", Tool: "lookup", PersonalityID: "agent", Args: json.RawMessage(`{"url":1}`)})
	require.Equal(t, protocol.CodeInputInvalid, r.Code)
	r = tr.run(t, client.Call{CallID: "boom1", Tool: "boom", PersonalityID: "agent"})
	require.False(t, r.OK)
	r = tr.run(t, client.Call{CallID: "perm1", Tool: "admin_only", PersonalityID: "agent"})
	require.Equal(t, protocol.CodeNotAvailable, r.Code)
	for _, id := range []string{"ok0", "ok1", "bad1", "boom1", "perm1"} {
		tr.consumerSpan(t, id) // every call is fully recorded
	}

	require.Equal(t, 2.0, tr.metrics(telemetry.MetricCalls, toolAttr("lookup"), outcome("ok")))
	require.Equal(t, 1.0, tr.metrics(telemetry.MetricCalls, toolAttr("lookup"), outcome("input_invalid")))
	require.Equal(t, 1.0, tr.metrics(telemetry.MetricCalls, toolAttr("boom"), outcome("execution_failed")))
	require.Equal(t, 1.0, tr.metrics(telemetry.MetricCalls, toolAttr("admin_only"), outcome("not_available")))
	require.Equal(t, 5.0, tr.metrics(telemetry.MetricCallDuration), "one duration per answered call")
	require.Equal(t, 5.0, tr.metrics(telemetry.MetricDeliveries, telemetry.AttrRedelivery.Bool(false)))
	require.Equal(t, 1.0, tr.metrics(telemetry.MetricDenials, telemetry.AttrGate.String("schema"), telemetry.AttrDenialCode.String("input_invalid")))
	require.Equal(t, 1.0, tr.metrics(telemetry.MetricDenials, telemetry.AttrGate.String("permission")))
	require.Equal(t, 2.0, tr.metrics(telemetry.MetricSecretCacheMiss)+tr.metrics(telemetry.MetricSecretCacheHits), "two resolutions")
	require.Equal(t, 1.0, tr.metrics(telemetry.MetricSecretCacheHits), "the second one from the cache")
	require.Equal(t, 0.0, tr.metrics(telemetry.MetricCallsInFlight))
	require.Equal(t, 64.0, tr.metrics(telemetry.MetricSlotsFree))
	require.Equal(t, 0.0, tr.metrics(telemetry.MetricDLQSize))

	// A rate-limited call is a denial and a rate-limit refusal.
	tr.e.putPersonality("limited", "id: limited\nrate_limits:\n  admin_only: {requests: 1, window: 7d}\npermissions: [\"admin:write\"]\n")
	r = tr.run(t, client.Call{CallID: "rl1", Tool: "admin_only", PersonalityID: "limited"})
	require.True(t, r.OK, r.Error)
	r = tr.run(t, client.Call{CallID: "rl2", Tool: "admin_only", PersonalityID: "limited"})
	require.Equal(t, protocol.CodeNotAvailable, r.Code)
	tr.consumerSpan(t, "rl2")
	require.Equal(t, 1.0, tr.metrics(telemetry.MetricRateLimitRefusal))
	require.Equal(t, 1.0, tr.metrics(telemetry.MetricDenials, telemetry.AttrGate.String("rate_limit")))

	// A made-up tool name is counted as _OTHER.
	tr.e.call(protocol.Call{CallID: "unk1", Tool: "no_such_tool"})
	require.Equal(t, protocol.CodeNotAvailable, tr.e.result("unk1", "unk1").Code)
	tr.consumerSpan(t, "unk1")
	require.Equal(t, 1.0, tr.metrics(telemetry.MetricCalls, toolAttr(telemetry.OtherTool), outcome("not_available")))
	require.Equal(t, 0.0, tr.metrics(telemetry.MetricCalls, toolAttr("no_such_tool")))
}
