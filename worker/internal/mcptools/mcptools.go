// Package mcptools hosts the tools of a worker's MCP servers
// (CAPSTAN_MCP_SERVERS_DIR, docs/mcp.md): it loads their definitions,
// runs their host, keeps the hosted tools (toolset.Set) equal to the tool
// lists the servers give, and, once the worker is registered, the catalog
// too.
package mcptools

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/mcphost"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker/internal/catalog"
	"github.com/capstanhq/capstan/worker/internal/toolset"
	"go.opentelemetry.io/otel/trace"
)

// StartWait bounds how long a worker waits, before it is ready, for every
// hosted MCP server's first start (a server slower than that is hosted as
// soon as it is up).
const StartWait = 30 * time.Second

// Config is what the MCP servers of a worker share with it.
type Config struct {
	// Dir is Config.MCPServersDir; empty hosts no server.
	Dir         string
	CallTimeout time.Duration
	Pool        string
	Set         *toolset.Set
	Secrets     secrets.Backend
	Process     process.Config
	Resolver    *process.Resolver
	// ResolveNames resolves bare binary names on the trusted PATH once.
	ResolveNames   func([]string)
	TracerProvider trace.TracerProvider
	WrapTransport  func(http.RoundTripper) http.RoundTripper
	// AllowPrivateURLs lets url servers be reached on loopback (tests).
	AllowPrivateURLs bool
	// SetStatus shows the servers' status in /readyz's details.
	SetStatus func(map[string]mcphost.Status)
	// OpCtx bounds one bus operation of a catalog update.
	OpCtx func() (context.Context, context.CancelFunc)
	Log   *slog.Logger
}

// Servers are the hosted MCP servers of a worker. A nil *Servers hosts
// none: every method is then a no-op.
type Servers struct {
	cfg  Config
	defs []*mcphost.Definition
	host *mcphost.Host
	// catalog is set while the worker is registered: from then on a
	// changed tool list goes to the catalog at once.
	catalog atomic.Pointer[catalog.Registry]
}

// Load reads the MCP server definitions of cfg.Dir and builds their host:
// an invalid file is an error naming it and every problem; so is a
// definition that uses secrets without a backend. It returns nil (no
// servers) without a directory or definitions.
func Load(cfg Config) (*Servers, error) {
	if cfg.Dir == "" {
		return nil, nil
	}
	defs, err := mcphost.LoadDir(cfg.Dir, cfg.CallTimeout)
	if err != nil {
		return nil, err
	}
	if len(defs) == 0 {
		cfg.Log.Warn("CAPSTAN_MCP_SERVERS_DIR holds no MCP server definition", "dir", cfg.Dir)
		return nil, nil
	}
	s := &Servers{cfg: cfg, defs: defs}
	s.host, err = mcphost.New(mcphost.Config{
		Secrets: cfg.Secrets, Process: cfg.Process, Resolver: cfg.Resolver, Logger: cfg.Log,
		TracerProvider: cfg.TracerProvider, WrapTransport: cfg.WrapTransport,
		AllowPrivateURLs: cfg.AllowPrivateURLs,
		OnTools:          s.onTools,
		OnStatus:         cfg.SetStatus,
	}, defs)
	if err != nil {
		return nil, err
	}
	cfg.Set.EnableServers()
	for _, d := range defs {
		// Bare names on the trusted PATH are resolved once, at start.
		if p := d.Capabilities().Process; p != nil {
			cfg.ResolveNames(p.AllowedBinaries)
		}
	}
	return s, nil
}

// Start starts the hosted MCP servers. They run until the returned
// function is called, after the worker has drained.
func (s *Servers) Start(ctx context.Context) (stop func()) {
	if s == nil {
		return func() {}
	}
	s.cfg.SetStatus(s.host.Status())
	// The servers outlive ctx: calls still running when it ends need them.
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); s.host.Run(hctx) }()
	return func() { cancel(); <-done }
}

