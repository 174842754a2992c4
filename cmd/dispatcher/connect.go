package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/embedded"
	"github.com/capstanhq/capstan/internal/telemetry/otelsetup"
	"github.com/capstanhq/capstan/tools/builtin"
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
	tel, err := otelsetup.Setup(ctx, otelsetup.Config{ServiceName: "capstan-dispatcher", Getenv: a.getenv, Logger: a.logger(cfg, level)})
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

// connect connects a client. With no CAPSTAN_NATS_URL it probes the probe
// URL: a server that accepts the connection is used, nothing answering means
// local mode, and a server that answers but refuses is an error saying what
// to set. Without CAPSTAN_NATS_CREDS, a connection to the probe URL or to a
// CAPSTAN_NATS_URL of loopback addresses only uses the embedded server's
// credentials file in CAPSTAN_DATA_DIR when it exists (embeddedCreds).
func (a *app) connect(ctx context.Context, cfg Config) (*client.Client, func(), error) {
	url, creds := cfg.NATSURL, cfg.NATSCreds
	implicit := false
	if creds == "" && (url == "" || loopbackOnly(url)) {
		creds = embeddedCreds(cfg.DataDir)
		implicit = creds != ""
	}
	if url == "" {
		err := bus.Probe(a.probeURL, probeTimeout, creds)
		if implicit && errors.Is(err, bus.ErrNKeyNotSupported) {
			// A server without authorization, not a worker's embedded
			// server: the file is left over from an earlier embedded run.
			creds, implicit = "", false
			err = bus.Probe(a.probeURL, probeTimeout, "")
		}
		switch {
		case err == nil:
			url = a.probeURL
		case errors.Is(err, bus.ErrNoServer):
			return a.localMode(ctx, cfg)
		case errors.Is(err, bus.ErrNotAuthorized):
			return nil, nil, refused(a.probeURL, creds, implicit)
		default:
			return nil, nil, err
		}
	}
	c, err := a.newClient(ctx, cfg, url, creds)
	if implicit && errors.Is(err, bus.ErrNKeyNotSupported) {
		creds, implicit = "", false
		c, err = a.newClient(ctx, cfg, url, "")
	}
	if errors.Is(err, bus.ErrNotAuthorized) && cfg.NATSCreds == "" && loopbackOnly(url) {
		return nil, nil, refused(url, creds, implicit)
	}
	if err != nil {
		return nil, nil, err
	}
	return c, c.Close, nil
}

// embeddedCreds returns the credentials file an embedded server storing in
// dataDir writes, or "" when there is none.
func embeddedCreds(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return ""
	}
	f := bus.EmbeddedCredsFile(abs)
	if fi, err := os.Stat(f); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return f
}

// refused is the error for a server at url that answered but refused the
// connection made with creds ("" for none; implicit when taken from
// CAPSTAN_DATA_DIR rather than CAPSTAN_NATS_CREDS).
func refused(url, creds string, implicit bool) error {
	what := "a connection without credentials"
	switch {
	case implicit:
		what = "the credentials in " + creds + " (CAPSTAN_DATA_DIR's embedded server credentials, from an earlier start or another server)"
	case creds != "":
		what = "the credentials in " + creds + " (CAPSTAN_NATS_CREDS)"
	}
	return fmt.Errorf("a NATS server answers at %s but refuses %s; set CAPSTAN_NATS_CREDS to its credentials file, "+
		"or CAPSTAN_DATA_DIR to the data dir of the worker that started it (its %s is used), "+
		"or CAPSTAN_NATS_URL to another server", redactURL(url), what, bus.CredsFileName)
}

// loopbackOnly reports whether every server of a comma-separated NATS URL
// list is a loopback address (127.0.0.0/8, ::1 or localhost).
func loopbackOnly(urls string) bool {
	found := false
	for u := range strings.SplitSeq(urls, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		p, err := neturl.Parse(u)
		if err != nil {
			return false
		}
		h := p.Hostname()
		ip := net.ParseIP(h)
		if !strings.EqualFold(h, "localhost") && (ip == nil || !ip.IsLoopback()) {
			return false
		}
		found = true
	}
	return found
}

