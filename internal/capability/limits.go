package capability

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
)

// ProcessLimits are the per-call ceilings of a call's child processes
// (personality process.limits, security.md section 1), enforced in the
// cgroup every call's children share.
type ProcessLimits struct {
	// MemoryBytes caps the memory of the call's processes together.
	MemoryBytes int64
	// MemoryText is the memory limit as written in the personality (or
	// DefaultMemoryText), for messages.
	MemoryText string
	// Pids caps how many processes and threads the call has at once.
	Pids int
	// CPU caps the CPU time of the call's processes, in CPUs (0.5 = half a
	// CPU); 0 is unlimited.
	CPU float64
}

// Defaults of ProcessLimits, and the floors under which a limit is refused
// (the launcher that confines a child needs a few threads and megabytes of
// its own before the binary starts).
const (
	DefaultMemoryText  = "1GiB"
	DefaultMemoryBytes = 1 << 30
	DefaultPids        = 256
	MinMemoryBytes     = 32 << 20
	MinPids            = 16
	// MinCPU is the smallest cpu limit, a hundredth of a CPU.
	MinCPU = 0.01
)

// DefaultProcessLimits returns the limits of a personality that sets none:
// memory 1 GiB, pids 256, cpu unlimited.
func DefaultProcessLimits() ProcessLimits {
	return ProcessLimits{MemoryBytes: DefaultMemoryBytes, MemoryText: DefaultMemoryText, Pids: DefaultPids}
}

// WithDefaults returns l with every zero field set to its default.
func (l ProcessLimits) WithDefaults() ProcessLimits {
	d := DefaultProcessLimits()
	if l.MemoryBytes == 0 {
		l.MemoryBytes, l.MemoryText = d.MemoryBytes, d.MemoryText
	}
	if l.MemoryText == "" {
		l.MemoryText = humanize.IBytes(uint64(l.MemoryBytes))
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	return l
}

// ParseMemory parses a memory size such as "512MiB", "1GiB", "1.5 GiB" or
// "800MB" (SI units are decimal, IEC units binary, a bare number is bytes).
func ParseMemory(s string) (int64, error) {
	n, err := humanize.ParseBytes(strings.TrimSpace(s))
	if err != nil || n > math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a size (use a number with a unit, such as 512MiB or 2GiB)", s)
	}
	if n < MinMemoryBytes {
		return 0, fmt.Errorf("%q is below the minimum of 32MiB", s)
	}
	return int64(n), nil
}

// processLimits reads process.limits: {memory, pids, cpu}.
func (d *docParser) processLimits(v any) ProcessLimits {
	l := DefaultProcessLimits()
	obj, ok := d.object(v, "process.limits", "memory", "pids", "cpu")
	if !ok {
		return l
	}
	if v, ok := field(obj, "memory"); ok {
		switch m := v.(type) {
		case string:
			if n, err := ParseMemory(m); err != nil {
				d.addf("process.limits.memory", "%v", err)
			} else {
				l.MemoryBytes, l.MemoryText = n, strings.TrimSpace(m)
			}
		default:
			d.addf("process.limits.memory", "must be a size with a unit, such as 512MiB")
		}
	}
	if v, ok := field(obj, "pids"); ok {
		if n, ok := d.integer(v, "process.limits.pids"); ok {
			if n < MinPids {
				d.addf("process.limits.pids", "%d is below the minimum of %d", n, MinPids)
			} else {
				l.Pids = n
			}
		}
	}
	if v, ok := field(obj, "cpu"); ok {
		cpu, err := parseCPU(v)
		if err != nil {
			d.addf("process.limits.cpu", "%v", err)
		} else {
			l.CPU = cpu
		}
	}
	return l
}

// parseCPU reads a CPU limit: a number of CPUs of at least MinCPU.
func parseCPU(v any) (float64, error) {
	var text string
	switch n := v.(type) {
	case interface{ String() string }:
		text = n.String()
	case string:
		text = n
	default:
		return 0, fmt.Errorf("must be a number of CPUs, such as 0.5 or 2")
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("must be a number of CPUs, such as 0.5 or 2")
	}
	if f < MinCPU {
		return 0, fmt.Errorf("%v is below the minimum of %v", f, MinCPU)
	}
	return f, nil
}
