package worker

import (
	"context"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/embedded"
	"github.com/capstanhq/capstan/internal/ratelimit"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/worker/internal/approvals"
	"github.com/capstanhq/capstan/worker/internal/callexec"
	"github.com/capstanhq/capstan/worker/internal/cancelbook"
	"github.com/capstanhq/capstan/worker/internal/catalog"
	"github.com/capstanhq/capstan/worker/internal/lease"
	"github.com/capstanhq/capstan/worker/internal/observe"
	"github.com/capstanhq/capstan/worker/internal/policywatch"
	"github.com/capstanhq/capstan/worker/internal/sched"
)

// ResultRetryLimit is how long a worker retries publishing a computed result
// that fails for a reason retrying may cure (the server is unreachable, a
// stream has no leader): then the call is dead-lettered and answered with
// an abandonment result, or, when even that cannot be published, handed
// back for a later delivery (docs/reliability.md, "Publishing results").
const ResultRetryLimit = callexec.ResultRetryLimit

// ShutdownMargin is how long after the shutdown grace Run takes at most:
// calls handed back, leases released, the catalog left. Every bus
// operation still waiting then gives up, so a worker whose NATS server is
// gone exits within ShutdownGrace + ShutdownMargin.
const ShutdownMargin = callexec.ShutdownMargin

// cleanup is what Run undoes when it returns, last step first (as its
// defers would).
type cleanup []func()

func (c *cleanup) add(f func()) { *c = append(*c, f) }

func (c cleanup) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// Run connects (starting an embedded server when no NATS URL is set, and then
// connecting with the credentials it generated instead of NATSCreds), loads
// personalities, registers the tools, and serves calls until ctx is done; then
// it drains: stops pulling, waits up to ShutdownGrace for running calls,
// cancels and hands back the rest, and returns. A start-up problem is returned
// at once.
func (w *Worker) Run(ctx context.Context) error {
	var undo cleanup
	defer func() { undo.run() }() // not "defer undo.run()": that would copy the empty stack
	// Every bus operation gives up ShutdownMargin after the grace, which
	// starts when ctx ends: a worker whose NATS server is gone still exits.
	w.ops, w.stopOps = context.WithCancel(context.Background())
	undo.add(w.stopOps)
	stopShutdownClock := context.AfterFunc(ctx, func() { time.AfterFunc(w.cfg.ShutdownGrace+ShutdownMargin, w.stopOps) })
	undo.add(func() { stopShutdownClock() })
	w.prepare(ctx, &undo)
	// Hosted MCP servers start while the worker connects; they are stopped
	// last, after the drain, since the calls that drain need them.
	undo.add(w.mcp.Start(ctx))
	url, creds, err := w.embeddedServer(ctx, &undo)
	if err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	undo.add(cancel)
	conn, err := bus.Connect(startCtx, bus.Config{URL: url, Creds: creds, Prefix: w.cfg.Prefix, Name: "capstan-worker " + w.cfg.WorkerID, Replicas: w.cfg.StreamReplicas, NATSConn: w.cfg.NATSConn})
	if err != nil {
		return err
	}
	undo.add(conn.Close)
	w.conn = conn
	w.registerCreds(ctx, creds)
	if err := w.open(ctx, startCtx, &undo); err != nil {
		return err
	}
	sc, err := w.listen(ctx, startCtx, &undo)
	if err != nil {
		return err
	}
	w.mcp.Await(ctx)
	w.log.InfoContext(ctx, "worker ready", "worker_id", w.cfg.WorkerID, "pool", w.cfg.Pool, "tools", len(w.tools.All()), "concurrency", w.cfg.Concurrency)
	close(w.ready)
	w.serve(ctx, sc)
	return nil
}

// prepare readies the machine before the worker connects: the sandbox's
// status, what killed workers left behind, the vault login.
func (w *Worker) prepare(ctx context.Context, undo *cleanup) {
	sandbox := w.procCfg.Sandbox()
	sandbox.Log(ctx, w.log)
	// Children's temp dirs and cgroups that a killed worker left behind.
	if swept := process.Sweep(w.procCfg.TmpDir, w.log); swept.TempDirs+swept.Cgroups > 0 {
		w.log.InfoContext(ctx, "removed what a stopped worker's processes left behind", "temp_dirs", swept.TempDirs, "cgroups", swept.Cgroups)
	}
	// The per-call cgroups kept for reuse and the children's temp dir go
	// with the worker: a clean stop leaves nothing behind.
	undo.add(func() { process.Release(w.log) })
	// Shown in /readyz, never a reason to be unready: a degraded sandbox is
	// reported, process tools still run (docs/operations.md).
	w.SetReadyDetail("process_sandbox", sandbox)
	if w.vault != nil {
		// Log in and keep the token renewed for as long as the worker runs;
		// calls handed out before the first login log in themselves.
		vaultCtx, stopVault := context.WithCancel(context.WithoutCancel(ctx))
		vaultDone := make(chan struct{})
		go func() { defer close(vaultDone); w.vault.Run(vaultCtx) }()
		undo.add(func() { stopVault(); <-vaultDone })
	}
}

