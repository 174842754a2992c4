// Package tool is the public contract for tool authors: a Tool is a declaration
// a reviewer can read without opening the function, plus the function itself.
// A tool reaches the network, files, secrets, processes and storage only through
// the scoped accessors in its Context, which the worker builds from the
// intersection of the tool's Capabilities and the call's personality.
package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
)

// Tool is one tool: its declaration and its Execute function.
type Tool struct {
	// Name is snake_case (^[a-z][a-z0-9_]*$) or mcp__<server>__<tool>.
	Name string
	// Description is shown to the LLM.
	Description string
	// Schema is the JSON Schema of the arguments (an object schema). Empty means
	// any object.
	Schema json.RawMessage
	// Toolset is the tool's group label (e.g. "file", "web"); a personality's
	// toolset may list tool names or labels.
	Toolset string
	// MaxResultChars caps the result value (Unicode code points); 0 means no cap
	// beyond the call's budget.
	MaxResultChars int
	// Capabilities lists every external surface the tool touches. The zero
	// value means it touches nothing and gets no accessor.
	Capabilities Capabilities
	// Permissions must each be granted by the personality ("ns:*" grants a namespace).
	Permissions []string
	// OutputIsUntrusted wraps ok results in <untrusted> and strips chat-template tokens.
	OutputIsUntrusted bool
	// AlwaysInclude bypasses the personality's toolset gate (and no other gate).
	AlwaysInclude bool
	// Plugin names the plugin that registered the tool; "" for built-in and
	// compiled-in tools. Plugin tools are filtered by the personality's plugins list.
	Plugin string
	// SideEffects says whether two runs of one call may overlap; empty is
	// SideEffectsExclusive, the safe default (see SideEffects).
	SideEffects SideEffects
	// Available, when set, is asked before every call; false refuses the call
	// with not_available.
	Available func(ctx context.Context, c *Context) bool
	// Execute runs the call. args has already been validated against Schema.
	// A returned error, or a panic, becomes an execution_failed result with the
	// error's message. Cancellation and timeouts arrive through ctx.
	Execute func(ctx context.Context, args json.RawMessage, c *Context) (Result, error)
}

var (
	nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	mcpRE  = regexp.MustCompile(`^mcp__([A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*)__([A-Za-z0-9_-]+)$`)
)

// MCPServer returns the server of a tool named mcp__<server>__<tool>.
func MCPServer(name string) (server string, ok bool) {
	m := mcpRE.FindStringSubmatch(name)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// Validate checks the declaration: name, schema shape and capabilities. It
// does not check the declaration against a personality.
func (t *Tool) Validate() error {
	if !nameRE.MatchString(t.Name) {
		if _, ok := MCPServer(t.Name); !ok {
			return fmt.Errorf("tool name %q must be snake_case (^[a-z][a-z0-9_]*$) or mcp__<server>__<tool>", t.Name)
		}
	}
	if len(t.Name) > 128 {
		return fmt.Errorf("tool name %q is longer than 128 characters", t.Name)
	}
	if t.Execute == nil {
		return fmt.Errorf("tool %s: Execute is nil", t.Name)
	}
	if len(t.Schema) > 0 {
		var m map[string]any
		if err := json.Unmarshal(t.Schema, &m); err != nil {
			return fmt.Errorf("tool %s: schema must be a JSON object: %w", t.Name, err)
		}
	}
	if t.MaxResultChars < 0 {
		return fmt.Errorf("tool %s: max_result_chars must not be negative", t.Name)
	}
	if err := t.Capabilities.Validate(); err != nil {
		return fmt.Errorf("tool %s: %w", t.Name, err)
	}
	if err := t.SideEffects.Validate(); err != nil {
		return fmt.Errorf("tool %s: %w", t.Name, err)
	}
	return nil
}
