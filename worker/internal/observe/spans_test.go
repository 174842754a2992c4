package observe_test

import (
	"context"
	"errors"
	"testing"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/worker/internal/observe"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

const (
	sampledParent    = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	notSampledParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
)

type fixture struct {
	o     *observe.Observer
	names protocol.Names
	rec   *tracetest.SpanRecorder
	call  *protocol.Call
}

// newFixture returns an observer whose spans the recorder gets, sampled as
// a worker binary samples them (by the parent, else always).
func newFixture(t *testing.T, tp trace.TracerProvider, rec *tracetest.SpanRecorder) fixture {
	t.Helper()
	names, err := protocol.NewNames("")
	require.NoError(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	o, err := observe.New(observe.Config{TracerProvider: tp, MeterProvider: mp, Names: names, Pool: "default",
		WorkerID: "w1", Hosted: func(string) bool { return true }})
	require.NoError(t, err)
	return fixture{o: o, names: names, rec: rec,
		call: &protocol.Call{CallID: "c1", BatchID: "b1", Tool: "echo", PersonalityID: "bench"}}
}

func sdkFixture(t *testing.T) fixture {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return newFixture(t, tp, rec)
}

func (f fixture) msg(t *testing.T, traceparent string, deliveries uint64) *bus.Msg {
	t.Helper()
	subject, err := f.names.CallSubject("default", "bench", "echo")
	require.NoError(t, err)
	h := bus.Header{}
	if traceparent != "" {
		h.Set(protocol.HeaderTraceparent, traceparent)
	}
	return &bus.Msg{Subject: subject, Header: h, Deliveries: deliveries}
}

func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

func byName(spans []sdktrace.ReadOnlySpan) map[string]sdktrace.ReadOnlySpan {
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		out[s.Name()] = s
	}
	return out
}

// TestCallSpansCarryTheirAttributes checks every span of one answered call
// and every attribute operations.md ("Traces") lists for it, gathered
// along the call and set when each span ends.
func TestCallSpansCarryTheirAttributes(t *testing.T) {
	t.Parallel()
	f := sdkFixture(t)
	oneCall(f.o, f.names, f.msg(t, sampledParent, 1), f.call)
	spans := byName(f.rec.Ended())
	require.Len(t, spans, 5)

	consumer := spans["process capstan.call.default.bench.echo"]
	require.NotNil(t, consumer)
	require.Equal(t, trace.SpanKindConsumer, consumer.SpanKind())
	require.Equal(t, map[string]string{
		"messaging.system": "nats", "messaging.operation.type": "process", "messaging.operation.name": "process",
		"messaging.destination.name": "capstan.call.default.bench.echo", "messaging.consumer.group.name": "default",
		"messaging.message.id": "c1", "gen_ai.tool.name": "echo", "gen_ai.tool.call.id": "c1", "capstan.batch.id": "b1",
		"capstan.pool": "default", "capstan.worker.id": "w1", "capstan.deliveries": "1",
		"capstan.decision": "allowed", "capstan.outcome": "ok",
	}, attrs(consumer))
	require.Equal(t, "b7ad6b7169203331", consumer.Parent().SpanID().String())
	require.Len(t, consumer.Links(), 1)
	require.Equal(t, "b7ad6b7169203331", consumer.Links()[0].SpanContext.SpanID().String())
	require.Equal(t, codes.Unset, consumer.Status().Code)

	require.Equal(t, map[string]string{"capstan.personality.id": "bench", "capstan.decision": "allowed"}, attrs(spans["policy"]))
	require.Equal(t, map[string]string{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo",
		"gen_ai.tool.call.id": "c1", "gen_ai.tool.type": "function"}, attrs(spans["execute_tool echo"]))
	require.Equal(t, map[string]string{"capstan.result.truncated": "false"}, attrs(spans["reduce"]))
	publish := spans["send capstan.result.{personality}.{batch_id}.{call_id}"]
	require.NotNil(t, publish)
	require.Equal(t, trace.SpanKindProducer, publish.SpanKind())
	require.Equal(t, map[string]string{
		"messaging.system": "nats", "messaging.operation.type": "send", "messaging.operation.name": "send",
		"messaging.destination.name": "capstan.result.bench.b1.c1", "messaging.destination.template": "capstan.result.{personality}.{batch_id}.{call_id}",
		"messaging.message.id": "c1.result", "messaging.message.body.size": "1147",
	}, attrs(publish))
	for name, s := range spans {
		if s != consumer {
			require.Equal(t, consumer.SpanContext().SpanID(), s.Parent().SpanID(), name)
		}
	}
}

// TestFailedCallSpans checks the attributes and statuses of a call that
// failed, was a dry run, was delivered again and whose result could not be
// published.
func TestFailedCallSpans(t *testing.T) {
	t.Parallel()
	f := sdkFixture(t)
	ctx, cs := f.o.StartCall(f.msg(t, sampledParent, 3))
	cs.Decoded(f.call)
	observe.CallSpanFrom(ctx).DryRun()
	_, publish := f.o.StartPublish(ctx, "capstan.result.bench.b1.c1", "c1")
	publish.End(errors.New("no stream"))
	f.o.RecordAnswer(ctx, "echo", &protocol.Result{CallID: "c1", Code: protocol.CodeInputInvalid}, protocol.DecisionSchema)
	cs.End()

	spans := byName(f.rec.Ended())
	consumer := spans["process capstan.call.default.bench.echo"]
	got := attrs(consumer)
	require.Equal(t, "3", got["capstan.deliveries"])
	require.Equal(t, "true", got["capstan.dry_run"])
	require.Equal(t, "schema", got["capstan.decision"])
	require.Equal(t, "input_invalid", got["capstan.outcome"])
	require.Equal(t, "input_invalid", got["error.type"])
	require.Equal(t, codes.Error, consumer.Status().Code)

	p := spans["send capstan.result.{personality}.{batch_id}.{call_id}"]
	require.Equal(t, "_OTHER", attrs(p)["error.type"])
	require.NotContains(t, attrs(p), "messaging.message.body.size", "no body was encoded")
	require.Equal(t, codes.Error, p.Status().Code)
	require.Equal(t, "publish failed", p.Status().Description)
}

// TestUndecodedDeliveryIsDropped checks the consumer span of a delivery
// that ended before its call was decoded or answered.
func TestUndecodedDeliveryIsDropped(t *testing.T) {
	t.Parallel()
	f := sdkFixture(t)
	_, cs := f.o.StartCall(f.msg(t, "", 1))
	cs.End()
	spans := f.rec.Ended()
	require.Len(t, spans, 1)
	got := attrs(spans[0])
	require.Equal(t, "dropped", got["capstan.outcome"])
	require.NotContains(t, got, "gen_ai.tool.call.id")
	require.NotContains(t, got, "capstan.decision")
	require.Empty(t, spans[0].Links(), "a call without traceparent starts a new trace and links nothing")
	require.False(t, spans[0].Parent().IsValid())
	require.Equal(t, codes.Error, spans[0].Status().Code)
}

// TestSampledOutCallsRecordNothing checks that a call whose producer did
// not sample it gets no span that records, no phase span and nothing
// exported, and that its result still carries the trace context.
func TestSampledOutCallsRecordNothing(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := newFixture(t, tp, rec)
	ctx, cs := f.o.StartCall(f.msg(t, notSampledParent, 1))
	require.False(t, cs.Span.IsRecording())
	pctx, policy := f.o.Phase(ctx, "policy")
	require.Equal(t, ctx, pctx, "no phase span under a span that records nothing")
	require.False(t, policy.IsRecording())
	_, exec := f.o.ExecuteTool(ctx, "echo", "c1")
	require.False(t, exec.IsRecording())
	oneCall(f.o, f.names, f.msg(t, notSampledParent, 1), f.call)
	cs.End()
	require.Empty(t, rec.Started())
	require.Empty(t, rec.Ended())

	sctx, publish := f.o.StartPublish(ctx, "capstan.result.bench.b1.c1", "c1")
	h := map[string][]string{}
	telemetry.Inject(sctx, h)
	publish.End(nil)
	require.Equal(t, []string{"00-0af7651916cd43dd8448eb211c80319c-" + cs.Span.SpanContext().SpanID().String() + "-00"}, h["traceparent"],
		"the result carries the unrecorded consumer span's context")

	// An abandoned call's result has only the remote parent: the sampler
	// decides, and a sampled parent gets its span.
	rctx := telemetry.Extract(context.Background(), map[string][]string{"traceparent": {sampledParent}})
	_, publish = f.o.StartPublish(rctx, "capstan.result.bench.b1.c1", "c1")
	publish.End(nil)
	require.Len(t, rec.Ended(), 1)
	require.Equal(t, "b7ad6b7169203331", rec.Ended()[0].Parent().SpanID().String())
}

// TestNoopTracerProviderStartsNoSpan checks that under a no-op tracer
// provider a call's context carries its producer's span context alone, as
// a no-op span would: its log lines and its result still lead to the
// caller's trace.
func TestNoopTracerProviderStartsNoSpan(t *testing.T) {
	t.Parallel()
	f := newFixture(t, noop.NewTracerProvider(), nil)
	ctx, cs := f.o.StartCall(f.msg(t, sampledParent, 1))
	require.False(t, cs.Span.IsRecording())
	sc := trace.SpanContextFromContext(ctx)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", sc.TraceID().String())
	require.Equal(t, "b7ad6b7169203331", sc.SpanID().String())
	sctx, publish := f.o.StartPublish(ctx, "capstan.result.bench.b1.c1", "c1")
	h := map[string][]string{}
	telemetry.Inject(sctx, h)
	publish.SetBodySize(10)
	publish.End(nil)
	require.Equal(t, []string{sampledParent}, h["traceparent"])
	cs.End()

	ctx, cs = f.o.StartCall(f.msg(t, "", 1))
	require.False(t, trace.SpanContextFromContext(ctx).IsValid())
	cs.End()
}

// TestSetAttributesKeepsNoBuffer sets attributes on spans one after the
// other: the pooled buffer they pass through is reused, and no span may
// see another's values.
func TestSetAttributesKeepsNoBuffer(t *testing.T) {
	t.Parallel()
	f := sdkFixture(t)
	tr := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.rec)).Tracer("t")
	var ended []sdktrace.ReadOnlySpan
	for i, v := range []string{"a", "b", "c"} {
		_, s := tr.Start(context.Background(), v)
		observe.SetAttributes(s, attribute.String("k", v), attribute.Int("i", i))
		s.End()
		ended = append(ended, s.(sdktrace.ReadOnlySpan))
	}
	for i, s := range ended {
		require.Equal(t, map[string]string{"k": s.Name(), "i": string(rune('0' + i))}, attrs(s))
	}
	observe.SetAttributes(trace.SpanFromContext(context.Background()), attribute.String("k", "v")) // no span: nothing to do
}