// Await waits, up to StartWait, until every hosted MCP server has ended
// its first start, so that a ready worker hosts the tools of those that
// came up (a slower server's tools are hosted once it is up).
func (s *Servers) Await(ctx context.Context) {
	if s == nil {
		return
	}
	select {
	case <-s.host.Started():
	case <-time.After(StartWait):
		s.cfg.Log.WarnContext(ctx, "MCP servers still starting; their tools are hosted once they are up", "waited", StartWait.String())
	case <-ctx.Done():
	}
}

// Registered sends every later change of a tool list to r's catalog at
// once (nil: no longer; the worker registers them with the rest).
func (s *Servers) Registered(r *catalog.Registry) {
	if s != nil {
		s.catalog.Store(r)
	}
}

// onTools replaces the hosted tools of server (mcphost.Config.OnTools)
// and, once the worker is registered, updates the catalog: new and changed
// tools are added, tools the server no longer lists are removed.
func (s *Servers) onTools(server string, tools []tool.Tool) {
	hs := make([]*toolset.Hosted, 0, len(tools))
	for _, t := range tools {
		if _, taken := s.cfg.Set.Given(t.Name); taken {
			s.cfg.Log.Warn("MCP tool not hosted: a tool given to the worker has its name", "mcp_server", server, "tool", t.Name)
			continue
		}
		h, err := toolset.Host(t, s.cfg.Pool)
		if err != nil {
			s.cfg.Log.Warn("MCP tool not hosted", "mcp_server", server, "tool", t.Name, "error", err)
			continue
		}
		hs = append(hs, h)
	}
	removed := s.cfg.Set.ReplaceServer(server, hs)
	reg := s.catalog.Load()
	if reg == nil {
		return // the worker registers them with the rest
	}
	ctx, cancel := s.cfg.OpCtx()
	defer cancel()
	for _, h := range hs {
		if err := reg.CheckPool(ctx, h.Name); err != nil {
			s.cfg.Log.Warn("MCP tool not registered", "tool", h.Name, "error", err)
			continue
		}
		if err := reg.Update(ctx, h, true); err != nil {
			s.cfg.Log.Warn("MCP tool not registered", "tool", h.Name, "error", err)
		}
	}
	for _, h := range removed {
		if err := reg.Update(ctx, h, false); err != nil {
			s.cfg.Log.Warn("cannot remove MCP tool from the catalog", "tool", h.Name, "error", err)
		}
	}
}

// Hosts reports whether any server is hosted.
func (s *Servers) Hosts() bool { return s != nil && len(s.defs) > 0 }

// Unavailable returns the not_available message of a call for a tool that
// is not hosted but would be by a hosted MCP server that is not up (it
// could not list its tools), else "".
func (s *Servers) Unavailable(name string) string {
	if s == nil {
		return ""
	}
	return s.host.Unavailable(name)
}

// SendTo returns nil unless name is a tool of a hosted url server whose
// secret_headers the call's secrets grant g may not send to the server's
// host (mcphost.Host.CheckSendTo): then the denial, such as
// "SECRET_DESTINATION: this secret may not be sent to <host>", checked
// before anything of the call is sent to the server. The server's
// connection, shared by every personality, carries the secrets the
// operator's definition binds to that host; a call through it is one more
// request that sends them, so it is held to the calling personality's
// secrets.send_to as http_request's auth_secret is.
func (s *Servers) SendTo(name string, g *capability.Grant) error {
	if s == nil || !strings.HasPrefix(name, "mcp__") {
		return nil
	}
	return s.host.CheckSendTo(name, g.Secrets)
}

// Validate checks the hosted MCP servers that personality p lists against
// it, as registration-time validation checks a tool: each server stands
// for all of its tools (named mcp__<server>__* in the problems).
func (s *Servers) Validate(p *capability.Personality) []capability.ValidationError {
	if s == nil {
		return nil
	}
	var out []capability.ValidationError
	for _, d := range s.defs {
		if !slices.Contains(p.MCPServers, d.Name) {
			continue
		}
		out = append(out, capability.ValidateTool(&tool.Tool{Name: "mcp__" + d.Name + "__*", Capabilities: d.Capabilities()}, p)...)
	}
	return out
}
