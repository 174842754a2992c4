package observe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ApprovalMetrics are the metrics of held calls (docs/approvals.md): how
// many are held, and how long each waited for its decision.
type ApprovalMetrics struct {
	latency metric.Float64Histogram
}

// Decided records the decision of a held call and how long it was held.
func (a *ApprovalMetrics) Decided(ctx context.Context, decision string, held time.Duration) {
	a.latency.Record(ctx, held.Seconds(), metric.WithAttributes(attribute.String("decision", decision)))
}

// Approvals registers the approval metrics: held reports the calls held
// now. The returned function unregisters the gauge.
func (o *Observer) Approvals(held func() int) (*ApprovalMetrics, func(), error) {
	m := telemetry.Meter(o.mp)
	gauge, err1 := m.Int64ObservableGauge(telemetry.MetricApprovalsHeld, metric.WithUnit("{call}"),
		metric.WithDescription("Calls held for approval (pending a decision)"))
	latency, err2 := m.Float64Histogram(telemetry.MetricApprovalDecision, metric.WithUnit("s"),
		metric.WithDescription("Time from a call's hold to its decision, by decision (approved, denied, expired, cancelled, deadline)"),
		metric.WithExplicitBucketBoundaries(1, 10, 30, 60, 300, 900, 1800, 3600, 4*3600, 24*3600, 168*3600))
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, fmt.Errorf("worker: approval metrics: %w", err)
	}
	reg, err := m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		obs.ObserveInt64(gauge, int64(held()))
		return nil
	}, gauge)
	if err != nil {
		return nil, nil, fmt.Errorf("worker: approval metrics: %w", err)
	}
	return &ApprovalMetrics{latency: latency}, func() { _ = reg.Unregister() }, nil
}
