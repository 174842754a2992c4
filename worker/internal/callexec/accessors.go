package callexec

import (
	"fmt"
	"slices"
	"sync"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/pipeline"
	"github.com/capstanhq/capstan/tool"
)

// denials records the capability denials raised while a call runs, by
// code only (never the detail, which may hold argument values), for the
// audit record.
type denials struct {
	mu    sync.Mutex
	codes []string
	// onAdd, when set, is told every code as it is added (tracing, metrics).
	onAdd func(code string)
}

func (d *denials) add(err error) {
	code, ok := tool.DenialCode(err)
	if !ok {
		return
	}
	d.mu.Lock()
	d.codes = append(d.codes, code)
	d.mu.Unlock()
	if d.onAdd != nil {
		d.onAdd(code)
	}
}

func (d *denials) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.codes)
}

// attach gives the tool exactly the accessors its resolved grant allows
// (pipeline.Attach).
func (s *Services) attach(tc *tool.Context, g *capability.Grant, rec *denials) {
	pipeline.Attach(tc, g, s.backends, rec.add)
}

// isInfra reports whether a tool's error is an infrastructure fault that
// must lead to redelivery rather than an answer.
func isInfra(err error) bool { return pipeline.IsInfra(err) }

// processNetworkRefused returns the refusal of a call whose process grant
// includes network on a machine that allows no network namespace for its
// children, unless CAPSTAN_PROCESS_NETWORK=unconfined (security.md
// section 1): "" when the call may run.
func (s *Services) processNetworkRefused(g *capability.Grant) string {
	if g.Process == nil || g.Network.Empty() {
		return ""
	}
	return s.networkRefused()
}

// missingBackend returns the fail-closed refusal when the tool declares a
// capability whose backend is not configured, naming the backend.
func (s *Services) missingBackend(t *tool.Tool) string {
	if len(t.Capabilities.Secrets) == 0 || s.secrets != nil {
		return ""
	}
	const sentence = "Tool %s declares capabilities but no capability backends are configured: "
	return fmt.Sprintf(sentence+"secrets backend (CAPSTAN_SECRETS_BACKEND=%s)", t.Name, s.cfg.SecretsBackend)
}
