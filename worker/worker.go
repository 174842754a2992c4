package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/embedded"
	"github.com/capstanhq/capstan/internal/mcphost"
	"github.com/capstanhq/capstan/internal/pipeline"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/ratelimit"
	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker/internal/auditlog"
	"github.com/capstanhq/capstan/worker/internal/cancelbook"
	"github.com/capstanhq/capstan/worker/internal/catalog"
	"github.com/capstanhq/capstan/worker/internal/health"
	"github.com/capstanhq/capstan/worker/internal/lease"
	"github.com/capstanhq/capstan/worker/internal/mcptools"
	"github.com/capstanhq/capstan/worker/internal/observe"
	"github.com/capstanhq/capstan/worker/internal/policywatch"
	"github.com/capstanhq/capstan/worker/internal/toolset"
)

// Worker runs tool calls. Create it with New and start it with Run; a Worker
// runs once.
type Worker struct {
	cfg Config
	// tools are the hosted tools: those given to New, and those of the
	// MCP servers (mcp: CAPSTAN_MCP_SERVERS_DIR, nil without).
	tools    toolset.Set
	mcp      *mcptools.Servers
	catalog  *catalog.Registry
	reducers *shape.Reducers
	log      *slog.Logger
	ready    chan struct{}
	names    protocol.Names
	obs      *observe.Observer
	health   *health.Registry

	// Set by Run.
	conn     *bus.Conn
	kv       buckets
	policies *policywatch.Watch
	limiter  *ratelimit.Limiter
	inflight *cancelbook.Book
	// audits stores the calls' audit records in batches.
	audits auditlog.Log
	slots  chan struct{}
	// work hands fetched calls to the handler goroutines, one per slot.
	work   chan *bus.Msg
	timing bus.Timing
	leases *lease.Leases
	calls  sync.WaitGroup
	// execBase is the parent of every call's context; it is cancelled with
	// cancelbook.ErrShutdown when the shutdown grace ends.
	execBase   context.Context
	cancelExec context.CancelCauseFunc
	// runners runs the tools (execute).
	runners *runners
	// ops is the parent of every bus operation (opsBase); stopOps ends it
	// ShutdownMargin after the grace.
	ops     context.Context
	stopOps context.CancelFunc
	// blobsOn is true once the blobs bucket is known to exist.
	blobsOn atomic.Bool
	// retryLimit is ResultRetryLimit (tests shorten it).
	retryLimit time.Duration
	// sendResult publishes a delivery's result: publishResult (a test
	// replaces it to hold the publish).
	sendResult func(ctx context.Context, personality, callID string, res *protocol.Result, callHeader bus.Header) (int, error)
	// embedded is the embedded server while Run has one running.
	embedded atomic.Pointer[EmbeddedServer]

	// Shared by the scoped accessors (built by New).
	secrets  secrets.Backend
	vault    *secrets.Vault // also in secrets, behind the cache; nil unless configured
	resolver *process.Resolver
	fsCfg    scopedfs.Config
	procCfg  process.Config
}

type buckets struct {
	personalities, tools, cancels, leases, workers, ratelimits, failures, storage, reads *bus.KV
}

