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
	// TmpBytes caps each child's private TMPDIR (a size-limited tmpfs of
	// its own, whose pages count against MemoryBytes): writing past it
	// fails with ENOSPC.
	TmpBytes int64
	// TmpText is the tmp limit as written in the personality (or
	// DefaultTmpText), for messages.
	TmpText string
}

// Defaults of ProcessLimits, and the floors under which a limit is refused
// (the launcher that confines a child needs a few threads and megabytes of
// its own before the binary starts).
const (
	DefaultMemoryText  = "1GiB"
	DefaultMemoryBytes = 1 << 30
	DefaultPids        = 256
	DefaultTmpText     = "256MiB"
	DefaultTmpBytes    = 256 << 20
	MinMemoryBytes     = 32 << 20
	MinPids            = 16
	// MinTmpBytes is the smallest tmp limit, 1 MiB.
	MinTmpBytes = 1 << 20
	// MinCPU is the smallest cpu limit, a hundredth of a CPU.
	MinCPU = 0.01
)

// DefaultProcessLimits returns the limits of a personality that sets none:
// memory 1 GiB, pids 256, cpu unlimited, tmp 256 MiB.
func DefaultProcessLimits() ProcessLimits {
	return ProcessLimits{MemoryBytes: DefaultMemoryBytes, MemoryText: DefaultMemoryText, Pids: DefaultPids,
		TmpBytes: DefaultTmpBytes, TmpText: DefaultTmpText}
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
	if l.TmpBytes == 0 {
		l.TmpBytes, l.TmpText = d.TmpBytes, d.TmpText
	}
	if l.TmpText == "" {
		l.TmpText = humanize.IBytes(uint64(l.TmpBytes))
	}
	return l
}

// ParseMemory parses a memory size such as "512MiB", "1GiB", "1.5 GiB" or
// "800MB" (SI units are decimal, IEC units binary, a bare number is bytes).
func ParseMemory(s string) (int64, error) {
	return parseSize(s, MinMemoryBytes, "32MiB", "512MiB or 2GiB")
}

// ParseTmp parses a tmp limit as ParseMemory parses a memory size; it must
// be at least MinTmpBytes (1MiB).
func ParseTmp(s string) (int64, error) {
	return parseSize(s, MinTmpBytes, "1MiB", "256MiB or 1GiB")
}

// parseSize parses a size of at least floor bytes (floorText in errors);
// examples are named in the error of a text that is no size.
func parseSize(s string, floor int64, floorText, examples string) (int64, error) {
	n, err := humanize.ParseBytes(strings.TrimSpace(s))
	if err != nil || n > math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a size (use a number with a unit, such as %s)", s, examples)
	}
	if int64(n) < floor {
		return 0, fmt.Errorf("%q is below the minimum of %s", s, floorText)
	}
	return int64(n), nil
}

// processLimits reads process.limits: {memory, pids, cpu, tmp}.
func (d *docParser) processLimits(v any) ProcessLimits {
	l := DefaultProcessLimits()
	obj, ok := d.object(v, "process.limits", "memory", "pids", "cpu", "tmp")
	if !ok {
		return l
	}
	if v, ok := field(obj, "memory"); ok {
		if n, text, ok := d.size(v, "process.limits.memory", ParseMemory, "512MiB"); ok {
			l.MemoryBytes, l.MemoryText = n, text
		}
	}
	if v, ok := field(obj, "tmp"); ok {
		if n, text, ok := d.size(v, "process.limits.tmp", ParseTmp, "256MiB"); ok {
			l.TmpBytes, l.TmpText = n, text
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

// size reads the size at key with parse; example names one in the error
// of a value that is not a string.
func (d *docParser) size(v any, key string, parse func(string) (int64, error), example string) (int64, string, bool) {
	text, ok := v.(string)
	if !ok {
		d.addf(key, "must be a size with a unit, such as %s", example)
		return 0, "", false
	}
	n, err := parse(text)
	if err != nil {
		d.addf(key, "%v", err)
		return 0, "", false
	}
	return n, strings.TrimSpace(text), true
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
