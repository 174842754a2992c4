package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/internal/tools/builtin"
	"github.com/capstanhq/capstan/worker"
)

// probeTimeout bounds the look for a server on the probe URL.
const probeTimeout = 500 * time.Millisecond

// setup loads the configuration and connects a client, in local mode when
// CAPSTAN_NATS_URL is unset. On failure it prints one message and returns
// ok false; otherwise the caller must call closeFn when done.
func (a *app) setup(ctx context.Context) (c *client.Client, closeFn func(), ok bool) {
	cfg, err := loadConfig(a.getenv)
	if err != nil {
		a.errorf("%v", err)
		return nil, nil, false
	}
	level, _ := cfg.slogLevel() // checked by loadConfig
	tel, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: "capstan-dispatcher", Getenv: a.getenv, Logger: a.logger(cfg, level)})
	if err != nil {
		a.errorf("invalid configuration: %v", err)
		return nil, nil, false
	}
	a.tel = tel
	shutdown := func() {
		// Export the producer spans, without waiting long for a collector that is down.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}
	c, closeConn, err := a.connect(ctx, cfg)
	if err != nil {
		shutdown()
		a.errorf("%v", err)
		return nil, nil, false
	}
	return c, func() { closeConn(); shutdown() }, true
}

func (a *app) connect(ctx context.Context, cfg Config) (*client.Client, func(), error) {
	url := cfg.NATSURL
	if url == "" && bus.Probe(a.probeURL, probeTimeout) {
		url = a.probeURL
	}
	if url != "" {
		c, err := a.newClient(ctx, cfg, url)
		if err != nil {
			return nil, nil, err
		}
		return c, c.Close, nil
	}
	return a.localMode(ctx, cfg)
}

func (a *app) newClient(ctx context.Context, cfg Config, url string) (*client.Client, error) {
	return client.New(ctx, client.Config{NATSURL: url, NATSCreds: cfg.NATSCreds, Prefix: cfg.Prefix, Name: "capstan-dispatcher", StreamReplicas: cfg.StreamReplicas,
		TracerProvider: a.tel.TracerProvider})
}

// localMode starts an embedded JetStream server and an in-process worker pool
// with the built-in tools, waits until the pool consumes calls, says so on
// stderr in one line, and connects a client. closeFn closes the client,
// stops the pool (waiting for it to drain) and shuts the server down.
func (a *app) localMode(ctx context.Context, cfg Config) (*client.Client, func(), error) {
	cfg.StreamReplicas = 1 // one embedded server
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, nil, fmt.Errorf("local mode: CAPSTAN_DATA_DIR: %w", err)
	}
	srv, err := bus.StartServer(bus.ServerConfig{DataDir: dataDir, Port: -1})
	if err != nil {
		return nil, nil, fmt.Errorf("local mode: %w", err)
	}
	var seeded string
	if cfg.PersonalitiesDir == "" {
		if seeded, err = seedDefaultPersonality(ctx, cfg, srv.ClientURL()); err != nil {
			srv.Shutdown()
			return nil, nil, fmt.Errorf("local mode: %w", err)
		}
	}
	level, _ := cfg.slogLevel() // checked by loadConfig
	w, err := worker.New(worker.Config{
		NATSURL:            srv.ClientURL(),
		DataDir:            dataDir,
		Prefix:             cfg.Prefix,
		Concurrency:        cfg.Concurrency,
		CallTimeout:        cfg.CallTimeout,
		ShutdownGrace:      max(cfg.ShutdownGrace, time.Millisecond), // 0 = hand back at once, as in the worker binary
		MaxDeliver:         cfg.MaxDeliver,
		PersonalitiesDir:   cfg.PersonalitiesDir,
		DefaultPersonality: cfg.DefaultPersonality,
		Tools:              cfg.Tools,
		Logger:             a.logger(cfg, level),
		TracerProvider:     a.tel.TracerProvider,
		MeterProvider:      a.tel.MeterProvider,
	}, builtin.All()...)
	if err != nil {
		srv.Shutdown()
		return nil, nil, fmt.Errorf("local mode: worker pool: %w", err)
	}

	// The pool outlives ctx so that it can drain after an interrupt.
	wctx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(wctx) }()
	stopPool := func() {
		stopWorker()
		<-runErr
		srv.Shutdown()
	}
	select {
	case <-w.Ready():
	case err := <-runErr:
		stopWorker()
		srv.Shutdown()
		if err == nil {
			err = errors.New("stopped before it was ready")
		}
		return nil, nil, fmt.Errorf("local mode: worker pool: %w", err)
	case <-ctx.Done():
		stopPool()
		return nil, nil, fmt.Errorf("local mode: %w", ctx.Err())
	}
	fmt.Fprintf(a.stderr, "capstan: local mode: no NATS server at %s; started an embedded JetStream server (store: %s) and an in-process worker pool (%d slots)\n",
		a.probeURL, dataDir, cfg.Concurrency)
	if seeded != "" {
		fmt.Fprintf(a.stderr, "capstan: local mode: no personality %q existed; stored the local default (every built-in tool; no network, secrets or processes; files only under %s)\n",
			cfg.DefaultPersonality, seeded)
	}

	c, err := a.newClient(ctx, cfg, srv.ClientURL())
	if err != nil {
		stopPool()
		return nil, nil, err
	}
	return c, func() { c.Close(); stopPool() }, nil
}

// logger is the in-process pool's logger: stderr, at warn and above unless
// CAPSTAN_LOG_LEVEL says otherwise.
func (a *app) logger(cfg Config, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	format := strings.ToLower(cfg.LogFormat)
	if format == "" {
		format = "json"
		if a.stderrTTY {
			format = "text"
		}
	}
	if format == "text" {
		return slog.New(slog.NewTextHandler(a.stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(a.stderr, opts))
}

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// seedDefaultPersonality stores the local default personality under the
// configured default id when none exists yet, and returns the directory it
// grants ("" when a personality was already there). Local mode calls it only
// when no CAPSTAN_PERSONALITIES_DIR is configured.
func seedDefaultPersonality(ctx context.Context, cfg Config, url string) (string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	conn, err := bus.Connect(ctx, bus.Config{URL: url, Prefix: cfg.Prefix, Name: "capstan-dispatcher-setup"})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	kv, err := conn.KV(ctx, bus.Personalities)
	if err != nil {
		return "", err
	}
	workdir, _ := json.Marshal(cwd)
	doc := fmt.Sprintf(localDefaultPersonality, cfg.DefaultPersonality, workdir)
	if _, err := kv.Create(ctx, cfg.DefaultPersonality, []byte(doc), 0); err != nil {
		if errors.Is(err, bus.ErrKeyExists) {
			return "", nil
		}
		return "", fmt.Errorf("store the local default personality: %w", err)
	}
	return cwd, nil
}

// localDefaultPersonality is the policy local mode stores when none exists:
// every built-in tool, default deny for network, nothing for secrets and
// processes, files only under the directory the dispatcher runs in.
const localDefaultPersonality = `# Written by "dispatcher" in local mode because no default personality existed.
id: %s
fs_reach:
  workdir: %s
  read: ["${WORKDIR}"]
  write: ["${WORKDIR}"]
secrets: {allow: []}
process: {allow: []}
`
