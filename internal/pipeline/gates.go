package pipeline

import (
	"strings"

	"github.com/capstanhq/capstan/internal/argschema"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/wire"
)

// Surface runs gates 4 and 5 of docs/capabilities.md: the personality's
// toolset, MCP-server and plugin filters (and the call's narrow_tools),
// then the tool's permissions. It returns the first refusal, or nil.
func Surface(t *tool.Tool, p *capability.Personality, call *wire.Call) *capability.Refusal {
	if ref := capability.ToolsetGate(t, p, call.NarrowTools); ref != nil {
		return ref
	}
	return capability.PermissionGate(t, p)
}

// Arguments runs gate 8 (the arguments against the tool's schema) and the
// first step of gate 9 (the tool's declaration validated against the
// personality). It returns the first refusal, or nil.
func Arguments(t *tool.Tool, schema *argschema.Schema, p *capability.Personality, call *wire.Call) *capability.Refusal {
	if err := schema.Validate(call.Args); err != nil {
		return &capability.Refusal{Decision: protocol.DecisionSchema, Code: tool.CodeInputInvalid, Message: err.Error()}
	}
	if errs := capability.ValidateTool(t, p); len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Message
		}
		return &capability.Refusal{Decision: protocol.DecisionCapability, Code: tool.CodeNotAvailable, Message: strings.Join(msgs, "; ")}
	}
	return nil
}

// Resolve resolves the tool's capabilities for the call under p (the rest
// of gate 9, failing closed): the grant, or the refusal.
func Resolve(t *tool.Tool, p *capability.Personality, call *wire.Call) (*capability.Grant, *capability.Refusal) {
	grant, err := capability.Resolve(t, p, capability.CallView{Tool: call.Tool, SessionID: call.SessionID, PersonalityID: call.PersonalityID, WorkingDir: call.WorkingDir})
	if err != nil {
		return nil, &capability.Refusal{Decision: protocol.DecisionCapability, Code: tool.CodeNotAvailable, Message: err.Error()}
	}
	return grant, nil
}
