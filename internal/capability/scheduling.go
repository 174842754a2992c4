package capability

import (
	"encoding/json"
	"math"
)

// Scheduling is a personality's scheduling section (docs/capabilities.md,
// "Scheduling"): how the pool picks which waiting call of this personality
// takes the next free slot. It is policy, so only the operator's document
// sets it; a call cannot raise its own share.
type Scheduling struct {
	// Priority is 1 (first) to 5 (last): a waiting call of a lower number
	// starts before any waiting call of a higher number.
	Priority int
	// Weight is 1 to 1000: among personalities of one priority that have
	// calls waiting, slots go in proportion to their weights.
	Weight int
	// MaxConcurrency caps the calls of the personality running at once in
	// the whole pool (counted across all workers); 0 is no cap. A call over
	// the cap waits, holding no slot.
	MaxConcurrency int
}

// Bounds and defaults of Scheduling.
const (
	// DefaultPriority is the priority of a personality that sets none.
	DefaultPriority = 3
	// MinPriority is the first priority: its calls start before all others.
	MinPriority = 1
	// MaxPriority is the last priority.
	MaxPriority = 5
	// DefaultWeight is the weight of a personality that sets none.
	DefaultWeight = 1
	// MinWeight is the smallest weight.
	MinWeight = 1
	// MaxWeight is the largest weight.
	MaxWeight = 1000
)

// DefaultScheduling returns the scheduling of a personality without a
// scheduling section: Scheduling{Priority: 3, Weight: 1, MaxConcurrency: 0}
// (no concurrency cap).
func DefaultScheduling() Scheduling {
	return Scheduling{Priority: DefaultPriority, Weight: DefaultWeight}
}

// WithDefaults returns s with a zero Priority or Weight set to its default,
// for a Personality built in code rather than by Parse (which always sets
// both). MaxConcurrency 0 already means no cap and is kept.
func (s Scheduling) WithDefaults() Scheduling {
	if s.Priority == 0 {
		s.Priority = DefaultPriority
	}
	if s.Weight == 0 {
		s.Weight = DefaultWeight
	}
	return s
}

// Capped reports whether s caps the calls running at once (MaxConcurrency > 0).
func (s Scheduling) Capped() bool { return s.MaxConcurrency > 0 }

// Messages of the scheduling section's problems, after "scheduling.<key>: ".
const (
	msgPriority       = "must be an integer from 1 to 5"
	msgWeight         = "must be an integer from 1 to 1000"
	msgMaxConcurrency = "must be an integer of at least 0"
	msgUnknownKey     = "unknown key"
)

// schedulingKeys are the keys of the scheduling section, in document order.
var schedulingKeys = []string{"priority", "weight", "max_concurrency"}

// scheduling reads the optional scheduling section: {priority?, weight?,
// max_concurrency?}, each an integer within its bounds. What the document
// does not set, or sets wrongly (with a problem), keeps its default.
// Unknown keys are named "scheduling.<key>: unknown key", as
// docs/capabilities.md fixes for this section.
func (d *docParser) scheduling(doc map[string]any) Scheduling {
	s := DefaultScheduling()
	v, ok := field(doc, "scheduling")
	if !ok {
		return s
	}
	obj, ok := v.(map[string]any)
	if !ok {
		d.addf("scheduling", "must be a mapping")
		return s
	}
	d.unknownKeys(obj, "scheduling", schedulingKeys)
	for _, f := range []struct {
		key      string
		min, max int64
		msg      string
		dst      *int
	}{
		{"priority", MinPriority, MaxPriority, msgPriority, &s.Priority},
		{"weight", MinWeight, MaxWeight, msgWeight, &s.Weight},
		{"max_concurrency", 0, math.MaxInt, msgMaxConcurrency, &s.MaxConcurrency},
	} {
		v, ok := field(obj, f.key)
		if !ok {
			continue
		}
		if n, ok := intIn(v, f.min, f.max); ok {
			*f.dst = n
		} else {
			d.addf(join("scheduling", f.key), "%s", f.msg)
		}
	}
	return s
}

// intIn returns v as an int when it is a YAML/JSON integer from lo to hi.
// Strings ("3"), booleans and fractions (2.5) are not integers; a number
// written with a zero fraction (3.0) is, as for every integer of the
// document (the YAML is read as JSON, which does not tell them apart).
func intIn(v any, lo, hi int64) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	if err != nil || i < lo || i > hi {
		return 0, false
	}
	return int(i), true
}
