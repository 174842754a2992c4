package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/frontdoor"
)

// httpShutdownGrace bounds the wait for open HTTP requests when `mcp --http`
// stops.
const httpShutdownGrace = 5 * time.Second

// cmdMCP serves the pool as an MCP server (the MCP front door,
// docs/mcp.md): over stdio bound to one personality, or over streamable
// HTTP with a tokens file binding each bearer token to a personality.
func (a *app) cmdMCP(ctx context.Context, args []string) int {
	fs := a.flags("mcp")
	personality := fs.String("personality", "", "stdio: the personality of the session (default: CAPSTAN_DEFAULT_PERSONALITY, \"default\")")
	addr := fs.String("http", "", "serve streamable HTTP at http://<addr>/mcp instead of stdio, e.g. 127.0.0.1:8765 (port 0: any free port)")
	tokensFile := fs.String("tokens", "", "with --http (required): YAML file {tokens: [{token, personality, name}]} binding bearer tokens to personalities")
	timeout := fs.Duration("timeout", 0, "timeout_ms of every call (default: the workers' CAPSTAN_CALL_TIMEOUT, 60s); the front door waits 10s longer for the result")
	if _, code, done := a.parseCommand(fs, args, 0, ""); done {
		return code
	}
	switch {
	case *addr != "" && *personality != "":
		a.errorf("mcp: --personality applies to stdio; over HTTP each session gets the personality of its token (--tokens)")
		return exitUsage
	case *addr != "" && *tokensFile == "":
		a.errorf("mcp: --http needs --tokens <file>: every HTTP session is bound to the personality of its bearer token")
		return exitUsage
	case *addr == "" && *tokensFile != "":
		a.errorf("mcp: --tokens applies to --http only; a stdio session is bound to --personality")
		return exitUsage
	case *timeout < 0 || (*timeout > 0 && *timeout < time.Millisecond):
		a.errorf("mcp: --timeout must be at least 1ms, got %s", *timeout)
		return exitUsage
	}
	var tokens *frontdoor.Tokens
	if *addr != "" {
		var err error
		if tokens, err = frontdoor.LoadTokens(*tokensFile); err != nil {
			a.errorf("mcp: %v", err)
			return exitUsage
		}
		if fi, err := os.Stat(*tokensFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			a.errorf("mcp: warning: tokens file %s may be read by other users (mode %04o); chmod 600 it, and keep it out of every personality's fs_reach",
				*tokensFile, fi.Mode().Perm())
		}
	}
	cfg, err := loadConfig(a.getenv)
	if err != nil {
		a.errorf("%v", err)
		return exitUsage
	}
	level, _ := cfg.slogLevel() // checked by loadConfig
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()
	front, err := frontdoor.New(frontdoor.Config{Client: c, Logger: a.logger(cfg, level).With("component", "mcp"), CallTimeout: *timeout})
	if err != nil {
		a.errorf("mcp: %v", err)
		return exitUsage
	}
	defer front.Close()
	// An interrupt releases the requests still waiting for results; their
	// calls go on and their results stay in the results stream.
	defer context.AfterFunc(ctx, front.Close)()

	if *addr != "" {
		return a.serveMCPHTTP(ctx, front, tokens, *addr)
	}
	id := *personality
	if id == "" {
		id = c.PersonalityID()
	}
	if err := front.ServeStdio(ctx, id, io.NopCloser(a.stdin), nopWriteCloser{a.stdout}); err != nil {
		a.errorf("mcp: %v", err)
		return exitUsage
	}
	return exitOK
}

// serveMCPHTTP serves the front door over streamable HTTP on addr until ctx
// ends.
func (a *app) serveMCPHTTP(ctx context.Context, front *frontdoor.Server, tokens *frontdoor.Tokens, addr string) int {
	h, err := front.Handler(ctx, tokens)
	if err != nil {
		a.errorf("mcp: %v", err)
		return exitUsage
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		a.errorf("mcp: --http: %v", err)
		return exitUsage
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String() + frontdoor.Path
	fmt.Fprintf(a.stderr, "capstan: mcp: serving streamable HTTP at %s (personalities: %s)\n", url, strings.Join(tokens.Personalities(), ", "))
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		fmt.Fprintf(a.stderr, "capstan: mcp: warning: %s is not a loopback address and this is plain HTTP: bearer tokens cross the network in clear; put a TLS proxy in front\n", ln.Addr())
	}
	select {
	case err := <-served:
		a.errorf("mcp: %v", err)
		return exitUsage
	case <-ctx.Done():
	}
	front.Close() // release the requests still waiting, so that Shutdown need not wait for them
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close() // streams that stay open (GET event streams) are cut
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.errorf("mcp: %v", err)
		return exitUsage
	}
	return exitOK
}

// nopWriteCloser is an io.WriteCloser whose Close does nothing: stdout stays
// open for the rest of the process.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
