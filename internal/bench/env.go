package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/embedded"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry/otelsetup"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/worker"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

const (
	// personalityID is the personality every benchmark call names.
	personalityID = "bench"
	// capstanPool and rawPool keep the two systems' calls apart in the one
	// calls stream (a work queue takes one consumer per subject).
	capstanPool = protocol.DefaultPool
	rawPool     = "raw"
	// drainTimeout bounds the wait for the results of calls published
	// before a measurement ended.
	drainTimeout = 30 * time.Second
)

// personality is the policy of the benchmark's calls: echo only, no
// network, files, secrets or processes, the default result budget.
const personality = `id: bench
toolset: [echo]
secrets: {allow: []}
process: {allow: []}
budget: {result_chars: 80000}
`

// env is the server and the load generator's connection.
type env struct {
	dir   string // the embedded server's store; "" for a server elsewhere
	url   string
	creds string           // the server's credentials file
	srv   *embedded.Server // nil when the server is not this process's
	conn  *bus.Conn
	names protocol.Names
}

// newEnv starts the embedded server storing in dir, or uses the one at url
// with the credentials file creds.
func newEnv(ctx context.Context, dir, url, creds string) (*env, error) {
	e := &env{url: url, creds: creds}
	if url == "" {
		e.dir = dir
		srv, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1})
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		e.srv, e.url, e.creds = srv, srv.ClientURL(), srv.CredsFile()
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := bus.Connect(cctx, bus.Config{URL: e.url, Creds: e.creds, Name: "capstan-bench load"})
	if err != nil {
		if e.srv != nil {
			e.srv.Shutdown()
		}
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.conn, e.names = conn, conn.Names()
	kv, err := conn.KV(cctx, bus.Personalities)
	if err == nil {
		_, err = kv.Put(cctx, personalityID, []byte(personality))
	}
	if err != nil {
		e.close()
		return nil, fmt.Errorf("bench: store personality: %w", err)
	}
	return e, nil
}

func (e *env) close() {
	e.conn.Close()
	if e.srv != nil {
		e.srv.Shutdown()
	}
}

// system is a running system under test.
type system struct {
	pool  string
	stop  func() error
	spans func() (exported, dropped uint64)
}

// start starts the system of s: the raw baseline, or a worker hosting echo
// that logs to a discarding writer.
func (e *env) start(ctx context.Context, s Scenario) (*system, error) {
	return e.startLogging(ctx, s, slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// startLogging is start with the worker's log handler.
func (e *env) startLogging(ctx context.Context, s Scenario, logs slog.Handler) (*system, error) {
	if s.System == Raw {
		b, err := bus.StartBaseline(ctx, bus.BaselineConfig{URL: e.url, Creds: e.creds, Pool: rawPool, Concurrency: s.Concurrency})
		if err != nil {
			return nil, err
		}
		return &system{pool: rawPool, stop: func() error {
			b.Stop()
			if n, err := b.Failures(); n > 0 {
				return fmt.Errorf("raw baseline failed %d calls, the last: %w", n, err)
			}
			return nil
		}}, nil
	}
	var tp trace.TracerProvider = noop.NewTracerProvider()
	var exp *discardExporter
	var dropped atomic.Uint64
	var sdk *sdktrace.TracerProvider
	if s.Tracing {
		// As the worker binary sets it up (internal/telemetry): a never
		// blocking queue in front of a batch processor; here the exporter
		// counts and discards.
		exp = &discardExporter{}
		q := otelsetup.NewDropQueue(sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBlocking()), 0, func() { dropped.Add(1) })
		sdk = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(q))
		tp = sdk
	}
	// Metrics as a worker binary has them (the Prometheus reader is a
	// manual reader too); a production worker logs one JSON line per call.
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	w, err := worker.New(worker.Config{
		NATSURL:        e.url,
		NATSCreds:      e.creds,
		Pool:           capstanPool,
		WorkerID:       "bench-worker",
		Concurrency:    s.Concurrency,
		ShutdownGrace:  5 * time.Second,
		Logger:         slog.New(logs),
		TracerProvider: tp,
		MeterProvider:  mp,
	}, echo.Tool())
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	errc := make(chan error, 1)
	go func() { errc <- w.Run(wctx) }()
	select {
	case <-w.Ready():
	case err := <-errc:
		cancel()
		return nil, fmt.Errorf("worker stopped before it was ready: %w", err)
	case <-time.After(30 * time.Second):
		cancel()
		return nil, errors.New("worker not ready within 30s")
	}
	sys := &system{pool: capstanPool}
	sys.stop = func() error {
		cancel()
		err := <-errc
		if sdk != nil {
			sctx, c := context.WithTimeout(context.Background(), 10*time.Second)
			defer c()
			err = errors.Join(err, sdk.Shutdown(sctx))
		}
		return errors.Join(err, mp.Shutdown(context.Background()))
	}
	if exp != nil {
		sys.spans = func() (uint64, uint64) { return exp.n.Load(), dropped.Load() }
	}
	return sys, nil
}

// discardExporter counts the spans it is given and keeps none.
type discardExporter struct{ n atomic.Uint64 }

func (d *discardExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	d.n.Add(uint64(len(spans)))
	return nil
}

func (d *discardExporter) Shutdown(context.Context) error { return nil }

// measure runs one scenario once: start its system, warm up, measure,
// collect the stragglers, stop the system and purge what the run stored.
func (e *env) measure(ctx context.Context, cfg Config, s Scenario, batch string) (RunResult, error) {
	switch s.Load {
	case Flood:
		return e.measureFlood(ctx, cfg, s, batch)
	case Weights:
		return e.measureWeights(ctx, cfg, s, batch)
	case Many:
		return e.measureMany(ctx, cfg, s, batch)
	case Held:
		return e.measureHeld(ctx, cfg, s, batch)
	}
	sys, err := e.start(ctx, s)
	if err != nil {
		return RunResult{}, err
	}
	subject, err := e.names.CallSubject(sys.pool, personalityID, echo.Name)
	if err != nil {
		_ = sys.stop()
		return RunResult{}, err
	}
	g := newLoad(e.conn, e.names, subject, batch, s, cfg.ArgBytes)
	g.serverPID = cfg.ServerPID
	g.onCall = cfg.OnCall
	res, runErr := g.run(ctx, cfg.Warmup, cfg.Duration)
	stopErr := sys.stop()
	if sys.spans != nil {
		res.SpansExported, res.SpansDropped = sys.spans()
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	filter, _ := e.names.BatchResultsFilter(personalityID, batch)
	purgeErr := errors.Join(
		e.conn.PurgeSubject(pctx, e.names.ResultsStream(), filter),
		e.conn.PurgeSubject(pctx, e.names.AuditStream(), e.names.AuditFilter()),
	)
	if err := errors.Join(runErr, stopErr, purgeErr); err != nil {
		return RunResult{}, err
	}
	return res, nil
}