// New checks cfg and the tools and returns a worker ready to Run. Tools not
// named in cfg.Tools (when set) are not hosted; a name in cfg.Tools that no
// tool has is an error.
func New(cfg Config, tools ...tool.Tool) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	names, err := protocol.NewNames(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	w := &Worker{
		runners:  newRunners(),
		cfg:      cfg,
		reducers: shape.NewReducers(),
		log:      slog.New(telemetry.TraceHandler(cfg.Logger.Handler())),
		ready:    make(chan struct{}),
		names:    names,

		retryLimit: ResultRetryLimit,
	}
	w.audits.Publish, w.audits.Limit = w.publishAudit, w.auditLimit
	w.sendResult = w.publishResult
	w.obs, err = observe.New(observe.Config{TracerProvider: cfg.TracerProvider, MeterProvider: cfg.MeterProvider,
		Names: names, Pool: cfg.Pool, WorkerID: cfg.WorkerID, Hosted: func(name string) bool { _, ok := w.lookup(name); return ok }})
	if err != nil {
		return nil, err
	}
	w.health = health.New()
	if err := w.host(tools); err != nil {
		return nil, err
	}
	if err := w.backends(); err != nil {
		return nil, err
	}
	if w.mcp, err = mcptools.Load(w.mcpConfig()); err != nil {
		return nil, err
	}
	if len(w.tools.Order()) == 0 && !w.mcp.Hosts() {
		return nil, errors.New("worker: no tools to host")
	}
	for name, fn := range builtinReducers {
		if _, ok := w.tools.Given(name); ok {
			if _, err := w.reducers.Register(name, fn); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// builtinReducers are registered for the built-in tools a worker hosts.
var builtinReducers = pipeline.BuiltinReducers

// RegisterReducer registers fn as the reducer of toolName (at most one per
// name). The returned function removes this registration; it is idempotent
// and never removes a later registration of the same name.
func (w *Worker) RegisterReducer(toolName string, fn tool.Reducer) (unregister func(), err error) {
	return w.reducers.Register(toolName, fn)
}

// Ready is closed once the worker consumes calls.
func (w *Worker) Ready() <-chan struct{} { return w.ready }

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// Run connects (starting an embedded server when no NATS URL is set, and then
// connecting with the credentials it generated instead of NATSCreds), loads
// personalities, registers the tools, and serves calls until ctx is done; then
// it drains: stops pulling, waits up to ShutdownGrace for running calls,
// cancels and hands back the rest, and returns. A start-up problem is returned
// at once.
func (w *Worker) Run(ctx context.Context) error {
	// Every bus operation gives up ShutdownMargin after the grace, which
	// starts when ctx ends: a worker whose NATS server is gone still exits.
	w.ops, w.stopOps = context.WithCancel(context.Background())
	defer w.stopOps()
	stopShutdownClock := context.AfterFunc(ctx, func() { time.AfterFunc(w.cfg.ShutdownGrace+ShutdownMargin, w.stopOps) })
	defer stopShutdownClock()
	sandbox := w.procCfg.Sandbox()
	sandbox.Log(ctx, w.log)
	// Children's temp dirs and cgroups that a killed worker left behind.
	if swept := process.Sweep(w.procCfg.TmpDir, w.log); swept.TempDirs+swept.Cgroups > 0 {
		w.log.InfoContext(ctx, "removed what a stopped worker's processes left behind", "temp_dirs", swept.TempDirs, "cgroups", swept.Cgroups)
	}
	// The per-call cgroups kept for reuse go with the worker.
	defer process.ReleaseIdleCgroups()
	// Shown in /readyz, never a reason to be unready: a degraded sandbox is
	// reported, process tools still run (docs/operations.md).
	w.SetReadyDetail("process_sandbox", sandbox)
	if w.vault != nil {
		// Log in and keep the token renewed for as long as the worker runs;
		// calls handed out before the first login log in themselves.
		vaultCtx, stopVault := context.WithCancel(context.WithoutCancel(ctx))
		vaultDone := make(chan struct{})
		go func() { defer close(vaultDone); w.vault.Run(vaultCtx) }()
		defer func() { stopVault(); <-vaultDone }()
	}
	// Hosted MCP servers start while the worker connects; they are stopped
	// last, after the drain, since the calls that drain need them.
	stopMCP := w.mcp.Start(ctx)
	defer stopMCP()
	url, creds := w.cfg.NATSURL, w.cfg.NATSCreds
	if url == "" && w.cfg.NATSConn == nil {
		// The embedded server accepts only the credentials it generated.
		srv, err := embedded.Start(embedded.Config{DataDir: w.cfg.DataDir, Port: w.cfg.EmbeddedPort})
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		url, creds = srv.ClientURL(), srv.CredsFile()
		w.embedded.Store(&EmbeddedServer{URL: url, CredsFile: creds})
		defer w.embedded.Store(nil)
		w.log.InfoContext(ctx, "started embedded NATS server", "url", url, "data_dir", w.cfg.DataDir, "creds_file", creds)
	}
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := bus.Connect(startCtx, bus.Config{URL: url, Creds: creds, Prefix: w.cfg.Prefix, Name: "capstan-worker " + w.cfg.WorkerID, Replicas: w.cfg.StreamReplicas, NATSConn: w.cfg.NATSConn})
	if err != nil {
		return err
	}
	defer conn.Close()
	w.conn = conn
	if err := w.openBuckets(startCtx); err != nil {
		return err
	}
	w.checkBlobs(startCtx)
	w.catalog = &catalog.Registry{Tools: w.kv.tools, Workers: w.kv.workers, WorkerID: w.cfg.WorkerID, Pool: w.cfg.Pool,
		Concurrency: w.cfg.Concurrency, InFlight: func() int { return w.inflight.Count() }, Hosted: w.tools.All, Log: w.log}
	// From now on a hosted MCP server's tools go to the catalog as soon
	// as it lists them (Register below takes those listed before).
	w.mcp.Registered(w.catalog)
	defer w.mcp.Registered(nil)
	w.limiter = ratelimit.New(w.kv.ratelimits, nil)
	w.inflight = cancelbook.New(bus.RecordTTL)
	w.slots = make(chan struct{}, w.cfg.Concurrency)
	w.execBase, w.cancelExec = context.WithCancelCause(context.WithoutCancel(ctx))
	defer w.cancelExec(cancelbook.ErrShutdown)

	if err := w.personalityLoader().Load(startCtx); err != nil {
		return err
	}
	w.policies, err = policywatch.Start(ctx, w.kv.personalities, w.cfg.Home, w.preResolve)
	if err != nil {
		return err
	}
	defer w.policies.Stop()
	if err := w.catalog.Register(startCtx); err != nil {
		return err
	}
	defer func() {
		ctx, cancel := w.opCtx()
		defer cancel()
		w.catalog.Deregister(ctx)
	}()
	requests := &cancelbook.Requests{Book: w.inflight, Names: w.names, Store: w.kv.cancels, OpCtx: w.opCtx, Log: w.log}
	cancelSub, err := conn.Subscribe(w.names.CancelFilter(), "", requests.Handle)
	if err != nil {
		return err
	}
	defer func() { _ = cancelSub.Stop() }()
	// The cancel requests sent before this worker started (and, again,
	// every later one): starting a call then reads nothing from the bus.
	stopCancelWatch, err := w.kv.cancels.Watch(ctx, w.inflight.BookEntry)
	if err != nil {
		return err
	}
	defer stopCancelWatch()
	abandoned, err := conn.AbandonedConsumer(startCtx, w.cfg.Pool)
	if err != nil {
		return err
	}
	cons, err := conn.PoolConsumer(startCtx, w.cfg.Pool, w.cfg.MaxDeliver, w.cfg.AckWait)
	if err != nil {
		return err
	}
	w.timing = cons.Timing()
	w.leases = &lease.Leases{KV: w.kv.leases, WorkerID: w.cfg.WorkerID, Timing: w.timing, Bound: w.boundCtx, Log: w.log}
	unobserve, err := w.obs.Gauges(cons, conn, w.secrets, w.cfg.Concurrency)
	if err != nil {
		return err
	}
	defer unobserve()
	go w.catalog.Heartbeat(ctx)
	abandonDone := make(chan struct{})
	go func() { defer close(abandonDone); w.handleAbandoned(ctx, abandoned) }()
	defer func() { <-abandonDone }()

	w.mcp.Await(ctx)
	w.log.InfoContext(ctx, "worker ready", "worker_id", w.cfg.WorkerID, "pool", w.cfg.Pool, "tools", len(w.tools.All()), "concurrency", w.cfg.Concurrency)
	close(w.ready)
	// One long-lived handler goroutine per slot: a goroutine started per
	// call grows its stack from the start on every call, which cost a
	// tenth of the worker's CPU at saturation (docs/benchmarks.md).
	w.work = make(chan *bus.Msg)
	var handlers sync.WaitGroup
	for range w.cfg.Concurrency {
		handlers.Go(func() {
			for m := range w.work {
				w.handle(m)
			}
		})
	}
	w.pull(ctx, cons)
	w.drain()
	close(w.work)
	handlers.Wait()
	w.runners.close()
	return nil
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
	} {
		kv, err := w.conn.KV(ctx, b.id)
		if err != nil {
			return err
		}
		*b.dst = kv
	}
	return nil
}

// pull fetches only as many calls as there are free slots, until ctx is done.
func (w *Worker) pull(ctx context.Context, cons *bus.PoolConsumer) {
	backoff := 100 * time.Millisecond
	for {
		// Wait for one free slot, then take every other free one.
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
	more:
		for n < cap(w.slots) {
			select {
			case w.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		got, err := cons.Fetch(ctx, n, time.Second, func(m *bus.Msg) {
			w.calls.Add(1)
			// A handler is free or about to be: every fetched call holds
			// one of the slots, and there is a handler per slot.
			w.work <- m
		})
		for range n - got {
			<-w.slots
		}
		if err != nil && ctx.Err() == nil {
			w.log.WarnContext(ctx, "fetch failed", "error", err)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
	}
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

// personalityLoader loads PersonalitiesDir into the personalities bucket,
// validated against the tools given to New and the hosted MCP servers.
func (w *Worker) personalityLoader() *policywatch.Loader {
	tools := make([]*tool.Tool, len(w.tools.Order()))
	for i, h := range w.tools.Order() {
		tools[i] = &h.Tool
	}
	return &policywatch.Loader{Dir: w.cfg.PersonalitiesDir, Home: w.cfg.Home, Default: w.cfg.DefaultPersonality,
		Tools: tools, ValidateMCP: w.mcp.Validate, KV: w.kv.personalities, Names: w.names, Log: w.log}
}

// host hosts the tools given to New that cfg.Tools names (every one when
// it names none).
func (w *Worker) host(tools []tool.Tool) error {
	cfg := &w.cfg
	for _, t := range tools {
		if len(cfg.Tools) > 0 && !slices.Contains(cfg.Tools, t.Name) {
			continue
		}
		if err := t.Validate(); err != nil {
			return err
		}
		if _, dup := w.tools.Given(t.Name); dup {
			return fmt.Errorf("tool %s is given twice", t.Name)
		}
		h, err := toolset.Host(t, cfg.Pool)
		if err != nil {
			return err
		}
		_ = w.tools.Add(h)
	}
	for _, name := range cfg.Tools {
		if _, ok := w.tools.Given(name); !ok {
			return fieldErrorf("Tools", "names %q, which is not a known tool", name)
		}
	}
	for _, name := range cfg.Blobs.Tools {
		if _, ok := w.tools.Given(name); !ok {
			return fieldErrorf("Blobs.Tools", "names %q, which this worker does not host", name)
		}
	}
	return nil
}

// mcpConfig is what the hosted MCP servers share with the worker.
func (w *Worker) mcpConfig() mcptools.Config {
	return mcptools.Config{Dir: w.cfg.MCPServersDir, CallTimeout: w.cfg.CallTimeout, Pool: w.cfg.Pool, Set: &w.tools,
		Secrets: w.secrets, Process: w.procCfg, Resolver: w.resolver, ResolveNames: w.resolveNames,
		TracerProvider: w.cfg.TracerProvider, WrapTransport: w.obs.HTTPTransport, AllowPrivateURLs: w.cfg.mcpPrivateURLs,
		SetStatus: func(st map[string]mcphost.Status) { w.SetReadyDetail("mcp_servers", st) },
		OpCtx:     w.opCtx, Log: w.log}
}

// lookup returns the hosted tool named name.
func (w *Worker) lookup(name string) (*toolset.Hosted, bool) { return w.tools.Lookup(name) }
