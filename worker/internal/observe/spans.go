package observe

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The start options of the worker's spans, made once: an option built per
// span (and the slice passing it) is an allocation per span.
var (
	consumerStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}
	internalStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	producerStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
)

// maxSpanAttrs is the most attributes the worker sets on one span in one
// call (a consumer span's); the pooled buffers start with room for them.
const maxSpanAttrs = 18

// attrBufs holds the buffers a span's attributes are gathered in for its
// one SetAttributes call.
var attrBufs = sync.Pool{New: func() any {
	b := make([]attribute.KeyValue, 0, maxSpanAttrs)
	return &b
}}

func getAttrs() *[]attribute.KeyValue { return attrBufs.Get().(*[]attribute.KeyValue) }

// setAttrs sets b on span and gives its buffer back to the pool, cleared
// so that it keeps no value alive.
func setAttrs(span trace.Span, bp *[]attribute.KeyValue, b []attribute.KeyValue) {
	span.SetAttributes(b...)
	clear(b)
	*bp = b[:0]
	attrBufs.Put(bp)
}

// SetAttributes sets kvs on span in one call, and only when span records.
// A span copies the attributes it is given (the SDK's appends them to its
// own slice), so kvs are passed on in a pooled buffer and a caller's
// variadic arguments stay on its stack; setting them in one call sizes the
// span's attribute slice once instead of growing it call by call.
func SetAttributes(span trace.Span, kvs ...attribute.KeyValue) {
	if len(kvs) == 0 || !span.IsRecording() {
		return
	}
	bp := getAttrs()
	setAttrs(span, bp, append((*bp)[:0], kvs...))
}

// precompute makes what every span of the observer shares: whether it
// traces at all, the constant attributes of consumer and result spans,
// and the result span's name.
func (o *Observer) precompute() {
	switch o.tp.(type) {
	case noop.TracerProvider, *noop.TracerProvider:
	default:
		o.tracing = true
	}
	o.consumerAttrs = []attribute.KeyValue{
		semconv.MessagingSystemKey.String("nats"),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingConsumerGroupName(o.cfg.Pool),
		telemetry.AttrWorkerID.String(o.cfg.WorkerID),
		telemetry.AttrPool.String(o.cfg.Pool),
	}
	// The result span is named after the subject template: the real
	// subject holds ids.
	template := o.cfg.Names.Prefix() + ".result.{personality}.{batch_id}.{call_id}"
	o.publishName = "send " + template
	o.publishAttrs = []attribute.KeyValue{
		semconv.MessagingSystemKey.String("nats"),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
		semconv.MessagingDestinationTemplate(template),
	}
}

// CallSpan is the consumer span of one delivery and what its end records.
// The span's attributes are gathered along the way and set when it ends,
// in one call.
type CallSpan struct {
	// Span is the consumer span.
	Span  trace.Span
	start time.Time
	tool  string // the metrics' tool: a hosted tool's name, else telemetry.OtherTool
	// Outcome is how the delivery ended (its span's outcome attribute);
	// "" ends it as "dropped".
	Outcome string
	busy    *atomic.Int64

	// What the span's attributes say, for a span that records (consts
	// set): the delivery, the call's ids once decoded, the decision and
	// error of its answer.
	consts                  []attribute.KeyValue
	subject                 string
	deliveries              uint64
	callID, callTool, batch string
	decoded, dryRun         bool
	answered                bool
	decision, errorType     string
}

type callSpanKey struct{}

// CallSpanFrom returns the delivery's span that ctx carries, or nil.
func CallSpanFrom(ctx context.Context) *CallSpan {
	cs, _ := ctx.Value(callSpanKey{}).(*CallSpan)
	return cs
}

// metricTool is the tool name metrics carry: the name of a hosted tool, or
// telemetry.OtherTool, so made-up names cannot grow their cardinality.
func (o *Observer) metricTool(name string) string {
	if o.cfg.Hosted(name) {
		return name
	}
	return telemetry.OtherTool
}