// redactURL hides user info in a URL list before it is shown.
func redactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		if p, err := neturl.Parse(strings.TrimSpace(u)); err == nil && p.User != nil {
			p.User = nil
			parts[i] = p.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

func (a *app) newClient(ctx context.Context, cfg Config, url, creds string) (*client.Client, error) {
	a.natsURL, a.natsCreds = url, creds
	return client.New(ctx, client.Config{NATSURL: url, NATSCreds: creds, Prefix: cfg.Prefix, Name: "capstan-dispatcher", StreamReplicas: cfg.StreamReplicas,
		Personality: cfg.DefaultPersonality, InboxPrefix: cfg.InboxPrefix, TracerProvider: a.tel.TracerProvider})
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
	unlock, err := lockLocal(dataDir)
	if errors.Is(err, errLocalBusy) {
		return a.joinLocal(ctx, cfg, dataDir)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("local mode: lock %s: %w", dataDir, err)
	}
	srv, err := embedded.Start(embedded.Config{DataDir: dataDir, Port: -1})
	if err != nil {
		unlock()
		return nil, nil, fmt.Errorf("local mode: %w", err)
	}
	stopSrv := func() { srv.Shutdown(); unlock() }
	var seeded string
	if cfg.PersonalitiesDir == "" {
		if seeded, err = seedDefaultPersonality(ctx, cfg, srv.ClientURL(), srv.CredsFile()); err != nil {
			stopSrv()
			return nil, nil, fmt.Errorf("local mode: %w", err)
		}
	}
	level, _ := cfg.slogLevel() // checked by loadConfig
	poolLog, closeLog, err := a.poolLogger(cfg, dataDir, level)
	if err != nil {
		stopSrv()
		return nil, nil, fmt.Errorf("local mode: %w", err)
	}
	w, err := worker.New(worker.Config{
		NATSURL:            srv.ClientURL(),
		NATSCreds:          srv.CredsFile(),
		DataDir:            dataDir,
		Prefix:             cfg.Prefix,
		Concurrency:        cfg.Concurrency,
		CallTimeout:        cfg.CallTimeout,
		ShutdownGrace:      max(cfg.ShutdownGrace, time.Millisecond), // 0 = hand back at once, as in the worker binary
		MaxDeliver:         cfg.MaxDeliver,
		PersonalitiesDir:   cfg.PersonalitiesDir,
		MCPServersDir:      cfg.MCPServersDir,
		DefaultPersonality: cfg.DefaultPersonality,
		Tools:              cfg.Tools,
		Logger:             poolLog,
		TracerProvider:     a.tel.TracerProvider,
		MeterProvider:      a.tel.MeterProvider,
	}, builtin.All()...)
	if err != nil {
		stopSrv()
		closeLog()
		return nil, nil, fmt.Errorf("local mode: worker pool: %w", err)
	}
	a.local = &localPool{w: w, slots: cfg.Concurrency}

	// The pool outlives ctx so that it can drain after an interrupt.
	wctx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(wctx) }()
	stopPool := func() {
		stopWorker()
		<-runErr
		stopSrv()
		closeLog()
	}
	select {
	case <-w.Ready():
	case err := <-runErr:
		stopWorker()
		stopSrv()
		closeLog()
		if err == nil {
			err = errors.New("stopped before it was ready")
		}
		return nil, nil, fmt.Errorf("local mode: worker pool: %w", err)
	case <-ctx.Done():
		stopPool()
		return nil, nil, fmt.Errorf("local mode: %w", ctx.Err())
	}
	if err := writeLocalURL(dataDir, srv.ClientURL()); err != nil {
		stopPool()
		return nil, nil, fmt.Errorf("local mode: %w", err)
	}
	logs := "its logs: " + filepath.Join(dataDir, poolLogFile) + "; --pool-logs shows them here"
	if a.poolLogs {
		logs = "its logs on stderr"
	}
	fmt.Fprintf(a.stderr, "capstan: local mode: no NATS server at %s; started an embedded JetStream server (store: %s) and an in-process worker pool (%d slots; %s)\n",
		a.probeURL, dataDir, cfg.Concurrency, logs)
	if seeded != "" {
		fmt.Fprintf(a.stderr, "capstan: local mode: no personality %q existed; stored the local default (every built-in tool; no network, secrets or processes; files only under %s)\n",
			cfg.DefaultPersonality, seeded)
	}

	c, err := a.newClient(ctx, cfg, srv.ClientURL(), srv.CredsFile())
	if err != nil {
		stopPool()
		return nil, nil, err
	}
	return c, func() { c.Close(); stopPool() }, nil
}

// poolLogFile is the file under the data dir that local mode's pool logs to.
const poolLogFile = "local-pool.log"

// poolLogger is the logger of local mode's in-process pool: its log file in
// the data dir (appended to, mode 0600), so that the dispatcher's output is
// the answer alone; on stderr with --pool-logs.
func (a *app) poolLogger(cfg Config, dataDir string, level slog.Level) (*slog.Logger, func(), error) {
	if a.poolLogs {
		return a.logger(cfg, level), func() {}, nil
	}
	f, err := os.OpenFile(filepath.Join(dataDir, poolLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("pool log file: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewJSONHandler(f, opts)
	if strings.EqualFold(cfg.LogFormat, "text") {
		h = slog.NewTextHandler(f, opts)
	}
	return slog.New(h), func() { _ = f.Close() }, nil
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
func seedDefaultPersonality(ctx context.Context, cfg Config, url, creds string) (string, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	conn, err := bus.Connect(ctx, bus.Config{URL: url, Creds: creds, Prefix: cfg.Prefix, Name: "capstan-dispatcher-setup"})
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
