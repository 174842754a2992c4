// Package observe is the tracing and metrics middleware around a worker's
// calls: the consumer span of a delivery and the child spans of its phases,
// spans around the accessors a tool uses (secrets, processes, HTTP), the
// producer span of a result, and the worker's metrics and gauges. It sees
// ids, names, decisions and codes only: never an argument value, a secret
// value or a result.
package observe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
	scopedsecrets "github.com/capstanhq/capstan/internal/scoped/secrets"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/tool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Observer is the tracing and metrics middleware around every call: the
// pipeline calls it at the edges of each phase and never inside a tool.
// Spans and metrics carry ids, names, decisions and codes only: never an
// argument value, a secret value or a result.
type Observer struct {
	cfg    Config
	tp     trace.TracerProvider
	mp     metric.MeterProvider
	tracer trace.Tracer
	// tracing is false for a no-op tracer provider: no span is started at
	// all, and a call's context carries its caller's span context alone,
	// which is all a no-op tracer would give it.
	tracing bool
	// consumerAttrs are the attributes every consumer span carries
	// whatever the call; publishName and publishAttrs the same for a
	// result's producer span; tools the execute_tool span name and
	// attributes of each tool (toolSpan), made once.
	consumerAttrs []attribute.KeyValue
	publishName   string
	publishAttrs  []attribute.KeyValue
	tools         sync.Map
	// busy counts the deliveries being handled (each holds a slot).
	busy atomic.Int64
	// attrs holds the measurement options of the per-call metrics by their
	// attribute values (attrKey), so that a call does not build, sort and
	// hash the same attribute set again. The values are bounded: hosted
	// tools or telemetry.OtherTool, outcomes, and a redelivery flag.
	attrs sync.Map

	calls       metric.Int64Counter
	duration    metric.Float64Histogram
	deliveries  metric.Int64Counter
	denials     metric.Int64Counter
	rateLimited metric.Int64Counter
	// publishFailures counts failed publishes by kind and reason;
	// blobs and blobBytes count the blobs stored and their bytes.
	publishFailures metric.Int64Counter
	blobs           metric.Int64Counter
	blobBytes       metric.Int64Counter
}

// Config says what the observer records about.
type Config struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Names          protocol.Names
	Pool, WorkerID string
	// Hosted reports whether a tool name is hosted: metrics carry other
	// names as telemetry.OtherTool.
	Hosted func(name string) bool
}

// New builds the observer's tracer and metrics.
func New(cfg Config) (*Observer, error) {
	tp, mp := cfg.TracerProvider, cfg.MeterProvider
	o := &Observer{cfg: cfg, tp: tp, mp: mp, tracer: telemetry.Tracer(tp)}
	o.precompute()
	m := telemetry.Meter(mp)
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	o.calls, err = m.Int64Counter(telemetry.MetricCalls, metric.WithUnit("{call}"),
		metric.WithDescription("Calls answered, by tool and outcome (ok or the error code)"))
	add(err)
	o.duration, err = m.Float64Histogram(telemetry.MetricCallDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from a call's delivery to its published result"),
		metric.WithExplicitBucketBoundaries(telemetry.DurationBuckets...))
	add(err)
	o.deliveries, err = m.Int64Counter(telemetry.MetricDeliveries, metric.WithUnit("{delivery}"),
		metric.WithDescription("Call messages delivered to this worker, redeliveries included"))
	add(err)
	o.denials, err = m.Int64Counter(telemetry.MetricDenials, metric.WithUnit("{denial}"),
		metric.WithDescription("Policy denials, by gate and code"))
	add(err)
	o.rateLimited, err = m.Int64Counter(telemetry.MetricRateLimitRefusal, metric.WithUnit("{call}"),
		metric.WithDescription("Calls refused by a fleet-wide rate limit"))
	add(err)
	o.publishFailures, err = m.Int64Counter(telemetry.MetricPublishFailures, metric.WithUnit("{failure}"),
		metric.WithDescription("Publishes that failed, by kind (result, progress, audit, dead_letter, blob) and reason"))
	add(err)
	o.blobs, err = m.Int64Counter(telemetry.MetricBlobs, metric.WithUnit("{blob}"),
		metric.WithDescription("Full outputs stored by reference in the blobs bucket"))
	add(err)
	o.blobBytes, err = m.Int64Counter(telemetry.MetricBlobBytes, metric.WithUnit("By"),
		metric.WithDescription("Bytes of the full outputs stored by reference"))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("worker: metrics: %w", err)
	}
	return o, nil
}

// PublishFailed counts a failed publish of kind for reason.
func (o *Observer) PublishFailed(ctx context.Context, kind, reason string) {
	o.publishFailures.Add(ctx, 1, metric.WithAttributes(telemetry.AttrPublishKind.String(kind), telemetry.AttrPublishReason.String(reason)))
}

// attrKey identifies the attribute set of a deliveries measurement
// (delivery true: tool and redelivery) or of a calls and duration
// measurement (tool and outcome).
type attrKey struct {
	delivery   bool
	tool       string
	outcome    string
	redelivery bool
}

// measurement returns the cached measurement option of k.
func (o *Observer) measurement(k attrKey) metric.MeasurementOption {
	if v, ok := o.attrs.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	var set attribute.Set
	if k.delivery {
		set = attribute.NewSet(telemetry.GenAIToolName.String(k.tool), telemetry.AttrRedelivery.Bool(k.redelivery))
	} else {
		set = attribute.NewSet(telemetry.GenAIToolName.String(k.tool), telemetry.AttrOutcome.String(k.outcome))
	}
	v, _ := o.attrs.LoadOrStore(k, metric.WithAttributeSet(set))
	return v.(metric.MeasurementOption)
}

