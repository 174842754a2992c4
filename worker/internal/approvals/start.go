package approvals

import (
	"context"
	"log/slog"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// Conn is what the room needs of the worker's connection (a *bus.Conn).
type Conn interface {
	Publisher
	Serve(subject, queue string, fn func(subject string, data []byte) []byte) (*bus.Subscription, error)
	ApprovalsConsumer(ctx context.Context) (*bus.PoolConsumer, error)
}

// Watcher is a bucket the room follows (a *bus.KV).
type Watcher interface {
	WatchKeys(ctx context.Context, patterns []string, fn func(bus.Entry)) (stop func(), err error)
}

// Deps are what Start wires together; every field is required.
type Deps struct {
	Names protocol.Names
	Conn  Conn
	// Approvals is the approvals bucket, Cancels the cancels bucket.
	Approvals interface {
		KV
		Watcher
	}
	Cancels  Watcher
	Policies Policies
	WorkerID string
	OpCtx    func() (context.Context, context.CancelFunc)
	Log      *slog.Logger
	// Observe registers the metrics: held reports the calls held now.
	Observe func(held func() int) (Metrics, func(), error)
}

// Queue is the queue group of the workers answering decision requests.
const Queue = "capstan_approvals"

// Start runs the room until stop is called: the answer to decision
// requests (in one queue group with every worker), the timers that end
// holds nobody decides (following the holds and the cancel requests), and
// the consumer of decisions. startCtx bounds the start; ctx is the worker's.
func Start(ctx, startCtx context.Context, d Deps) (stop func(), err error) {
	var undo []func()
	stop = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	store := Store{KV: d.Approvals}
	decider := &Decider{Names: d.Names, Store: store, Policies: d.Policies, OpCtx: d.OpCtx, Now: time.Now}
	sub, err := d.Conn.Serve(d.Names.ApprovalRequestsFilter(), Queue, decider.Handle)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = sub.Stop() })
	timers := &Timers{Store: store, OpCtx: d.OpCtx, Log: d.Log, Now: time.Now}
	for _, w := range []struct {
		bucket   Watcher
		patterns []string
		fn       func(bus.Entry)
	}{{d.Approvals, []string{"hold.>"}, timers.HoldEntry}, {d.Cancels, []string{">"}, timers.CancelEntry}} {
		stopWatch, err := w.bucket.WatchKeys(ctx, w.patterns, w.fn)
		if err != nil {
			return nil, err
		}
		undo = append(undo, stopWatch)
	}
	metrics, unobserve, err := d.Observe(timers.Held)
	if err != nil {
		return nil, err
	}
	undo = append(undo, unobserve)
	cons, err := d.Conn.ApprovalsConsumer(startCtx)
	if err != nil {
		return nil, err
	}
	decisions := &Decisions{Names: d.Names, Store: store, Bus: d.Conn, Consumer: cons, WorkerID: d.WorkerID,
		OpCtx: d.OpCtx, Log: d.Log, Metrics: metrics}
	// Their own context: a start that fails later returns while ctx lives.
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { defer func() { done <- struct{}{} }(); timers.Run(runCtx) }()
	go func() { defer func() { done <- struct{}{} }(); decisions.Run(runCtx) }()
	undo = append(undo, func() { cancel(); <-done; <-done })
	return stop, nil
}
