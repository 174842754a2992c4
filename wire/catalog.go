package wire

import (
	"encoding/json"
	"time"
)

// CatalogEntry is a hosted tool's definition in the tools bucket
// (<p>_tools), keyed by its name; workers write it when they start and keep
// Workers current.
type CatalogEntry struct {
	// Name is the tool's name.
	Name string `json:"name"`
	// Description is shown to the LLM.
	Description string `json:"description"`
	// Schema is the JSON Schema of the arguments; {} or absent means any object.
	Schema json.RawMessage `json:"schema"`
	// Toolset is the tool's group label ("file", "web", ...).
	Toolset string `json:"toolset"`
	// Capabilities is the tool's capability declaration as JSON
	// (docs/capabilities.md): every external surface it touches.
	Capabilities json.RawMessage `json:"capabilities"`
	// Permissions lists what the personality must grant.
	Permissions []string `json:"permissions"`
	// OutputIsUntrusted says ok results come wrapped in <untrusted>.
	OutputIsUntrusted bool `json:"output_is_untrusted"`
	// AlwaysInclude says the tool bypasses the personality's toolset gate.
	AlwaysInclude bool `json:"always_include"`
	// MaxResultChars caps the result value in code points; 0 means only the
	// call's budget.
	MaxResultChars int `json:"max_result_chars"`
	// Plugin names the plugin that registered the tool; empty for built-in
	// and compiled-in tools.
	Plugin string `json:"plugin,omitempty"`
	// SideEffects is what running one call twice would do: "none",
	// "idempotent" or "exclusive" (only exclusive calls run under a
	// lease; docs/capabilities.md, "Side effects"). Absent from entries
	// written by workers before the field existed: read it as exclusive.
	SideEffects string `json:"side_effects,omitempty"`
	// Pool is the pool whose workers host the tool.
	Pool string `json:"pool"`
	// Workers lists the ids of the workers hosting the tool.
	Workers []string `json:"workers"`
	// Updated is when the entry was last written.
	Updated time.Time `json:"updated"`
}