// StartCall starts the consumer span of a delivered call ("process
// <subject>"). Its parent is the producer's context from the call's
// traceparent (lower-case, case-sensitive), and it links to it, as OTel
// messaging conventions ask of a message that may be delivered again.
// With a no-op tracer provider no span is started: the context carries the
// producer's span context, as a no-op span would.
func (o *Observer) StartCall(m *bus.Msg) (context.Context, *CallSpan) {
	parent := telemetry.Extract(context.Background(), m.Header)
	tokens, _ := o.cfg.Names.ParseCallSubject(m.Subject)
	cs := &CallSpan{start: time.Now(), tool: o.metricTool(tokens.Tool), busy: &o.busy}
	o.busy.Add(1)
	ctx := parent
	if o.tracing {
		ctx, cs.Span = o.tracer.Start(parent, "process "+m.Subject, consumerStart...)
		// Only a span that records gathers attributes: an untraced call (a
		// span not sampled) would build them for nothing.
		if cs.Span.IsRecording() {
			cs.consts, cs.subject, cs.deliveries = o.consumerAttrs, m.Subject, m.Deliveries
			// The link is added to the started span rather than passed as a
			// start option (a closure and two slices per call); the worker's
			// samplers decide by the parent, never by links.
			if producer := trace.SpanContextFromContext(parent); producer.IsValid() {
				cs.Span.AddLink(trace.Link{SpanContext: producer})
			}
		}
	} else {
		cs.Span = trace.SpanFromContext(parent)
	}
	o.deliveries.Add(ctx, 1, o.measurement(attrKey{delivery: true, tool: cs.tool, redelivery: m.Deliveries > 1}))
	return context.WithValue(ctx, callSpanKey{}, cs), cs
}

// Decoded records the call's ids for its consumer span.
func (cs *CallSpan) Decoded(call *protocol.Call) {
	if cs.consts == nil {
		return
	}
	cs.decoded = true
	cs.callID, cs.callTool, cs.batch = call.CallID, call.Tool, call.EffectiveBatchID()
}

// DryRun marks the delivery's call a dry run (capstan.dry_run).
func (cs *CallSpan) DryRun() { cs.dryRun = true }

// End ends the consumer span with the attributes gathered and the outcome
// set along the way.
func (cs *CallSpan) End() {
	outcome := cs.Outcome
	if outcome == "" {
		outcome = "dropped"
	}
	if cs.consts != nil {
		cs.setAttributes(outcome)
	}
	if outcome != "ok" && outcome != "duplicate" && outcome != "handback" && outcome != "in_progress" {
		cs.Span.SetStatus(codes.Error, outcome)
	}
	cs.Span.End()
	cs.busy.Add(-1)
}

// setAttributes sets every attribute of the consumer span in one call.
func (cs *CallSpan) setAttributes(outcome string) {
	bp := getAttrs()
	b := append((*bp)[:0], cs.consts...)
	b = append(b, semconv.MessagingDestinationName(cs.subject), telemetry.AttrDeliveries.Int64(int64(cs.deliveries)))
	if cs.decoded {
		b = append(b, semconv.MessagingMessageID(cs.callID), telemetry.GenAIToolCallID.String(cs.callID),
			telemetry.GenAIToolName.String(cs.callTool), telemetry.AttrBatchID.String(cs.batch))
	}
	if cs.dryRun {
		b = append(b, telemetry.AttrDryRun.Bool(true))
	}
	if cs.answered {
		b = append(b, telemetry.AttrDecision.String(cs.decision))
	}
	if cs.errorType != "" {
		b = append(b, semconv.ErrorTypeKey.String(cs.errorType))
	}
	b = append(b, telemetry.AttrOutcome.String(outcome))
	setAttrs(cs.Span, bp, b)
}

// SetOutcome records how the delivery ended, for its span.
func SetOutcome(ctx context.Context, outcome string) {
	if cs := CallSpanFrom(ctx); cs != nil {
		cs.Outcome = outcome
	}
}

// RecordAnswer records a published result res of a call of tool: the span's outcome and decision, the
// calls counter and, for a delivery handled here, the duration histogram.
func (o *Observer) RecordAnswer(ctx context.Context, tool string, res *protocol.Result, decision string) {
	outcome := "ok"
	if !res.OK {
		outcome = string(res.Code)
	}
	toolName := o.metricTool(tool)
	attrs := o.measurement(attrKey{tool: toolName, outcome: outcome})
	o.calls.Add(ctx, 1, attrs)
	if cs := CallSpanFrom(ctx); cs != nil {
		cs.Outcome = outcome
		cs.answered, cs.decision = true, decision
		if !res.OK {
			cs.errorType = outcome
		}
		o.duration.Record(ctx, time.Since(cs.start).Seconds(), attrs)
	}
}

