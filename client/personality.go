package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// Problem is one problem with a personality document: a parse problem (Key
// set) or a validation error against a catalog tool (Tool and Capability set).
type Problem struct {
	Key        string `json:"key,omitempty"`
	Tool       string `json:"tool,omitempty"`
	Capability string `json:"capability,omitempty"`
	Message    string `json:"message"`
}

// String formats the problem for a terminal.
func (p Problem) String() string {
	if p.Tool != "" {
		return fmt.Sprintf("tool %s, %s: %s", p.Tool, p.Capability, p.Message)
	}
	return p.Message // parse problems name their key already
}

// ErrInvalidPersonality is returned by PutPersonality for a document with problems.
var ErrInvalidPersonality = errors.New("invalid personality")

// ErrUnknownPersonality is returned when no personality has the id.
//
//lint:ignore ST1005 the refusal text of capabilities.md
var ErrUnknownPersonality = errors.New("Unknown personality")

// ValidatePersonality parses doc (YAML or JSON) and checks it against every
// tool in the catalog, as a worker does at start: it returns the personality's
// id and every problem at once. ${HOME} is this process's home directory.
func (c *Client) ValidatePersonality(ctx context.Context, doc []byte) (id string, problems []Problem, err error) {
	home, _ := os.UserHomeDir()
	p, err := capability.Parse(doc, capability.Env{Home: home})
	if err != nil {
		var de *capability.DocumentError
		if !errors.As(err, &de) {
			return "", nil, err
		}
		for _, pr := range de.Problems {
			problems = append(problems, Problem{Key: pr.Key, Message: pr.Message})
		}
		return "", problems, nil
	}
	tools, err := c.catalogTools(ctx)
	if err != nil {
		return "", nil, err
	}
	for _, ve := range capability.Validate(tools, p) {
		problems = append(problems, Problem{Tool: ve.Tool, Capability: ve.Capability, Message: ve.Message})
	}
	return p.ID, problems, nil
}

// PutPersonality validates doc and stores it under its id; a document with
// problems is refused with all of them (ErrInvalidPersonality).
func (c *Client) PutPersonality(ctx context.Context, doc []byte) (id string, problems []Problem, err error) {
	id, problems, err = c.ValidatePersonality(ctx, doc)
	if err != nil {
		return "", nil, err
	}
	if len(problems) > 0 {
		return id, problems, ErrInvalidPersonality
	}
	kv, err := c.conn.KV(ctx, bus.Personalities)
	if err != nil {
		return "", nil, err
	}
	if _, err := kv.Put(ctx, id, doc); err != nil {
		return "", nil, err
	}
	return id, nil, nil
}

// Personality returns the stored document of a personality. It reads the one
// key with a direct get naming it, so a tenant whose NATS user may read only
// its own personality's document can read that.
func (c *Client) Personality(ctx context.Context, id string) ([]byte, error) {
	if !capability.ValidID(id) {
		return nil, fmt.Errorf("%w: %s", ErrUnknownPersonality, id)
	}
	e, found, err := c.conn.ReadKey(ctx, bus.Personalities, id)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("%w: %s", ErrUnknownPersonality, id)
	}
	return e.Value, nil
}

// Personalities lists the stored personality ids, sorted.
func (c *Client) Personalities(ctx context.Context) ([]string, error) {
	kv, err := c.conn.KV(ctx, bus.Personalities)
	if err != nil {
		return nil, err
	}
	ids, err := kv.Keys(ctx)
	if err != nil {
		return nil, err
	}
	slices.Sort(ids)
	return ids, nil
}

// DeletePersonality removes a personality; calls naming it are then refused
// with "Unknown personality".
func (c *Client) DeletePersonality(ctx context.Context, id string) error {
	if _, err := c.Personality(ctx, id); err != nil {
		return err
	}
	kv, err := c.conn.KV(ctx, bus.Personalities)
	if err != nil {
		return err
	}
	return kv.Delete(ctx, id)
}

// ToolsFor returns the catalog as the LLM of personality id sees it: the
// tools that pass the toolset, MCP-server, plugin and permission gates and
// whose declarations validate against the personality.
func (c *Client) ToolsFor(ctx context.Context, id string) ([]CatalogEntry, error) {
	doc, err := c.Personality(ctx, id)
	if err != nil {
		return nil, err
	}
	home, _ := os.UserHomeDir()
	p, err := capability.Parse(doc, capability.Env{Home: home})
	if err != nil {
		return nil, fmt.Errorf("personality %s is invalid: %w", id, err)
	}
	entries, err := c.Tools(ctx)
	if err != nil {
		return nil, err
	}
	var out []CatalogEntry
	for _, e := range entries {
		t, err := CatalogTool(e)
		if err != nil {
			continue
		}
		if capability.ToolsetGate(t, p, nil) != nil || capability.PermissionGate(t, p) != nil || len(capability.ValidateTool(t, p)) > 0 {
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

func (c *Client) catalogTools(ctx context.Context) ([]*tool.Tool, error) {
	entries, err := c.Tools(ctx)
	if err != nil {
		return nil, err
	}
	tools := make([]*tool.Tool, 0, len(entries))
	for _, e := range entries {
		t, err := CatalogTool(e)
		if err != nil {
			return nil, err
		}
		tools = append(tools, t)
	}
	return tools, nil
}

// CatalogTool rebuilds the declaration of a catalog entry, as the worker
// that registered it declared the tool (no Execute, no availability check):
// what ValidatePersonality, ToolsFor and "dispatcher explain" check a
// personality against. Capabilities that do not decode are an error naming
// the entry.
func CatalogTool(e CatalogEntry) (*tool.Tool, error) {
	t := &tool.Tool{Name: e.Name, Description: e.Description, Schema: e.Schema, Toolset: e.Toolset,
		Permissions: e.Permissions, OutputIsUntrusted: e.OutputIsUntrusted, AlwaysInclude: e.AlwaysInclude,
		MaxResultChars: e.MaxResultChars, Plugin: e.Plugin}
	if len(e.Capabilities) > 0 {
		if err := json.Unmarshal(e.Capabilities, &t.Capabilities); err != nil {
			return nil, fmt.Errorf("catalog entry %s: capabilities: %w", e.Name, err)
		}
	}
	return t, nil
}