// IsDenial reports whether a decision is a policy gate's refusal (not a
// cancellation, deadline or decode error).
func IsDenial(decision string) bool {
	switch decision {
	case protocol.DecisionUnknownTool, protocol.DecisionExcluded, protocol.DecisionPersonality, protocol.DecisionToolset,
		protocol.DecisionPermission, protocol.DecisionAvailable, protocol.DecisionRateLimit, protocol.DecisionSchema,
		protocol.DecisionCapability:
		return true
	}
	return false
}

// Denied records a denial: a span event on span naming the gate (the rule)
// and the code, and the denials counter. Never the denial's detail, which
// may quote argument values.
func (o *Observer) Denied(ctx context.Context, span trace.Span, gate, code string) {
	attrs := []attribute.KeyValue{telemetry.AttrGate.String(gate), telemetry.AttrDenialCode.String(code)}
	span.AddEvent(telemetry.EventDenial, trace.WithAttributes(attrs...))
	o.denials.Add(ctx, 1, metric.WithAttributes(attrs...))
	if gate == protocol.DecisionRateLimit {
		o.rateLimited.Add(ctx, 1)
	}
}

// HTTPTransport is the fetch accessor's transport middleware: otelhttp
// client spans, children of the tool's execution span.
func (o *Observer) HTTPTransport(next http.RoundTripper) http.RoundTripper {
	return telemetry.HTTPTransport(next, o.tp, o.mp)
}

// tracedSecrets gives every secret resolution a span. The span names
// neither the ref nor the value; error.type says why a resolution failed.
type tracedSecrets struct {
	next   tool.Secrets
	tracer trace.Tracer
}

func (s tracedSecrets) Secret(ctx context.Context, ref string) (string, error) {
	ctx, span := s.tracer.Start(ctx, "resolve secret", internalStart...)
	defer span.End()
	v, err := s.next.Secret(ctx, ref)
	endSecretSpan(span, err)
	return v, err
}

// endSecretSpan records on a "resolve secret" span why a resolution
// failed (error.type), never the ref or a value.
func endSecretSpan(span trace.Span, err error) {
	if err == nil {
		return
	}
	kind := "error"
	if code, ok := denialCode(err); ok {
		kind = code
	} else if errors.Is(err, secrets.ErrNotFound) {
		kind = "not_found"
	} else if errors.Is(err, secrets.ErrUnavailable) {
		kind = "unavailable"
	} else if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		kind = "cancelled"
	}
	span.SetAttributes(semconv.ErrorTypeKey.String(kind))
	span.SetStatus(codes.Error, kind)
}

// Resolved passes on the accessor's resolved values, for redaction.
func (s tracedSecrets) Resolved() []string {
	if r, ok := s.next.(interface{ Resolved() []string }); ok {
		return r.Resolved()
	}
	return nil
}

// tracedRunner gives every process a span. The executable's name is
// recorded only once it ran (then it is a name the personality allows, not
// free text); its arguments never are.
type tracedRunner struct {
	next   tool.Runner
	tracer trace.Tracer
}

func (r tracedRunner) Run(ctx context.Context, cmd tool.Command) (*tool.ProcessResult, error) {
	ctx, span := r.tracer.Start(ctx, "run process", internalStart...)
	defer span.End()
	res, err := r.next.Run(ctx, cmd)
	if code, denied := denialCode(err); denied {
		span.SetAttributes(semconv.ErrorTypeKey.String(code))
		span.SetStatus(codes.Error, code)
		return res, err
	}
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeOther)
		span.SetStatus(codes.Error, "process failed")
		return res, err
	}
	span.SetAttributes(semconv.ProcessExecutableName(filepath.Base(cmd.Binary)))
	if res != nil {
		span.SetAttributes(semconv.ProcessExitCode(res.ExitCode))
	}
	return res, err
}

// TraceAccessors wraps the call's secrets and process accessors with spans.
func (o *Observer) TraceAccessors(tc *tool.Context) {
	if tc.Secrets != nil {
		tc.Secrets = tracedSecrets{next: tc.Secrets, tracer: o.tracer}
	}
	if tc.Process != nil {
		tc.Process = tracedRunner{next: tc.Process, tracer: o.tracer}
	}
}

// denialCode is tool.DenialCode, false for nil.
func denialCode(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	return tool.DenialCode(err)
}

// BlobStored counts a blob of size bytes stored by reference.
func (o *Observer) BlobStored(ctx context.Context, size int) {
	o.blobs.Add(ctx, 1)
	o.blobBytes.Add(ctx, int64(size))
}

// Busy is the number of deliveries being handled.
func (o *Observer) Busy() int64 { return o.busy.Load() }

// tracedInjection gives every resolution of a secret the fetcher injects
// a "resolve secret" span, as tracedSecrets does for raw reads.
type tracedInjection struct {
	next   *scopedsecrets.Injection
	tracer trace.Tracer
}

func (t tracedInjection) CheckDestination(ref string, e capability.Endpoint) error {
	return t.next.CheckDestination(ref, e)
}

func (t tracedInjection) CheckCarried(e capability.Endpoint, parts ...string) error {
	return t.next.CheckCarried(e, parts...)
}

func (t tracedInjection) Resolve(ctx context.Context, ref string) (string, error) {
	ctx, span := t.tracer.Start(ctx, "resolve secret", internalStart...)
	defer span.End()
	v, err := t.next.Resolve(ctx, ref)
	endSecretSpan(span, err)
	return v, err
}

// WrapInjection gives the secrets the fetch accessor injects a span per
// resolution (pipeline.Backends.WrapInjection).
func (o *Observer) WrapInjection(inj *scopedsecrets.Injection) fetch.Secrets {
	return tracedInjection{next: inj, tracer: o.tracer}
}
