// Package workercmd is the Capstan worker binary as a library: Main does
// everything cmd/worker does (configuration from CAPSTAN_* environment
// variables, logging, OpenTelemetry, the /healthz, /readyz and /metrics
// endpoints, the secrets backends, the process sandbox, hosted MCP servers)
// and hosts the built-in tools plus the tools given to it. A worker binary
// with tools of your own is one line:
//
//	func main() { workercmd.Main(weather.Tool()) }
//
// Configuration is the same as cmd/worker's (docs/operations.md);
// CAPSTAN_TOOLS selects among the built-in and the extra tools alike.
package workercmd

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
	"github.com/capstanhq/capstan/internal/telemetry/otelsetup"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"golang.org/x/term"
)

// Main runs the worker binary with the built-in tools and extra until
// SIGTERM or SIGINT, then drains within CAPSTAN_SHUTDOWN_GRACE. It reads the
// process's arguments and environment; on an error it prints it to stderr
// and exits with status 1. Call it from func main only.
func Main(extra ...tool.Tool) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, extra...)
	stop()
	if err != nil {
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

// Run runs a worker hosting the built-in tools and extra until ctx is
// done, then drains (CAPSTAN_SHUTDOWN_GRACE) and returns. args are the
// command-line arguments without the program name (only -h, --help and help
// are accepted); getenv reads the configuration (os.Getenv in a binary);
// stdout receives the usage, stderr the logs. An invalid configuration is an
// error naming the variable; a tool of extra named like a built-in tool is
// an error too (leave the built-in out with CAPSTAN_TOOLS).
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, extra ...tool.Tool) error {
	if len(args) > 0 {
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			fmt.Fprint(stdout, usage)
			return nil
		}
		return fmt.Errorf("unexpected argument %q (the worker takes no arguments; it is configured with CAPSTAN_* variables)", args[0])
	}
	for _, t := range extra {
		if _, ok := builtin.ByName(t.Name); ok {
			return fmt.Errorf("tool %q is named like a built-in tool: give it another name", t.Name)
		}
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
	tel, err := otelsetup.Setup(ctx, otelsetup.Config{ServiceName: "capstan-worker", ServiceInstanceID: cfg.WorkerID,
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
	w, err := worker.New(wc, append(builtin.All(), extra...)...)
	if err != nil {
		return fmt.Errorf("invalid configuration: %w", inEnvTerms(err))
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
	err = inEnvTerms(w.Run(ctx))
	stop()
	if err == nil {
		log.Info("worker stopped")
	}
	return err
}
