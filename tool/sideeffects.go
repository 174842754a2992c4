package tool

import "fmt"

// SideEffects says what running one call of a tool twice would do, which
// decides whether the worker must make sure that two runs of a call never
// overlap. A call can run twice: a worker that stalls past the ack wait has
// its call redelivered to another worker while the first may still be
// running, and a caller may submit the same call_id again after the
// deduplication window. Either way exactly one result is stored per call
// (the results stream refuses a second one); SideEffects is about what the
// tool did meanwhile. docs/capabilities.md, "Side effects".
type SideEffects string

const (
	// SideEffectsNone: the tool changes nothing outside its result (echo,
	// read_file, fetch_url). Two runs of a call are harmless, so the worker
	// takes no lease for it.
	SideEffectsNone SideEffects = "none"
	// SideEffectsIdempotent: the tool changes things, but a second run of
	// the same call, even overlapping the first, leaves the same state
	// (kv_set of the same value, a PUT of the same body). No lease.
	SideEffectsIdempotent SideEffects = "idempotent"
	// SideEffectsExclusive: two runs of a call must never overlap (writing
	// or patching a file, running a process, an arbitrary HTTP request).
	// The worker holds a fenced lease on the call while it runs, so a
	// redelivery elsewhere waits for it. The default: a tool that declares
	// nothing is exclusive.
	SideEffectsExclusive SideEffects = "exclusive"
)

// Effective returns s, or SideEffectsExclusive when s is empty.
func (s SideEffects) Effective() SideEffects {
	if s == "" {
		return SideEffectsExclusive
	}
	return s
}

// NeedsLease reports whether calls of a tool with these side effects run
// under a fenced lease: only exclusive ones (and undeclared ones) do.
func (s SideEffects) NeedsLease() bool { return s.Effective() == SideEffectsExclusive }

// Validate reports an unknown value.
func (s SideEffects) Validate() error {
	switch s {
	case "", SideEffectsNone, SideEffectsIdempotent, SideEffectsExclusive:
		return nil
	}
	return fmt.Errorf("side effects %q must be none, idempotent or exclusive", string(s))
}
