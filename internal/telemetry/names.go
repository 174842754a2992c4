package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of the OTel GenAI conventions (execute_tool spans), which
// the Go semconv packages do not carry yet.
// ScopeName is the instrumentation scope of every span and metric Capstan makes.
const ScopeName = "github.com/capstanhq/capstan"

const (
	GenAIOperationName = attribute.Key("gen_ai.operation.name")
	GenAIToolName      = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID    = attribute.Key("gen_ai.tool.call.id")
	GenAIToolType      = attribute.Key("gen_ai.tool.type")
)

// OpExecuteTool is gen_ai.operation.name of a tool execution.
const OpExecuteTool = "execute_tool"

// Capstan's own attribute keys. None ever carries an argument value, a
// secret value or a result.
const (
	// AttrBatchID is the call's batch_id.
	AttrBatchID = attribute.Key("capstan.batch.id")
	// AttrPool is the pool a call was published to.
	AttrPool = attribute.Key("capstan.pool")
	// AttrQueuePersonality is the personality label of the scheduler's
	// gauges, set only with CAPSTAN_METRICS_PERSONALITY_LABEL=true
	// (scheduling.md: one series per personality).
	AttrQueuePersonality = attribute.Key("personality")
	// AttrWorkerID is the worker that handled a call.
	AttrWorkerID = attribute.Key("capstan.worker.id")
	// AttrPersonality is the personality a call ran under.
	AttrPersonality = attribute.Key("capstan.personality.id")
	// AttrDeliveries is the delivery count of the message being processed.
	AttrDeliveries = attribute.Key("capstan.deliveries")
	// AttrDecision is the pipeline's decision: "allowed" or the gate that refused.
	AttrDecision = attribute.Key("capstan.decision")
	// AttrOutcome is "ok", the result's error code, or "retry"/"handback"
	// for a call that was not answered this time.
	AttrOutcome = attribute.Key("capstan.outcome")
	// AttrGate is the gate that denied (a protocol.Decision* value), or
	// "accessor" for a denial by a scoped accessor while the tool ran.
	AttrGate = attribute.Key("capstan.gate")
	// AttrDenialCode is the code of a denial: the result code of a gate
	// refusal (not_available, input_invalid) or the accessor's code
	// (HOST_NOT_ALLOWED, PATH_NOT_REACHABLE, ...).
	AttrDenialCode = attribute.Key("capstan.denial.code")
	// AttrTruncated reports a result cut to its budget.
	AttrTruncated = attribute.Key("capstan.result.truncated")
	// AttrDryRun marks a dry run.
	AttrDryRun = attribute.Key("capstan.dry_run")
	// AttrDuplicate is true on a producer span whose call_id JetStream had
	// already stored (the first call stands).
	AttrDuplicate = attribute.Key("capstan.duplicate")
	// AttrRedelivery is true on a delivery after the first.
	AttrRedelivery = attribute.Key("capstan.redelivery")
	// AttrPublishKind is what a failed publish carried: result, progress,
	// audit, dead_letter or blob.
	AttrPublishKind = attribute.Key("capstan.publish.kind")
	// AttrPublishReason is why a publish failed: too_large,
	// permission_denied, no_stream (the stream does not exist),
	// no_response (no stream answered, briefly), timeout or unavailable.
	AttrPublishReason = attribute.Key("capstan.publish.reason")
)

// EventDenial is the name of the span event recorded for every denial.
const EventDenial = "capstan.denial"

// OtherTool is the tool name recorded for a tool the worker does not host,
// so callers cannot grow the metrics' cardinality with made-up names.
const OtherTool = "_OTHER"

// Metric names (OTel); docs/operations.md lists their Prometheus names.
const (
	MetricCalls            = "capstan.calls"
	MetricCallDuration     = "capstan.call.duration"
	MetricCallsInFlight    = "capstan.calls.in_flight"
	MetricCallsPending     = "capstan.calls.pending"
	MetricCallsWaiting     = "capstan.calls.waiting"
	MetricCallsRunning     = "capstan.calls.running"
	MetricSlotsFree        = "capstan.slots.free"
	MetricDeliveries       = "capstan.deliveries"
	MetricDenials          = "capstan.denials"
	MetricDLQSize          = "capstan.dlq.size"
	MetricSecretCacheHits  = "capstan.secret.cache.hits"
	MetricSecretCacheMiss  = "capstan.secret.cache.misses"
	MetricRateLimitRefusal = "capstan.rate_limit.refusals"
	MetricSpansDropped     = "capstan.spans.dropped"
	MetricPublishFailures  = "capstan.publish.failures"
	MetricBlobs            = "capstan.blobs"
	MetricBlobBytes        = "capstan.blob.bytes"
	// MetricApprovalsHeld and MetricApprovalDecision are docs/approvals.md's:
	// the calls held for approval, and how long a held call waited for its
	// decision, by decision.
	MetricApprovalsHeld    = "capstan.approvals.held"
	MetricApprovalDecision = "capstan.approval.decision.duration"
)

// DurationBuckets are the bucket bounds, in seconds, of call duration
// histograms: from 5 ms to the longest call timeout one would configure.
var DurationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Tracer returns Capstan's tracer of tp.
func Tracer(tp trace.TracerProvider) trace.Tracer { return tp.Tracer(ScopeName) }

// Meter returns Capstan's meter of mp.
func Meter(mp metric.MeterProvider) metric.Meter { return mp.Meter(ScopeName) }
