package observe_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/internal/telemetry/otelsetup"
	"github.com/capstanhq/capstan/worker/internal/observe"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// discard counts the spans it is given and keeps none.
type discard struct{ n atomic.Uint64 }

func (d *discard) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	d.n.Add(uint64(len(spans)))
	return nil
}

func (d *discard) Shutdown(context.Context) error { return nil }

// BenchmarkCallTelemetry is the telemetry of one echo call as the worker
// makes it (callexec): the consumer span, the policy, execute_tool and
// reduce phases, the result's producer span with its headers, the metrics.
// "traced" exports every span as capstan-bench's traced scenario does (an
// always-on sampler, a DropQueue in front of a batch processor);
// "sampled-out" has the same provider with a worker binary's default
// sampler (by the parent) and a call whose traceparent is not sampled;
// "untraced" has a no-op tracer provider.
func BenchmarkCallTelemetry(b *testing.B) {
	names, err := protocol.NewNames("")
	if err != nil {
		b.Fatal(err)
	}
	subject, err := names.CallSubject("default", "bench", "echo")
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"traced", "sampled-out", "untraced"} {
		b.Run(name, func(b *testing.B) {
			var tp trace.TracerProvider = noop.NewTracerProvider()
			exp := &discard{}
			if name != "untraced" {
				sampler := sdktrace.AlwaysSample()
				if name == "sampled-out" {
					sampler = sdktrace.ParentBased(sampler)
				}
				q := otelsetup.NewDropQueue(sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBlocking()), 0, nil)
				sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(q))
				b.Cleanup(func() { _ = sdk.Shutdown(context.Background()) })
				tp = sdk
			}
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			o, err := observe.New(observe.Config{TracerProvider: tp, MeterProvider: mp, Names: names, Pool: "default",
				WorkerID: "bench-worker", Hosted: func(string) bool { return true }})
			if err != nil {
				b.Fatal(err)
			}
			hdr := bus.Header{protocol.HeaderProtocol: {protocol.Version}}
			switch name {
			case "traced":
				hdr.Set(protocol.HeaderTraceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
			case "sampled-out":
				hdr.Set(protocol.HeaderTraceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")
			}
			m := &bus.Msg{Subject: subject, Header: hdr, Deliveries: 1}
			call := &protocol.Call{CallID: "01JBENCHCALL0000000000000", BatchID: "01JBENCHBATCH000000000000", Tool: "echo", PersonalityID: "bench"}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				oneCall(o, names, m, call)
			}
		})
	}
}

// oneCall makes the telemetry of one answered call, in the order and with
// the calls of worker/internal/callexec.
func oneCall(o *observe.Observer, names protocol.Names, m *bus.Msg, call *protocol.Call) {
	ctx, cs := o.StartCall(m)
	cs.Decoded(call)
	_, policy := o.Phase(ctx, "policy")
	observe.SetAttributes(policy, telemetry.AttrPersonality.String(call.PersonalityID), telemetry.AttrDecision.String(protocol.DecisionAllowed))
	policy.End()
	_, exec := o.ExecuteTool(ctx, call.Tool, call.CallID)
	exec.End()
	_, reduce := o.Phase(ctx, "reduce")
	observe.SetAttributes(reduce, telemetry.AttrTruncated.Bool(false))
	reduce.End()
	subject, _ := names.ResultSubject(call.PersonalityID, call.BatchID, call.CallID)
	sctx, span := o.StartPublish(ctx, subject, call.CallID)
	h := bus.Header{protocol.HeaderProtocol: {protocol.Version}}
	if !trace.SpanContextFromContext(sctx).IsValid() {
		if v := m.Header.Get(protocol.HeaderTraceparent); v != "" {
			h.Set(protocol.HeaderTraceparent, v)
		}
	}
	telemetry.Inject(sctx, h)
	span.SetBodySize(1147)
	span.End(nil)
	res := &protocol.Result{CallID: call.CallID, OK: true}
	o.RecordAnswer(ctx, call.Tool, res, protocol.DecisionAllowed)
	cs.Outcome = "ok"
	cs.End()
}
