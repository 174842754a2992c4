package worker

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/argschema"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/mcphost"
	"github.com/capstanhq/capstan/tool"
)

// mcpStartWait bounds how long Run waits, before the worker is ready, for
// every hosted MCP server's first start (a server slower than that is
// hosted as soon as it is up).
const mcpStartWait = 30 * time.Second

// mcpTools are the tools hosted from MCP servers: unlike the built-in set,
// they come and go with their servers' tool lists.
type mcpTools struct {
	defs []*mcphost.Definition // CAPSTAN_MCP_SERVERS_DIR, by name; nil without it
	host *mcphost.Host         // nil without definitions

	mu       sync.RWMutex
	byName   map[string]*hosted
	byServer map[string][]string
	// registered is set once Run has registered the worker: from then on
	// a changed tool list goes to the catalog at once.
	registered atomic.Bool
}

// loadMCP reads the MCP server definitions of MCPServersDir and builds
// their host (New): an invalid file stops the worker, naming it and every
// problem; so does a definition that uses secrets without a backend.
func (w *Worker) loadMCP() error {
	if w.cfg.MCPServersDir == "" {
		return nil
	}
	defs, err := mcphost.LoadDir(w.cfg.MCPServersDir, w.cfg.CallTimeout)
	if err != nil {
		return err
	}
	if len(defs) == 0 {
		w.log.Warn("CAPSTAN_MCP_SERVERS_DIR holds no MCP server definition", "dir", w.cfg.MCPServersDir)
		return nil
	}
	h, err := mcphost.New(mcphost.Config{
		Secrets: w.secrets, Process: w.procCfg, Resolver: w.resolver, Logger: w.log,
		TracerProvider: w.cfg.TracerProvider, WrapTransport: w.obs.HTTPTransport,
		AllowPrivateURLs: w.cfg.mcpPrivateURLs,
		OnTools:          w.onMCPTools,
		OnStatus:         func(st map[string]mcphost.Status) { w.SetReadyDetail("mcp_servers", st) },
	}, defs)
	if err != nil {
		return err
	}
	w.mcp.defs, w.mcp.host = defs, h
	w.mcp.byName = make(map[string]*hosted)
	w.mcp.byServer = make(map[string][]string)
	for _, d := range defs {
		// Bare names on the trusted PATH are resolved once, at start.
		if p := d.Capabilities().Process; p != nil {
			w.resolveNames(p.AllowedBinaries)
		}
	}
	return nil
}

// startMCP starts the hosted MCP servers (Run). They run until the
// returned function is called, after the worker has drained.
func (w *Worker) startMCP(ctx context.Context) (stop func()) {
	h := w.mcp.host
	if h == nil {
		return func() {}
	}
	w.SetReadyDetail("mcp_servers", h.Status())
	// The servers outlive ctx: calls still running when it ends need them.
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); h.Run(hctx) }()
	return func() { cancel(); <-done }
}

// awaitMCP waits, up to mcpStartWait, until every hosted MCP server has
// ended its first start, so that a ready worker hosts the tools of those
// that came up (a slower server's tools are hosted once it is up).
func (w *Worker) awaitMCP(ctx context.Context) {
	if w.mcp.host == nil {
		return
	}
	select {
	case <-w.mcp.host.Started():
	case <-time.After(mcpStartWait):
		w.log.WarnContext(ctx, "MCP servers still starting; their tools are hosted once they are up", "waited", mcpStartWait.String())
	case <-ctx.Done():
	}
}

