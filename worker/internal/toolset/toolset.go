// Package toolset is what a worker hosts: the tools given to it, and those
// of hosted MCP servers, which come and go with their servers' tool lists.
// Each is held with its compiled argument schema and its catalog entry.
package toolset

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/capstanhq/capstan/internal/argschema"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
)

// Hosted is a tool a worker hosts.
type Hosted struct {
	tool.Tool
	// Schema is the tool's compiled argument schema.
	Schema *argschema.Schema
	// Entry is the tool's catalog entry (without its workers).
	Entry protocol.CatalogEntry
}

// Host compiles t's schema and builds its catalog entry for pool.
func Host(t tool.Tool, pool string) (*Hosted, error) {
	schema, err := argschema.Compile(t.Name, t.Schema)
	if err != nil {
		return nil, err
	}
	h := &Hosted{Tool: t, Schema: schema}
	if h.Entry, err = Entry(t, pool); err != nil {
		return nil, err
	}
	return h, nil
}

// Entry is t's catalog entry as a worker of pool publishes it.
func Entry(t tool.Tool, pool string) (protocol.CatalogEntry, error) {
	caps, err := json.Marshal(t.Capabilities)
	if err != nil {
		return protocol.CatalogEntry{}, fmt.Errorf("tool %s: encode capabilities: %w", t.Name, err)
	}
	schema := t.Schema
	if len(schema) == 0 {
		schema = json.RawMessage(`{"type":"object"}`)
	}
	perms := t.Permissions
	if perms == nil {
		perms = []string{}
	}
	return protocol.CatalogEntry{
		Name: t.Name, Description: t.Description, Schema: schema, Toolset: t.Toolset, Capabilities: caps,
		Permissions: perms, OutputIsUntrusted: t.OutputIsUntrusted, AlwaysInclude: t.AlwaysInclude,
		MaxResultChars: t.MaxResultChars, Plugin: t.Plugin, SideEffects: string(t.SideEffects.Effective()), Pool: pool,
	}, nil
}

// Set is the tools a worker hosts. Given tools are added before the worker
// runs (Add); MCP tools are replaced per server at any time
// (ReplaceServer) once EnableServers was called. Lookup and All are safe
// for concurrent use.
type Set struct {
	given map[string]*Hosted
	order []*Hosted

	mu       sync.RWMutex
	byName   map[string]*Hosted
	byServer map[string][]string
}

// Add adds a tool given to the worker; a name added before is an error.
func (s *Set) Add(h *Hosted) error {
	if _, dup := s.given[h.Name]; dup {
		return fmt.Errorf("tool %s is given twice", h.Name)
	}
	if s.given == nil {
		s.given = make(map[string]*Hosted)
	}
	s.given[h.Name] = h
	s.order = append(s.order, h)
	return nil
}

// Given returns the tool given to the worker called name.
func (s *Set) Given(name string) (*Hosted, bool) {
	h, ok := s.given[name]
	return h, ok
}

// Order returns the tools given to the worker, in the order given.
func (s *Set) Order() []*Hosted { return s.order }

// EnableServers makes room for the tools of hosted MCP servers.
func (s *Set) EnableServers() {
	s.byName = make(map[string]*Hosted)
	s.byServer = make(map[string][]string)
}

// Lookup returns the hosted tool named name: one given to the worker, or
// one hosted from an MCP server.
func (s *Set) Lookup(name string) (*Hosted, bool) {
	if h, ok := s.given[name]; ok {
		return h, true
	}
	if !strings.HasPrefix(name, "mcp__") || s.byName == nil {
		return nil, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, ok := s.byName[name]
	return h, ok
}

// All returns every hosted tool: the given ones in the order given, then
// those of MCP servers by name.
func (s *Set) All() []*Hosted {
	if s.byName == nil {
		return s.order
	}
	s.mu.RLock()
	mcp := slices.Collect(maps.Values(s.byName))
	s.mu.RUnlock()
	slices.SortFunc(mcp, func(a, b *Hosted) int { return strings.Compare(a.Name, b.Name) })
	return slices.Concat(s.order, mcp)
}

// ReplaceServer makes hs the tools of MCP server, and returns those it
// hosted before that it no longer lists.
func (s *Set) ReplaceServer(server string, hs []*Hosted) (removed []*Hosted) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range s.byServer[server] {
		if !slices.ContainsFunc(hs, func(h *Hosted) bool { return h.Name == name }) {
			removed = append(removed, s.byName[name])
		}
		delete(s.byName, name)
	}
	names := make([]string, len(hs))
	for i, h := range hs {
		s.byName[h.Name] = h
		names[i] = h.Name
	}
	s.byServer[server] = names
	return removed
}
