package process

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
)

// MinConfinedABI is the lowest Landlock ABI at which children count as
// confined: their files are restricted, truncation included (ABI 3), and
// so is TCP (ABI 4). Below it, from ABI 1, the runner still applies what
// the kernel can restrict, but SandboxStatus reports the sandbox degraded.
const MinConfinedABI = 4

// SandboxStatus is the confinement the runners of this process give their
// children, as probed once at first use (Sandbox). It is meant for the
// worker's start-up log line and its readiness details.
type SandboxStatus struct {
	// LandlockABI is the kernel's Landlock ABI version; 0 when Landlock
	// is not available.
	LandlockABI int `json:"landlock_abi"`
	// Landlock is true when children run under a Landlock ruleset (ABI 1
	// or more and the launcher can start).
	Landlock bool `json:"landlock"`
	// Confined is true when Landlock is applied at MinConfinedABI or above:
	// files and TCP are restricted to the call's grant.
	Confined bool `json:"confined"`
	// CgroupKill is true when each child runs in its own cgroup v2, which
	// is killed as a whole, so no descendant outlives its call.
	CgroupKill bool `json:"cgroup_kill"`
	// Cgroup is the cgroup v2 directory the per-call cgroups are created
	// in, when CgroupKill.
	Cgroup string `json:"cgroup,omitempty"`
	// Degraded is true when Confined or CgroupKill is false.
	Degraded bool `json:"degraded"`
	// Reason says, when Degraded, what is missing, why, and what a child
	// can then do; empty otherwise.
	Reason string `json:"reason,omitempty"`
	// Unrestricted lists what Landlock at this ABI does not restrict for a
	// child, even when Confined; empty without Landlock (Reason covers it).
	Unrestricted []string `json:"unrestricted,omitempty"`
}

// LogAttrs returns the status as log attributes with snake_case keys.
func (s SandboxStatus) LogAttrs() []slog.Attr {
	attrs := []slog.Attr{
		slog.Int("landlock_abi", s.LandlockABI),
		slog.Bool("confined", s.Confined),
		slog.Bool("cgroup_kill", s.CgroupKill),
	}
	if s.Cgroup != "" {
		attrs = append(attrs, slog.String("cgroup", s.Cgroup))
	}
	if s.Reason != "" {
		attrs = append(attrs, slog.String("reason", s.Reason))
	}
	if len(s.Unrestricted) > 0 {
		attrs = append(attrs, slog.String("unrestricted", strings.Join(s.Unrestricted, ", ")))
	}
	return attrs
}

// Log writes the status as one line: info when the sandbox is complete,
// warn when it is degraded.
func (s SandboxStatus) Log(ctx context.Context, log *slog.Logger) {
	level := slog.LevelInfo
	if s.Degraded {
		level = slog.LevelWarn
	}
	log.LogAttrs(ctx, level, "process sandbox", s.LogAttrs()...)
}

// sandbox is the probed confinement of this process.
type sandbox struct {
	status SandboxStatus
}

// probedSandbox probes the kernel and the cgroup once per process.
var probedSandbox = sync.OnceValue(func() *sandbox {
	abi, abiErr := launcher.ABI()
	if abiErr == nil {
		// The launcher is this binary, started again through /proc.
		if _, err := os.Stat(launcher.Self); err != nil {
			abiErr = fmt.Errorf("cannot re-execute the worker binary: %w", err)
		}
	}
	parent, cgErr := ownCgroup()
	if cgErr == nil {
		cgErr = probeCgroup(parent)
	}
	return &sandbox{status: newStatus(abi, abiErr, parent, cgErr)}
})

// Sandbox returns the confinement the runners of this process give their
// children (unless a runner's Config turns part of it off): the kernel's
// Landlock ABI, whether children are confined, whether a cgroup kill is
// available, and why not. It is probed once, at the first call.
func Sandbox() SandboxStatus {
	s := probedSandbox().status
	s.Unrestricted = append([]string(nil), s.Unrestricted...)
	return s
}

// newStatus builds the status from the probes' results: abi (0 or with
// abiErr non-nil: no Landlock) and the cgroup parent (cgErr non-nil: no
// cgroup kill).
func newStatus(abi int, abiErr error, cgroup string, cgErr error) SandboxStatus {
	s := SandboxStatus{LandlockABI: abi}
	if abiErr != nil {
		s.LandlockABI = max(abi, 0)
	}
	s.Landlock = abiErr == nil && abi > 0
	s.Confined = s.Landlock && abi >= MinConfinedABI
	s.CgroupKill = cgErr == nil
	if s.CgroupKill {
		s.Cgroup = cgroup
	}
	var reasons []string
	switch {
	case !s.Landlock:
		reasons = append(reasons, fmt.Sprintf("Landlock is not available (%v): children are not confined and reach whatever the worker's OS user reaches", abiErr))
	case !s.Confined:
		reasons = append(reasons, fmt.Sprintf("Landlock ABI %d is below %d: children's files are confined but these are not restricted: %s", abi, MinConfinedABI, strings.Join(missing(abi, MinConfinedABI), ", ")))
	}
	if !s.CgroupKill {
		reasons = append(reasons, fmt.Sprintf("no cgroup v2 kill (%v): a descendant that leaves the child's process group (setsid) can outlive its call", cgErr))
	}
	s.Degraded = len(reasons) > 0
	s.Reason = strings.Join(reasons, "; ")
	if s.Landlock {
		s.Unrestricted = append(missing(abi, 1<<30), "multipath TCP sockets (Landlock restricts classic TCP only)")
	}
	return s
}

// landlockFeatures are the restrictions Landlock added, by ABI.
var landlockFeatures = []struct {
	abi  int
	what string
}{
	{3, "file truncation (ABI 3)"},
	{4, "TCP bind and connect (ABI 4)"},
	{5, "device ioctls (ABI 5)"},
	{6, "signals and abstract unix sockets to processes outside the sandbox (ABI 6)"},
	{9, "connecting to pathname unix sockets (ABI 9)"},
	{10, "UDP (ABI 10)"},
}

// missing lists the restrictions that need an ABI above abi and not above
// upTo.
func missing(abi, upTo int) []string {
	var out []string
	for _, f := range landlockFeatures {
		if f.abi > abi && f.abi <= upTo {
			out = append(out, f.what)
		}
	}
	return out
}