// onMCPTools replaces the hosted tools of server (mcphost.Config.OnTools)
// and, once the worker is registered, updates the catalog: new and changed
// tools are added, tools the server no longer lists are removed.
func (w *Worker) onMCPTools(server string, tools []tool.Tool) {
	hs := make([]*hosted, 0, len(tools))
	for _, t := range tools {
		if _, taken := w.tools[t.Name]; taken {
			w.log.Warn("MCP tool not hosted: a tool given to the worker has its name", "mcp_server", server, "tool", t.Name)
			continue
		}
		schema, err := argschema.Compile(t.Name, t.Schema)
		if err == nil {
			h := &hosted{Tool: t, schema: schema}
			if h.entry, err = catalogEntry(t, w.cfg.Pool); err == nil {
				hs = append(hs, h)
				continue
			}
		}
		w.log.Warn("MCP tool not hosted", "mcp_server", server, "tool", t.Name, "error", err)
	}
	w.mcp.mu.Lock()
	var removed []*hosted
	for _, name := range w.mcp.byServer[server] {
		if !slices.ContainsFunc(hs, func(h *hosted) bool { return h.Name == name }) {
			removed = append(removed, w.mcp.byName[name])
		}
		delete(w.mcp.byName, name)
	}
	names := make([]string, len(hs))
	for i, h := range hs {
		w.mcp.byName[h.Name] = h
		names[i] = h.Name
	}
	w.mcp.byServer[server] = names
	w.mcp.mu.Unlock()
	if !w.mcp.registered.Load() {
		return // Run registers them with the rest
	}
	ctx, cancel := w.opCtx()
	defer cancel()
	for _, h := range hs {
		if err := w.checkPool(ctx, h.Name); err != nil {
			w.log.Warn("MCP tool not registered", "tool", h.Name, "error", err)
			continue
		}
		if err := w.updateCatalog(ctx, h, true); err != nil {
			w.log.Warn("MCP tool not registered", "tool", h.Name, "error", err)
		}
	}
	for _, h := range removed {
		if err := w.updateCatalog(ctx, h, false); err != nil {
			w.log.Warn("cannot remove MCP tool from the catalog", "tool", h.Name, "error", err)
		}
	}
}

// lookup returns the hosted tool named name: one given to New, or one
// hosted from an MCP server.
func (w *Worker) lookup(name string) (*hosted, bool) {
	if h, ok := w.tools[name]; ok {
		return h, true
	}
	if !strings.HasPrefix(name, "mcp__") || w.mcp.byName == nil {
		return nil, false
	}
	w.mcp.mu.RLock()
	defer w.mcp.mu.RUnlock()
	h, ok := w.mcp.byName[name]
	return h, ok
}

// hostedTools returns every hosted tool: the built-in ones in the order
// given to New, then those of MCP servers by name.
func (w *Worker) hostedTools() []*hosted {
	if w.mcp.byName == nil {
		return w.order
	}
	w.mcp.mu.RLock()
	mcp := slices.Collect(maps.Values(w.mcp.byName))
	w.mcp.mu.RUnlock()
	slices.SortFunc(mcp, func(a, b *hosted) int { return strings.Compare(a.Name, b.Name) })
	return slices.Concat(w.order, mcp)
}

// mcpUnavailable returns the not_available message of a call for a tool
// that is not hosted but would be by a hosted MCP server that is not up
// (it could not list its tools), else "".
func (w *Worker) mcpUnavailable(name string) string {
	if w.mcp.host == nil {
		return ""
	}
	return w.mcp.host.Unavailable(name)
}

// mcpSendTo returns nil unless name is a tool of a hosted url server whose
// secret_headers the call's secrets grant g may not send to the server's
// host (mcphost.Host.CheckSendTo): then the denial, such as
// "SECRET_DESTINATION: this secret may not be sent to <host>", checked
// before anything of the call is sent to the server. The server's
// connection, shared by every personality, carries the secrets the
// operator's definition binds to that host; a call through it is one more
// request that sends them, so it is held to the calling personality's
// secrets.send_to as http_request's auth_secret is.
func (w *Worker) mcpSendTo(name string, g *capability.Grant) error {
	if w.mcp.host == nil || !strings.HasPrefix(name, "mcp__") {
		return nil
	}
	return w.mcp.host.CheckSendTo(name, g.Secrets)
}

// validateMCP checks the hosted MCP servers that personality p lists
// against it, as registration-time validation checks a tool: each server
// stands for all of its tools (named mcp__<server>__* in the problems).
func (w *Worker) validateMCP(p *capability.Personality) []capability.ValidationError {
	var out []capability.ValidationError
	for _, d := range w.mcp.defs {
		if !slices.Contains(p.MCPServers, d.Name) {
			continue
		}
		out = append(out, capability.ValidateTool(&tool.Tool{Name: "mcp__" + d.Name + "__*", Capabilities: d.Capabilities()}, p)...)
	}
	return out
}
