package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/console"
	"github.com/capstanhq/capstan/worker"
)

// defaultConsoleAddr is where "dispatcher console" listens by default.
const defaultConsoleAddr = "127.0.0.1:8480"

// localPool is local mode's in-process worker pool.
type localPool struct {
	w     *worker.Worker
	slots int
}

// Environment variables of the console (docs/operations.md).
const (
	envConsoleToken       = "CAPSTAN_CONSOLE_TOKEN"
	envConsoleViewerToken = "CAPSTAN_CONSOLE_VIEWER_TOKEN"
	envConsoleTokens      = "CAPSTAN_CONSOLE_TOKENS"
	envTraceURL           = "CAPSTAN_TRACE_URL"
)

// consoleVars are the console's variables as the help lists them.
var consoleVars = [][2]string{
	{envConsoleToken, "console: bearer token of an operator (at least 16 characters)"},
	{envConsoleViewerToken, "console: bearer token of a viewer"},
	{envConsoleTokens, "console: tokens file with roles (--tokens)"},
	{envTraceURL, "console: trace UI address of a trace, {trace_id} replaced (--trace-url)"},
}

// cmdConsole serves the operator console until interrupted.
func (a *app) cmdConsole(ctx context.Context, args []string) int {
	fs := a.flags("console")
	addr := fs.String("addr", defaultConsoleAddr, "listen address; without a token only a loopback address is allowed")
	tokensFile := fs.String("tokens", a.getenv(envConsoleTokens), "YAML file of tokens with roles: tokens: [{token, role: viewer|operator|approver, name}] (env "+envConsoleTokens+")")
	traceURL := fs.String("trace-url", a.getenv(envTraceURL), "trace UI address of a trace, {trace_id} replaced, e.g. http://localhost:16686/trace/{trace_id} (env "+envTraceURL+")")
	if _, code, done := a.parseCommand(fs, args, 0, ""); done {
		return code
	}
	tokens, err := a.consoleTokens(*tokensFile)
	if err != nil {
		a.errorf("console: %v", err)
		return exitUsage
	}
	if len(tokens) == 0 && !console.LoopbackAddr(*addr) {
		a.errorf("console: --addr %s is not a loopback address: without a token the console serves this machine only; set %s (or --tokens) to serve it beyond", *addr, envConsoleToken)
		return exitUsage
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		a.errorf("console: %v", err)
		return exitUsage
	}
	defer ln.Close()
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()
	cfg, _ := loadConfig(a.getenv) // checked by setup
	conn, err := bus.Connect(ctx, bus.Config{URL: a.natsURL, Creds: a.natsCreds, Prefix: cfg.Prefix, Name: "capstan-console",
		Replicas: cfg.StreamReplicas, InboxPrefix: cfg.InboxPrefix})
	if err != nil {
		a.errorf("console: %v", err)
		return exitUsage
	}
	defer conn.Close()
	level, _ := cfg.slogLevel()
	ccfg := console.Config{Client: c, Conn: conn, Tokens: tokens, TraceURL: *traceURL,
		Logger: a.logger(cfg, min(level, slog.LevelInfo)).With("component", "console")}
	if l := a.local; l != nil {
		ccfg.Local = &console.LocalWorker{ID: l.w.ID(), Slots: l.slots, Version: "in-process (local mode)", Readiness: l.w.Readiness}
	}
	con, err := console.New(ccfg)
	if err != nil {
		a.errorf("%v", err)
		return exitUsage
	}
	stop, err := con.Start(ctx)
	if err != nil {
		a.errorf("%v", err)
		return exitUsage
	}
	defer stop()
	srv := &http.Server{Handler: con, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	access := "loopback clients only, no token (set " + envConsoleToken + " or --tokens to serve beyond this machine)"
	if len(tokens) > 0 {
		access = fmt.Sprintf("%d token(s); every request needs one", len(tokens))
	}
	a.errorf("console: serving http://%s (%s)", ln.Addr(), access)
	if a.local != nil {
		a.errorf("console: local mode: other dispatcher commands reach this pool with CAPSTAN_NATS_URL=%s and the same CAPSTAN_DATA_DIR", a.natsURL)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = srv.Shutdown(sctx)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.errorf("console: %v", err)
		return exitUsage
	}
	return exitOK
}

// consoleTokens gathers the console's tokens: the tokens file, then
// CAPSTAN_CONSOLE_TOKEN (an operator) and CAPSTAN_CONSOLE_VIEWER_TOKEN (a
// viewer).
func (a *app) consoleTokens(file string) ([]console.Token, error) {
	var tokens []console.Token
	if file != "" {
		t, err := console.LoadTokens(file)
		if err != nil {
			return nil, err
		}
		tokens = t
	}
	for _, e := range []struct {
		name string
		role console.Role
	}{{envConsoleToken, console.RoleOperator}, {envConsoleViewerToken, console.RoleViewer}} {
		v := a.getenv(e.name)
		if v == "" {
			continue
		}
		t := console.Token{Token: v, Role: e.role, Name: e.name}
		if err := t.Check(e.name); err != nil {
			return nil, err
		}
		tokens = append(tokens, t)
	}
	return tokens, nil
}
