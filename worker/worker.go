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
	"github.com/capstanhq/capstan/worker/internal/callexec"
	"github.com/capstanhq/capstan/worker/internal/cancelbook"
	"github.com/capstanhq/capstan/worker/internal/catalog"
	"github.com/capstanhq/capstan/worker/internal/diskguard"
	"github.com/capstanhq/capstan/worker/internal/health"
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
	// disk holds back calls that need disk while the data directory's
	// file system is short of space.
	disk     *diskguard.Guard
	limiter  *ratelimit.Limiter
	inflight *cancelbook.Book
	// audits stores the calls' audit records in batches.
	audits auditlog.Log
	slots  chan struct{}
	// work hands fetched calls to the handler goroutines, one per slot.
	work   chan delivery
	timing bus.Timing
	calls  sync.WaitGroup
	// execBase is the parent of every call's context; it is cancelled with
	// cancelbook.ErrShutdown when the shutdown grace ends.
	execBase   context.Context
	cancelExec context.CancelCauseFunc
	// runners runs the tools (callexec.Runners), from call to call.
	runners *callexec.Runners
	// exec is what every call's executor shares (Run builds it).
	exec *callexec.Services
	// ops is the parent of every bus operation (opsBase); stopOps ends it
	// ShutdownMargin after the grace.
	ops     context.Context
	stopOps context.CancelFunc
	// blobsOn is true once the blobs bucket is known to exist.
	blobsOn atomic.Bool
	// retryLimit is ResultRetryLimit (tests shorten it).
	retryLimit time.Duration
	// sendResult, when set, publishes a delivery's result instead of
	// callexec.Services.PublishResult (a test holds the publish).
	sendResult callexec.SendResult
	// embedded is the embedded server while Run has one running.
	embedded atomic.Pointer[EmbeddedServer]
	// creds redacts the worker's own NATS credentials (callexec.Deps.Creds);
	// set by Run before any call.
	creds *shape.Redactor

	// Shared by the scoped accessors (built by New).
	secrets  secrets.Backend
	vault    *secrets.Vault // also in secrets, behind the cache; nil unless configured
	resolver *process.Resolver
	fsCfg    scopedfs.Config
	procCfg  process.Config
}

type buckets struct {
	personalities, tools, cancels, leases, workers, ratelimits, failures, storage, reads, approvals *bus.KV
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
		runners:  callexec.NewRunners(),
		cfg:      cfg,
		reducers: shape.NewReducers(),
		log:      slog.New(telemetry.TraceHandler(cfg.Logger.Handler())),
		ready:    make(chan struct{}),
		names:    names,

		retryLimit: ResultRetryLimit,
	}
	// The audit log publishes through the executor's services, which Run
	// builds before the first record is written.
	w.audits.Publish = func(ctx context.Context, subject string, body []byte, n int) error {
		return w.exec.PublishAudit(ctx, subject, body, n)
	}
	w.audits.Limit = func() int { return w.exec.AuditLimit() }
	w.obs, err = observe.New(observe.Config{TracerProvider: cfg.TracerProvider, MeterProvider: cfg.MeterProvider,
		Names: names, Pool: cfg.Pool, WorkerID: cfg.WorkerID, Hosted: func(name string) bool { _, ok := w.tools.Lookup(name); return ok }})
	if err != nil {
		return nil, err
	}
	w.health = health.New()
	w.disk = diskguard.New(w.cfg.DataDir, w.cfg.MinFreeDisk)
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
