package frontdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/capability"
)

// catalogSettle is how long the tool-list loop waits after a catalog change
// before it recomputes the list: a starting worker writes its tools one by
// one, and one recomputation (one tools/list_changed) for all is enough.
const catalogSettle = 100 * time.Millisecond

// personalityServer is the MCP server of one personality: its tools are the
// catalog entries the personality may call, kept current by
// keepToolsCurrent.
type personalityServer struct {
	front *Server
	id    string
	c     *client.Client // acting under id
	mcp   *mcp.Server
	log   *slog.Logger

	// selfApproval is the personality's approval.self, read with the tool
	// list: whether its sessions are asked to decide their held calls
	// (elicitation.go).
	selfApproval atomic.Bool

	mu sync.Mutex
	// listed maps each listed tool to the description and schema it was
	// listed with, so that an unchanged catalog entry is not re-added.
	listed map[string]listing
}

// listing is what an MCP client sees of a tool.
type listing struct {
	description string
	schema      string // compacted JSON
}

// newPersonalityServer builds the MCP server of personality id and lists its
// tools. An unknown personality is an error wrapping
// client.ErrUnknownPersonality.
func newPersonalityServer(ctx context.Context, front *Server, id string) (*personalityServer, error) {
	view, err := front.cfg.Client.WithPersonality(id)
	if err != nil {
		return nil, fmt.Errorf("frontdoor: %w", err)
	}
	p := &personalityServer{front: front, id: id, c: view, log: front.cfg.Logger.With("personality", id), listed: make(map[string]listing)}
	p.mcp = mcp.NewServer(front.implementation(), &mcp.ServerOptions{
		Instructions: "Tools of a Capstan worker pool, as personality " + id + " may call them. " +
			"Every call runs under that personality's capability policy on the pool's workers.",
		Logger: front.cfg.Logger,
		// Tools only, with tools/list_changed: the list follows the catalog.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	entries, err := view.ToolsFor(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("frontdoor: personality %s: %w", id, err)
	}
	p.apply(entries)
	p.readSelfApproval(ctx)
	return p, nil
}

// keepToolsCurrent recomputes the tool list at every catalog change (after
// catalogSettle) and every Config.Refresh, until ctx ends. The SDK sends
// notifications/tools/list_changed to the connected sessions when the list
// changes.
func (p *personalityServer) keepToolsCurrent(ctx context.Context) {
	refresh := time.NewTicker(p.front.cfg.Refresh)
	defer refresh.Stop()
	for {
		changed := p.c.CatalogChanged()
		select {
		case <-ctx.Done():
			return
		case <-refresh.C:
		case <-changed:
			settle := time.NewTimer(catalogSettle)
			select {
			case <-ctx.Done():
				settle.Stop()
				return
			case <-settle.C:
			}
		}
		p.refresh(ctx)
	}
}

// refresh recomputes the tool list. A personality that no longer exists
// lists nothing; any other error keeps the current list.
func (p *personalityServer) refresh(ctx context.Context) {
	entries, err := p.c.ToolsFor(ctx, p.id)
	switch {
	case errors.Is(err, client.ErrUnknownPersonality):
		p.log.WarnContext(ctx, "personality no longer exists: its MCP sessions list no tools", "error", err)
		entries = nil
	case err != nil:
		if ctx.Err() == nil {
			p.log.WarnContext(ctx, "tool list not refreshed", "error", err)
		}
		return
	}
	p.apply(entries)
	p.readSelfApproval(ctx)
}

// readSelfApproval reads the personality's approval.self. A personality
// that does not exist or does not parse asks nothing; any other error
// keeps the value read before.
func (p *personalityServer) readSelfApproval(ctx context.Context) {
	doc, err := p.c.Personality(ctx, p.id)
	if errors.Is(err, client.ErrUnknownPersonality) {
		p.selfApproval.Store(false)
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			p.log.WarnContext(ctx, "approval.self not read; keeping the value read before", "error", err)
		}
		return
	}
	home, _ := os.UserHomeDir()
	pers, err := capability.Parse(doc, capability.Env{Home: home})
	if err != nil {
		p.log.WarnContext(ctx, "personality does not parse: its sessions are not asked to decide held calls", "error", err)
		p.selfApproval.Store(false)
		return
	}
	p.selfApproval.Store(pers.Approval != nil && pers.Approval.Self)
}

// apply makes the listed tools exactly entries: new and changed ones are
// (re)added, others removed. A tool whose schema the SDK cannot serve is
// left out and logged.
func (p *personalityServer) apply(entries []client.CatalogEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	want := make(map[string]bool, len(entries))
	for _, e := range entries {
		want[e.Name] = true
		l, schema, err := toListing(e)
		if err == nil && p.listed[e.Name] == l {
			continue
		}
		if err == nil {
			err = p.addTool(e.Name, e.Description, schema)
		}
		if err != nil {
			p.log.Warn("tool left out of the MCP tool list", "tool", e.Name, "error", err)
			want[e.Name] = false
			continue
		}
		p.listed[e.Name] = l
	}
	var gone []string
	for name := range p.listed {
		if !want[name] {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		p.mcp.RemoveTools(gone...)
		for _, name := range gone {
			delete(p.listed, name)
		}
	}
}

// toListing checks e's input schema (MCP requires a JSON object schema of
// type "object"; a catalog entry without one gets {"type":"object"}) and
// returns its listing and compacted schema.
func toListing(e client.CatalogEntry) (listing, json.RawMessage, error) {
	raw := bytes.TrimSpace(e.Schema)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte(`{"type":"object"}`)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return listing{}, nil, errors.New("its input schema is not a JSON object")
	}
	var typ string
	if err := json.Unmarshal(obj["type"], &typ); err != nil || typ != "object" {
		return listing{}, nil, errors.New(`its input schema is not of type "object", as MCP requires`)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return listing{}, nil, fmt.Errorf("its input schema: %w", err)
	}
	return listing{description: e.Description, schema: buf.String()}, json.RawMessage(buf.Bytes()), nil
}

// addTool adds (or replaces) one tool. The SDK panics on a schema it
// refuses; that is a property of a catalog entry, not a programming error
// here, so it becomes an error.
func (p *personalityServer) addTool(name, description string, schema json.RawMessage) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the MCP SDK refused it: %v", r)
		}
	}()
	p.mcp.AddTool(&mcp.Tool{Name: name, Description: description, InputSchema: schema}, p.callTool)
	return nil
}