// embeddedServer starts the embedded server when the worker has no NATS
// server of its own, and returns the URL and credentials to connect with.
func (w *Worker) embeddedServer(ctx context.Context, undo *cleanup) (url, creds string, err error) {
	url, creds = w.cfg.NATSURL, w.cfg.NATSCreds
	if url != "" || w.cfg.NATSConn != nil {
		return url, creds, nil
	}
	// The embedded server accepts only the credentials it generated.
	srv, err := embedded.Start(embedded.Config{DataDir: w.cfg.DataDir, Port: w.cfg.EmbeddedPort})
	if err != nil {
		return "", "", err
	}
	undo.add(srv.Shutdown)
	url, creds = srv.ClientURL(), srv.CredsFile()
	w.embedded.Store(&EmbeddedServer{URL: url, CredsFile: creds})
	undo.add(func() { w.embedded.Store(nil) })
	w.log.InfoContext(ctx, "started embedded NATS server", "url", url, "data_dir", w.cfg.DataDir, "creds_file", creds)
	return url, creds, nil
}

// open opens the buckets, loads and watches the personalities and
// registers the worker and its tools.
func (w *Worker) open(ctx, startCtx context.Context, undo *cleanup) (err error) {
	if err := w.openBuckets(startCtx); err != nil {
		return err
	}
	w.checkBlobs(startCtx)
	w.catalog = &catalog.Registry{Tools: w.kv.tools, Workers: w.kv.workers, WorkerID: w.cfg.WorkerID, Pool: w.cfg.Pool,
		Concurrency: w.cfg.Concurrency, InFlight: func() int { return w.inflight.Count() }, Hosted: w.tools.All, Log: w.log}
	// From now on a hosted MCP server's tools go to the catalog as soon
	// as it lists them (Register below takes those listed before).
	w.mcp.Registered(w.catalog)
	undo.add(func() { w.mcp.Registered(nil) })
	w.limiter = ratelimit.New(w.kv.ratelimits, nil)
	w.inflight = cancelbook.New(bus.RecordTTL)
	w.slots = make(chan struct{}, w.cfg.Concurrency)
	w.execBase, w.cancelExec = context.WithCancelCause(context.WithoutCancel(ctx))
	undo.add(func() { w.cancelExec(cancelbook.ErrShutdown) })

	if err := w.personalityLoader().Load(startCtx); err != nil {
		return err
	}
	w.policies, err = policywatch.Start(ctx, w.kv.personalities, w.cfg.Home, w.preResolve)
	if err != nil {
		return err
	}
	undo.add(w.policies.Stop)
	if err := w.catalog.Register(startCtx); err != nil {
		return err
	}
	undo.add(func() {
		ctx, cancel := w.opCtx()
		defer cancel()
		w.catalog.Deregister(ctx)
	})
	return nil
}