// noSpan is the span of a phase that is not traced: it does nothing.
var noSpan = trace.SpanFromContext(context.Background())

// Phase starts a child span of the call's current span, with attrs.
// A call whose span records nothing gets no phase spans: every sampler a
// worker can be configured with decides a child as it decided its parent
// (by the parent's decision or by the trace id), so they would record
// nothing either; ctx is returned as is, with a span that does nothing.
func (o *Observer) Phase(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	ctx, span := o.tracer.Start(ctx, name, internalStart...)
	SetAttributes(span, attrs...)
	return ctx, span
}

// toolSpan is the name and the constant attributes of a tool's
// execute_tool spans.
type toolSpan struct {
	name  string
	attrs []attribute.KeyValue
}

// toolSpanOf returns tool's toolSpan, made on its first call. tool is a
// hosted tool's name, so the cache stays as small as the toolset.
func (o *Observer) toolSpanOf(tool string) *toolSpan {
	if v, ok := o.tools.Load(tool); ok {
		return v.(*toolSpan)
	}
	ts := &toolSpan{name: "execute_tool " + tool, attrs: []attribute.KeyValue{
		telemetry.GenAIOperationName.String(telemetry.OpExecuteTool),
		telemetry.GenAIToolName.String(tool),
		telemetry.GenAIToolType.String("function"),
	}}
	v, _ := o.tools.LoadOrStore(tool, ts)
	return v.(*toolSpan)
}

// ExecuteTool starts the "execute_tool <tool>" span of a call of the
// hosted tool, a child of the call's span carrying the GenAI attributes,
// or returns ctx and a span that does nothing when the call's span records
// nothing (see Phase).
func (o *Observer) ExecuteTool(ctx context.Context, tool, callID string) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	ts := o.toolSpanOf(tool)
	ctx, span := o.tracer.Start(ctx, ts.name, internalStart...)
	if span.IsRecording() {
		bp := getAttrs()
		b := append((*bp)[:0], ts.attrs...)
		setAttrs(span, bp, append(b, telemetry.GenAIToolCallID.String(callID)))
	}
	return ctx, span
}

// sampledOut reports whether ctx carries a span started in this process
// that records nothing.
func sampledOut(ctx context.Context) bool {
	span := trace.SpanFromContext(ctx)
	sc := span.SpanContext()
	return sc.IsValid() && !sc.IsRemote() && !span.IsRecording()
}

// PublishSpan is the producer span of a result's publication. Its
// attributes are set when it ends, in one call.
type PublishSpan struct {
	span            trace.Span
	consts          []attribute.KeyValue // set for a span that records
	subject, callID string
	bodySize        int
	sized           bool
}

// StartPublish starts the producer span of a result publication, named
// after the subject template ("send <p>.result.{personality}.{batch_id}.{call_id}"):
// the real subject holds ids. With a no-op tracer provider, or under a
// span of this worker that records nothing (a call sampled out, see
// Phase), no span is started and ctx is returned as is: the result then
// carries that span's context. Under a remote parent alone (an abandoned
// call's result) the sampler decides.
func (o *Observer) StartPublish(ctx context.Context, subject, callID string) (context.Context, PublishSpan) {
	if !o.tracing || sampledOut(ctx) {
		return ctx, PublishSpan{span: noSpan}
	}
	ctx, span := o.tracer.Start(ctx, o.publishName, producerStart...)
	p := PublishSpan{span: span}
	if span.IsRecording() {
		p.consts, p.subject, p.callID = o.publishAttrs, subject, callID
	}
	return ctx, p
}

// SetBodySize records the size of the result message's body.
func (p *PublishSpan) SetBodySize(n int) { p.bodySize, p.sized = n, true }

// End ends the span, marked failed when err is set.
func (p *PublishSpan) End(err error) {
	if p.consts != nil {
		bp := getAttrs()
		b := append((*bp)[:0], p.consts...)
		b = append(b, semconv.MessagingDestinationName(p.subject), semconv.MessagingMessageID(protocol.ResultMsgID(p.callID)))
		if p.sized {
			b = append(b, semconv.MessagingMessageBodySize(p.bodySize))
		}
		if err != nil {
			b = append(b, semconv.ErrorTypeOther)
		}
		setAttrs(p.span, bp, b)
	}
	if err != nil {
		p.span.SetStatus(codes.Error, "publish failed")
	}
	p.span.End()
}
