// Command worker runs a Capstan worker: it serves its pool's tool calls from
// NATS JetStream until SIGTERM or SIGINT, then drains within
// CAPSTAN_SHUTDOWN_GRACE. Configuration comes from CAPSTAN_* environment
// variables (docs/operations.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/envconfig"
	"github.com/capstanhq/capstan/internal/logging"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"golang.org/x/term"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "capstan worker:", err)
		os.Exit(1)
	}
}

// cleanupTimeout bounds what the binary does after the worker stopped:
// close the HTTP endpoints and flush telemetry.
const cleanupTimeout = 2 * time.Second

// exitMargin is how long after CAPSTAN_SHUTDOWN_GRACE the process has
// exited at most once SIGTERM arrived, also with NATS unreachable:
// worker.ShutdownMargin for the worker, cleanupTimeout for the binary
// (docs/operations.md, "Shutdown").
const exitMargin = worker.ShutdownMargin + cleanupTimeout

const usage = `usage: worker

Runs a Capstan worker. Everything is configured with environment variables;
see docs/operations.md. The most common:

  CAPSTAN_NATS_URL           NATS servers (unset: start an embedded server on 127.0.0.1:4222;
                             clients authenticate with <CAPSTAN_DATA_DIR>/embedded.creds)
  CAPSTAN_PERSONALITIES_DIR  personality files loaded at start
  CAPSTAN_MCP_SERVERS_DIR    MCP server definitions (*.yaml, one each): their tools are hosted as
                             mcp__<server>__<tool> (docs/mcp.md)
  CAPSTAN_CONCURRENCY        calls run at once (64)
  CAPSTAN_POOL               pool served (default)
  CAPSTAN_TOOLS              tools hosted (all built-ins)
  CAPSTAN_SHUTDOWN_GRACE     drain time on SIGTERM (30s); the process exits at most 5s later
  CAPSTAN_BLOBS              on (store large outputs by reference in the blobs bucket) or off
  CAPSTAN_PROCESS_NETWORK    confined (refuse process network without user namespaces) or unconfined
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Fprint(stdout, usage)
			return nil
		}
		return fmt.Errorf("unexpected argument %q (the worker takes no arguments; it is configured with CAPSTAN_* variables)", args[0])
	}
	var cfg Config
	if err := envconfig.Parse(&cfg, getenv); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	f, isFile := stderr.(*os.File)
	log, err := logging.New(stderr, cfg.LogLevel, cfg.LogFormat, isFile && term.IsTerminal(int(f.Fd())))
	if err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	tel, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: "capstan-worker", ServiceInstanceID: cfg.WorkerID,
		Getenv: getenv, Prometheus: true, Logger: log})
	if err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	// After Run returns (at most CAPSTAN_SHUTDOWN_GRACE +
	// worker.ShutdownMargin after SIGTERM), the HTTP endpoints close and
	// the exporters flush within cleanupTimeout in all: an orchestrator
	// that kills at the grace plus exitMargin finds the process gone.
	var srv *http.Server
	stopped := false
	stop := func() {
		// Flush what the exporters hold, without waiting long for a
		// collector that is down.
		sctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if srv != nil {
			_ = srv.Shutdown(sctx)
		}
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("telemetry shutdown", "error", err)
		}
		stopped = true
	}
	defer func() {
		if !stopped {
			stop()
		}
	}()
	wc := cfg.worker()
	wc.Logger = log
	wc.Getenv = getenv
	wc.TracerProvider = tel.TracerProvider
	wc.MeterProvider = tel.MeterProvider
	w, err := worker.New(wc, builtin.All()...)
	if err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	if cfg.HTTPAddr != "" && cfg.HTTPAddr != "off" {
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("CAPSTAN_HTTP_ADDR: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/", w.Handler())
		mux.Handle("GET /metrics", tel.MetricsHandler())
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("health server stopped", "error", err)
			}
		}()
		log.Info("http endpoints: /healthz /readyz /metrics", "addr", ln.Addr().String(),
			"traces_exported", tel.TracesExported, "metrics_exported", tel.MetricsExported)
	}
	err = w.Run(ctx)
	stop()
	if err == nil {
		log.Info("worker stopped")
	}
	return err
}
