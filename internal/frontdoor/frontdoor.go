// Package frontdoor serves a Capstan worker pool as an MCP server, the MCP
// front door of docs/mcp.md. Every MCP session is bound to one personality:
// tools/list shows exactly the tools that personality may call (the catalog
// filtered by client.ToolsFor, the code of `dispatcher tools --personality`),
// and tools/call runs a Capstan call under that personality through the
// client package, answered from the results stream.
//
// The MCP side is the official Go SDK (github.com/modelcontextprotocol/go-sdk):
// ServeStdio serves one session over stdin/stdout, Handler serves streamable
// HTTP with bearer tokens from a tokens file (LoadTokens).
package frontdoor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstanhq/capstan/client"
)

// Defaults of Config.
const (
	DefaultRefresh        = 30 * time.Second
	DefaultSessionTimeout = time.Hour
)

// Path is where Handler serves MCP.
const Path = "/mcp"

// Platform is the platform field of every call the front door publishes.
const Platform = "mcp"

// Config configures a Server. Only Client is required.
type Config struct {
	// Client publishes the calls and reads the catalog, results and progress.
	// The Server does not close it.
	Client *client.Client
	// Logger receives one line per call outcome and tool-list problems;
	// default: discard.
	Logger *slog.Logger
	// CallTimeout is the timeout_ms of every call; 0 leaves the timeout to
	// the workers (CAPSTAN_CALL_TIMEOUT, default 60s).
	CallTimeout time.Duration
	// Wait bounds the wait for a call's result: default CallTimeout plus
	// client.WaitSlack, or client.DefaultWait when CallTimeout is 0. A call
	// still without a result then answers isError with
	// "execution_failed: Tool result missing: no result before deadline".
	Wait time.Duration
	// Refresh is how often a personality's tool list is recomputed besides
	// every catalog change, to see edits of the personality document;
	// default 30s.
	Refresh time.Duration
	// SessionTimeout closes an HTTP session that sent no request for this
	// long; default 1h.
	SessionTimeout time.Duration
	// Version is the server version announced in the MCP handshake; default
	// the module version of the binary.
	Version string
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Wait == 0 {
		c.Wait = client.DefaultWait
		if c.CallTimeout > 0 {
			c.Wait = c.CallTimeout + client.WaitSlack
		}
	}
	c.Refresh = cmp.Or(c.Refresh, DefaultRefresh)
	c.SessionTimeout = cmp.Or(c.SessionTimeout, DefaultSessionTimeout)
	if c.Version == "" {
		c.Version = "dev"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			c.Version = bi.Main.Version
		}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("Config.Client must be set"))
	}
	if c.CallTimeout < 0 {
		errs = append(errs, fmt.Errorf("Config.CallTimeout must not be negative, got %s", c.CallTimeout))
	}
	if c.CallTimeout > 0 && c.CallTimeout < time.Millisecond {
		errs = append(errs, fmt.Errorf("Config.CallTimeout must be at least 1ms, got %s", c.CallTimeout))
	}
	if c.Wait < 0 {
		errs = append(errs, fmt.Errorf("Config.Wait must not be negative, got %s", c.Wait))
	}
	if c.Refresh < 0 {
		errs = append(errs, fmt.Errorf("Config.Refresh must not be negative, got %s", c.Refresh))
	}
	if c.SessionTimeout < 0 {
		errs = append(errs, fmt.Errorf("Config.SessionTimeout must not be negative, got %s", c.SessionTimeout))
	}
	return errors.Join(errs...)
}

// Server is the MCP front door: one MCP server per personality, each kept in
// step with the tool catalog. Create it with New and release it with Close.
type Server struct {
	cfg Config
	// ctx ends at Close: it stops the tool-list loops and releases handlers
	// still waiting for a result (their calls go on; see callTool).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	personality map[string]*personalityServer

	// cancels holds the MCP cancellations seen by the transports (requests.go).
	cancels cancellations
	// states signs the request states of input-required results
	// (elicitation.go).
	states *requestStates
}

// New returns a Server for cfg. It starts nothing until ServeStdio or
// Handler binds a personality.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("frontdoor: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, ctx: ctx, cancel: cancel, personality: make(map[string]*personalityServer), states: newRequestStates()}, nil
}

// Close stops the tool-list loops and releases the tools/call handlers still
// waiting (their Capstan calls keep running; the results stay in the results
// stream). It does not close Config.Client. Close is idempotent.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
}

// ServeStdio serves one MCP session bound to personality over in and out
// (newline-delimited JSON-RPC, the MCP stdio transport) until the client
// closes in or ctx ends. An unknown personality is an error wrapping
// client.ErrUnknownPersonality, returned before anything is read.
func (s *Server) ServeStdio(ctx context.Context, personality string, in io.ReadCloser, out io.WriteCloser) error {
	p, err := s.server(ctx, personality)
	if err != nil {
		return err
	}
	t := &stdioTransport{inner: &mcp.IOTransport{Reader: in, Writer: out}, sessionID: "stdio-" + client.NewID(), cancels: &s.cancels}
	if err := p.mcp.Run(ctx, t); err != nil && ctx.Err() == nil {
		return fmt.Errorf("frontdoor: stdio session: %w", err)
	}
	return nil
}

// Handler returns the HTTP handler of the streamable HTTP transport at Path:
// a request without a bearer token of tokens gets 401 and reaches no MCP
// code; a session is bound to the personality of the token that opened it,
// and a request of that session with another token is refused (403). Every
// personality of tokens must exist: an unknown one is an error wrapping
// client.ErrUnknownPersonality. ctx bounds the initial catalog reads.
func (s *Server) Handler(ctx context.Context, tokens *Tokens) (http.Handler, error) {
	servers := make(map[string]*mcp.Server)
	for _, id := range tokens.Personalities() {
		p, err := s.server(ctx, id)
		if err != nil {
			return nil, err
		}
		servers[id] = p.mcp
	}
	streamable := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		return servers[tokenPersonality(auth.TokenInfoFromContext(r.Context()))]
	}, &mcp.StreamableHTTPOptions{
		// Lets a client that lost the response stream of a long call resume
		// it (Last-Event-ID); the call itself never depends on the stream.
		EventStore:     mcp.NewMemoryEventStore(nil),
		SessionTimeout: s.cfg.SessionTimeout,
		Logger:         s.cfg.Logger,
	})
	bearer := auth.RequireBearerToken(tokens.verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})
	mux := http.NewServeMux()
	mux.Handle(Path, bearer(s.observe(streamable)))
	return mux, nil
}

// server returns the MCP server of personality id, creating it (and its
// tool-list loop) on first use.
func (s *Server) server(ctx context.Context, id string) (*personalityServer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.personality[id]; ok {
		return p, nil
	}
	if s.ctx.Err() != nil {
		return nil, errors.New("frontdoor: server closed")
	}
	p, err := newPersonalityServer(ctx, s, id)
	if err != nil {
		return nil, err
	}
	s.personality[id] = p
	s.wg.Go(func() { p.keepToolsCurrent(s.ctx) })
	return p, nil
}

// implementation is the server identity announced in the MCP handshake.
func (s *Server) implementation() *mcp.Implementation {
	return &mcp.Implementation{Name: "capstan", Title: "Capstan worker pool", Version: s.cfg.Version}
}