// listen subscribes to cancel requests, binds the pool's consumers, builds
// the calls' executor services, and starts the registration heartbeat and
// the handling of abandoned calls. It returns the pool's scheduler.
func (w *Worker) listen(ctx, startCtx context.Context, undo *cleanup) (*sched.Scheduler, error) {
	requests := &cancelbook.Requests{Book: w.inflight, Names: w.names, Store: w.kv.cancels, OpCtx: w.opCtx, Log: w.log}
	cancelSub, err := w.conn.Subscribe(w.names.CancelFilter(), "", requests.Handle)
	if err != nil {
		return nil, err
	}
	undo.add(func() { _ = cancelSub.Stop() })
	// The cancel requests sent before this worker started (and, again,
	// every later one): starting a call then reads nothing from the bus.
	stopCancelWatch, err := w.kv.cancels.Watch(ctx, w.inflight.BookEntry)
	if err != nil {
		return nil, err
	}
	undo.add(stopCancelWatch)
	abandoned, err := w.conn.AbandonedConsumer(startCtx, w.cfg.Pool)
	if err != nil {
		return nil, err
	}
	// The pool's consumer of the versions before scheduling overlaps every
	// personality's: it goes, and the calls it held are delivered by
	// the personalities' consumers (scheduling.md).
	if retired, err := w.conn.RetirePoolConsumer(startCtx, w.cfg.Pool); err != nil {
		return nil, err
	} else if retired {
		w.log.InfoContext(ctx, "the pool's single consumer is replaced by one consumer per personality (scheduling)", "pool", w.cfg.Pool)
	}
	// The default personality's consumer now: a worker whose MaxDeliver
	// or AckWait differ from the pool's stops here, naming them; the other
	// personalities' consumers open as their calls come.
	if _, err := w.conn.PersonalityConsumer(startCtx, w.cfg.Pool, w.cfg.DefaultPersonality, w.cfg.MaxDeliver, w.cfg.AckWait,
		w.schedPolicy(w.cfg.DefaultPersonality).MaxConcurrency); err != nil {
		return nil, err
	}
	stopApprovals, err := approvals.Start(ctx, startCtx, approvals.Deps{Names: w.names, Conn: w.conn, Approvals: w.kv.approvals,
		Cancels: w.kv.cancels, Policies: w.policies, WorkerID: w.cfg.WorkerID, OpCtx: w.opCtx, Log: w.log,
		Observe: func(held func() int) (approvals.Metrics, func(), error) { return w.obs.Approvals(held) }})
	if err != nil {
		return nil, err
	}
	undo.add(stopApprovals)
	w.timing = bus.Timing{AckWait: w.cfg.AckWait}
	w.exec = callexec.New(w.execDeps())
	sc := w.scheduler()
	queue := observe.Queue{PerPersonality: w.cfg.MetricsPersonalityLabel, Lanes: func() []observe.LaneCount {
		lanes := sc.Lanes()
		out := make([]observe.LaneCount, len(lanes))
		for i, l := range lanes {
			out[i] = observe.LaneCount{Personality: l.Personality, Waiting: l.Waiting, Running: l.Running}
		}
		return out
	}}
	unobserve, err := w.obs.Gauges(sc, queue, w.conn, w.secrets, w.cfg.Concurrency)
	if err != nil {
		return nil, err
	}
	undo.add(unobserve)
	go w.catalog.Heartbeat(ctx)
	abandonDone := make(chan struct{})
	go func() { defer close(abandonDone); w.exec.HandleAbandoned(ctx, abandoned) }()
	undo.add(func() { <-abandonDone })
	return sc, nil
}

// execDeps is what every call's executor shares (callexec.Deps).
func (w *Worker) execDeps() callexec.Deps {
	leases := &lease.Leases{KV: w.kv.leases, WorkerID: w.cfg.WorkerID, Timing: w.timing, Log: w.log}
	c := &w.cfg
	d := callexec.Deps{
		Settings: callexec.Settings{WorkerID: c.WorkerID, DefaultPersonality: c.DefaultPersonality, CallTimeout: c.CallTimeout,
			ResultMaxBytes: c.ResultMaxBytes, StructuredMaxBytes: c.StructuredMaxBytes, SecretsBackend: c.SecretsBackend,
			Blobs:      callexec.BlobSettings{Off: c.Blobs.Off, Tools: c.Blobs.Tools, MinBytes: c.Blobs.MinBytes, MaxBytes: c.Blobs.MaxBytes},
			RetryLimit: w.retryLimit},
		Names: w.names, Bus: w.conn, Tools: &w.tools, MCP: w.mcp, Policies: w.policies, Disk: w.disk, Limiter: w.limiter,
		Book: w.inflight, Leases: leases, Timing: w.timing, Audits: &w.audits, Failures: w.kv.failures,
		Approvals: approvals.Store{KV: w.kv.approvals},
		Backends:  w.accessorBackends(), Secrets: w.secrets, NetworkRefused: w.procCfg.NetworkRefused,
		Obs: w.obs, Reducers: w.reducers, Creds: w.creds, Runners: w.runners, Log: w.log,
		ExecBase: w.execBase, Ops: w.ops, SendResult: w.sendResult, BlobsOn: w.blobsOn.Load,
		ReleaseSlot: func() { <-w.slots }, Finished: w.calls.Done,
	}
	// The leases' operations are bounded as every bus operation of a call
	// is, by the services built from d.
	leases.Bound = func(ctx context.Context) (context.Context, context.CancelFunc) { return w.exec.BoundCtx(ctx) }
	return d
}

// serve hands every fetched call to one of the long-lived handler
// goroutines, one per slot, until ctx ends; then drains. A goroutine
// started per call grows its stack from the start on every call, which
// cost a tenth of the worker's CPU at saturation (docs/benchmarks.md).
func (w *Worker) serve(ctx context.Context, sc *sched.Scheduler) {
	w.work = make(chan delivery)
	var handlers sync.WaitGroup
	for range w.cfg.Concurrency {
		handlers.Go(func() {
			for d := range w.work {
				w.exec.Handle(d.m)
				d.done()
			}
		})
	}
	sc.Run(ctx)
	w.drain()
	close(w.work)
	handlers.Wait()
	w.runners.Close()
}

// delivery is a fetched call and the scheduler's function to call once
// its handler is through with it.
type delivery struct {
	m    *bus.Msg
	done func()
}

