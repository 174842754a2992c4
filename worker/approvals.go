package worker

import (
	"context"
	"time"

	"github.com/capstanhq/capstan/worker/internal/approvals"
)

// listenApprovals starts the approvals room (docs/approvals.md): the
// answer to decision requests (in one queue group with every worker), the
// timers that end holds nobody decides (following the holds and the
// cancel requests), and the consumer of decisions that re-publishes each
// decided call.
func (w *Worker) listenApprovals(ctx, startCtx context.Context, undo *cleanup) error {
	store := approvals.Store{KV: w.kv.approvals}
	decider := &approvals.Decider{Names: w.names, Store: store, Policies: w.policies, OpCtx: w.opCtx, Now: time.Now}
	sub, err := w.conn.Serve(w.names.ApprovalRequestsFilter(), "capstan_approvals", decider.Handle)
	if err != nil {
		return err
	}
	undo.add(func() { _ = sub.Stop() })
	timers := &approvals.Timers{Store: store, OpCtx: w.opCtx, Log: w.log, Now: time.Now}
	stopHolds, err := w.kv.approvals.WatchKeys(ctx, []string{"hold.>"}, timers.HoldEntry)
	if err != nil {
		return err
	}
	undo.add(stopHolds)
	stopCancels, err := w.kv.cancels.Watch(ctx, timers.CancelEntry)
	if err != nil {
		return err
	}
	undo.add(stopCancels)
	metrics, unobserve, err := w.obs.Approvals(timers.Held)
	if err != nil {
		return err
	}
	undo.add(unobserve)
	cons, err := w.conn.ApprovalsConsumer(startCtx)
	if err != nil {
		return err
	}
	decisions := &approvals.Decisions{Names: w.names, Store: store, Bus: w.conn, Consumer: cons, WorkerID: w.cfg.WorkerID,
		OpCtx: w.opCtx, Log: w.log, Metrics: metrics}
	// Their own context: a start that fails after this returns while ctx
	// lives, and must not wait for them.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { defer func() { done <- struct{}{} }(); timers.Run(runCtx) }()
	go func() { defer func() { done <- struct{}{} }(); decisions.Run(runCtx) }()
	undo.add(func() { stop(); <-done; <-done })
	return nil
}