// scheduler returns the pool's scheduler (scheduling.md): one consumer
// per personality, pulled for the free slots by priority and weight.
func (w *Worker) scheduler() *sched.Scheduler {
	return sched.New(sched.Config{
		Slots: w.slots,
		Deliver: func(m *bus.Msg, done func()) {
			w.calls.Add(1)
			// A handler is free or about to be: every fetched call holds
			// one of the slots, and there is a handler per slot.
			w.work <- delivery{m: m, done: done}
		},
		Bus:    schedBus{w: w},
		Policy: w.schedPolicy,
		Known:  w.policies.IDs,
		Log:    w.log,
	})
}

// schedBus is the bus as the scheduler asks it for the worker's pool.
type schedBus struct{ w *Worker }

func (b schedBus) Lane(ctx context.Context, personality string, maxInFlight int) (sched.Consumer, error) {
	ctx, cancel := context.WithTimeout(ctx, callexec.OpTimeout)
	defer cancel()
	return b.w.conn.PersonalityConsumer(ctx, b.w.cfg.Pool, personality, b.w.cfg.MaxDeliver, b.w.cfg.AckWait, maxInFlight)
}

func (b schedBus) Waiting(ctx context.Context) (map[string]uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, callexec.OpTimeout)
	defer cancel()
	return b.w.conn.WaitingByPersonality(ctx, b.w.cfg.Pool)
}

// schedPolicy is a personality's scheduling as the worker's view of the
// bucket holds it; the defaults for one it does not know or that is
// invalid (its calls are refused anyway).
func (w *Worker) schedPolicy(id string) sched.Policy {
	p, err := w.policies.Get(id)
	if err != nil {
		return sched.DefaultPolicy
	}
	sc := p.Scheduling.WithDefaults()
	return sched.Policy{Priority: sc.Priority, Weight: sc.Weight, MaxConcurrency: sc.MaxConcurrency}
}

// opCtx bounds one bus operation of the worker (callexec.OpTimeout, and
// never past the end of the shutdown margin).
func (w *Worker) opCtx() (context.Context, context.CancelFunc) {
	base := w.ops
	if base == nil {
		base = context.Background()
	}
	return context.WithTimeout(base, callexec.OpTimeout)
}

// checkBlobs turns blobs on when they are configured and the blobs bucket
// exists; without the bucket (a NATS user that may not create it) the
// worker runs without blobs, says so in its log and in /readyz's details.
func (w *Worker) checkBlobs(ctx context.Context) {
	if w.cfg.Blobs.Off {
		w.SetReadyDetail("blobs", "off (CAPSTAN_BLOBS=off)")
		return
	}
	if err := w.conn.BlobsReady(ctx); err != nil {
		w.log.WarnContext(ctx, "large outputs will not be stored by reference: the blobs bucket is not available", "error", err)
		w.SetReadyDetail("blobs", "off: "+err.Error())
		return
	}
	w.blobsOn.Store(true)
	w.SetReadyDetail("blobs", "on: bucket "+w.names.BlobsBucket())
}

func (w *Worker) openBuckets(ctx context.Context) error {
	for _, b := range []struct {
		dst **bus.KV
		id  bus.Bucket
	}{
		{&w.kv.personalities, bus.Personalities}, {&w.kv.tools, bus.Tools}, {&w.kv.cancels, bus.Cancels},
		{&w.kv.leases, bus.Leases}, {&w.kv.workers, bus.Workers},
		{&w.kv.ratelimits, bus.RateLimits}, {&w.kv.failures, bus.Failures}, {&w.kv.storage, bus.Storage}, {&w.kv.reads, bus.ReadRecords},
		{&w.kv.approvals, bus.Approvals},
	} {
		kv, err := w.conn.KV(ctx, b.id)
		if err != nil {
			return err
		}
		*b.dst = kv
	}
	return nil
}

// drain waits up to ShutdownGrace for running calls, then cancels the rest
// (they are handed back for redelivery) and waits for them to finish.
func (w *Worker) drain() {
	done := make(chan struct{})
	go func() { w.calls.Wait(); close(done) }()
	n := w.inflight.Count()
	if n > 0 {
		w.log.Info("draining", "in_flight", n, "grace", w.cfg.ShutdownGrace.String())
	}
	select {
	case <-done:
		return
	case <-time.After(w.cfg.ShutdownGrace):
	}
	w.log.Warn("shutdown grace over; handing back in-flight calls", "in_flight", w.inflight.Count())
	w.cancelExec(cancelbook.ErrShutdown)
	<-done
}

// registerCreds builds the redactor of the worker's own NATS credentials
// file (none: nothing to redact).
func (w *Worker) registerCreds(ctx context.Context, file string) {
	if file == "" {
		return
	}
	values, err := bus.CredsSecrets(file)
	if err != nil {
		w.log.WarnContext(ctx, "NATS credentials not registered for redaction", "error", err)
		return
	}
	w.creds = shape.NewRedactor(values)
}
