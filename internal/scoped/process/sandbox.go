package process

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
)

// MinConfinedABI is the lowest Landlock ABI at which children's files count
// as confined: reads, writes and truncation (ABI 3) are restricted to the
// call's reach. Their network is confined by the network namespace and the
// seccomp filter, whatever the ABI.
const MinConfinedABI = 3

// NetworkMode is what a call whose process grant includes network gets on
// a machine without user namespaces (CAPSTAN_PROCESS_NETWORK).
type NetworkMode string

// The network modes.
const (
	// NetworkConfined (the default) gives such a child its own network
	// namespace and the call's egress proxy, or refuses the call where
	// the machine has no user namespaces.
	NetworkConfined NetworkMode = ""
	// NetworkUnconfined lets such a child use TCP and UDP to any host
	// where the machine has no user namespaces (the worker says so at
	// start and in /readyz).
	NetworkUnconfined NetworkMode = "unconfined"
)

// ParseNetworkMode parses CAPSTAN_PROCESS_NETWORK: "" or "confined", or
// "unconfined".
func ParseNetworkMode(s string) (NetworkMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "confined":
		return NetworkConfined, nil
	case "unconfined":
		return NetworkUnconfined, nil
	}
	return "", fmt.Errorf("%q must be confined or unconfined", s)
}

// SandboxStatus is the confinement the runners of this process give their
// children, as probed once at first use (Sandbox), for the worker's
// start-up log line and its readiness details.
type SandboxStatus struct {
	// LandlockABI is the kernel's Landlock ABI version; 0 when Landlock
	// is not available.
	LandlockABI int `json:"landlock_abi"`
	// Landlock is true when children run under a Landlock ruleset (ABI 1
	// or more and the launcher can start).
	Landlock bool `json:"landlock"`
	// Seccomp is true when children run under the launcher's seccomp
	// filter (launcher.Policy).
	Seccomp bool `json:"seccomp"`
	// NetworkNamespace is true when each child runs in a user and network
	// namespace of its own, with loopback only (and, for a call with
	// network, the call's egress proxy).
	NetworkNamespace bool `json:"network_namespace"`
	// ProcessNetwork is what a call whose process grant includes network
	// gets: "proxy" (its own namespace and the egress proxy), "refused"
	// (no namespaces here: such calls are refused before they start) or
	// "unconfined" (no namespaces and CAPSTAN_PROCESS_NETWORK=unconfined:
	// TCP and UDP to any host).
	ProcessNetwork string `json:"process_network"`
	// TmpLimit is true when each child's private TMPDIR is a tmpfs of its
	// own, in a mount namespace of its own, bounded by the call's
	// process.limits.tmp (writing past it fails with ENOSPC). It needs the
	// user namespace: without it a child's TMPDIR is bounded only by the
	// free space of the temp directory's file system.
	TmpLimit bool `json:"tmp_limit"`
	// Spawner is what starts confined children: "zygote" (the fork
	// server of a cgo build) or "launcher" (the worker binary run again
	// for each child).
	Spawner string `json:"spawner"`
	// Confined is true when files, TCP, UDP, multipath TCP and raw sockets
	// are all enforced for every child.
	Confined bool `json:"confined"`
	// CgroupKill is true when each child runs in its own cgroup v2, which
	// is killed as a whole, so no descendant outlives its call.
	CgroupKill bool `json:"cgroup_kill"`
	// Cgroup is the cgroup v2 directory the per-call cgroups are created
	// in, when CgroupKill.
	Cgroup string `json:"cgroup,omitempty"`
	// Ceilings lists the per-call ceilings enforced ("memory", "pids",
	// "cpu"); empty when none apply.
	Ceilings []string `json:"ceilings"`
	// CeilingsCgroup is the cgroup version that enforces them: "v2", or
	// "v1" on a machine whose controllers are on cgroup v1 hierarchies.
	CeilingsCgroup string `json:"ceilings_cgroup,omitempty"`
	// Degraded is true when Confined, CgroupKill or TmpLimit is false or a
	// ceiling does not apply.
	Degraded bool `json:"degraded"`
	// Reason says, when Degraded, what is missing, why, and what a child
	// can then do; empty otherwise.
	Reason string `json:"reason,omitempty"`
	// Unrestricted lists what Landlock at this ABI does not restrict for a
	// child (the namespace and the filter may cover it); empty without
	// Landlock (Reason covers it).
	Unrestricted []string `json:"unrestricted,omitempty"`
}

// LogAttrs returns the status as log attributes with snake_case keys.
func (s SandboxStatus) LogAttrs() []slog.Attr {
	attrs := []slog.Attr{
		slog.Bool("confined", s.Confined),
		slog.Int("landlock_abi", s.LandlockABI),
		slog.Bool("seccomp", s.Seccomp),
		slog.Bool("network_namespace", s.NetworkNamespace),
		slog.String("process_network", s.ProcessNetwork),
		slog.Bool("tmp_limit", s.TmpLimit),
		slog.String("spawner", s.Spawner),
		slog.Bool("cgroup_kill", s.CgroupKill),
		slog.String("ceilings", strings.Join(s.Ceilings, ",")),
	}
	if s.CeilingsCgroup != "" {
		attrs = append(attrs, slog.String("ceilings_cgroup", s.CeilingsCgroup))
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

// probes are the results of probing this machine, once per process.
type probes struct {
	abi    int
	abiErr error // Landlock unusable
	// seccompErr: the launcher cannot install its filter.
	seccompErr error
	// netnsErr: the launcher cannot start in a user and network namespace
	// of its own and bring its loopback up.
	netnsErr error
	// tmpErr: the launcher, in such namespaces, cannot mount a tmpfs in a
	// mount namespace of its own (only probed when netnsErr is nil).
	tmpErr error
	// zygoteErr: confined children start through the launcher, not the
	// zygote.
	zygoteErr error
	// cgroup is the parent of the per-call cgroups v2; cgErr: no cgroup
	// v2 kill.
	cgroup string
	cgErr  error
	// ceil is what enforces the ceilings; ceilErr why some are missing.
	ceil    ceilings
	ceilErr error
}

// sandbox is the probed confinement of this process.
type sandbox struct {
	probes
	status SandboxStatus // for NetworkConfined
}

// probedSandbox probes the kernel and the cgroups once per process.
var probedSandbox = sync.OnceValue(func() *sandbox {
	var p probes
	p.abi, p.abiErr = launcher.ABI()
	// The launcher is this binary, started again through /proc.
	if _, err := os.Stat(launcher.Self); err != nil {
		err = fmt.Errorf("cannot re-execute the worker binary: %w", err)
		p.abiErr, p.seccompErr, p.netnsErr = err, err, err
	} else {
		p.seccompErr = launcher.Probe(launcher.Spec{Seccomp: true}, nil)
		p.netnsErr = launcher.Probe(launcher.Spec{NetNS: true, Net: launcher.NetProxy}, launcher.NetNSAttr(&syscall.SysProcAttr{Setpgid: true}))
		if p.netnsErr == nil {
			p.tmpErr = probeTmp()
		}
	}
	p.cgroup, p.cgErr = ownCgroup()
	if p.cgErr == nil {
		p.cgErr = probeCgroup(p.cgroup)
	}
	p.ceil, p.ceilErr = probeCeilings(p.cgroup, p.cgErr)
	p.zygoteErr = probeZygote(p)
	return &sandbox{probes: p, status: newStatus(p, NetworkConfined)}
})

// probeTmp starts a launcher that mounts a small tmpfs in its own mount
// namespace, over the temp directory (only the launcher sees it there).
func probeTmp() error {
	return launcher.Probe(tmpProbeSpec(), launcher.MountNSAttr(launcher.NetNSAttr(&syscall.SysProcAttr{Setpgid: true})))
}

// tmpProbeSpec is the tmpfs the probes mount: 1 MiB over the temp dir.
func tmpProbeSpec() launcher.Spec {
	return launcher.Spec{NetNS: true, Tmp: filepath.Clean(os.TempDir()), TmpBytes: 1 << 20}
}

// Sandbox returns the confinement the runners of this process give their
// children with the default network mode (unless a runner's Config turns
// part of it off); Config.Sandbox gives it for a network mode. It is probed
// once, at the first call.
func Sandbox() SandboxStatus {
	return clone(probedSandbox().status)
}

// Sandbox returns the confinement runners built with c give their
// children: Sandbox with c's network mode applied.
func (c Config) Sandbox() SandboxStatus {
	sb := probedSandbox()
	if c.Network == NetworkConfined {
		return clone(sb.status)
	}
	return newStatus(sb.probes, c.Network)
}

func clone(s SandboxStatus) SandboxStatus {
	s.Unrestricted = slices.Clone(s.Unrestricted)
	s.Ceilings = slices.Clone(s.Ceilings)
	return s
}

// newStatus builds the status from the probes' results for a network mode.
func newStatus(p probes, network NetworkMode) SandboxStatus {
	s := SandboxStatus{LandlockABI: max(p.abi, 0)}
	s.Landlock = p.abiErr == nil && p.abi > 0
	s.Seccomp = p.seccompErr == nil
	s.NetworkNamespace = p.netnsErr == nil
	s.TmpLimit = s.NetworkNamespace && p.tmpErr == nil
	switch {
	case s.NetworkNamespace:
		s.ProcessNetwork = "proxy"
	case network == NetworkUnconfined:
		s.ProcessNetwork = "unconfined"
	default:
		s.ProcessNetwork = "refused"
	}
	s.Spawner = "zygote"
	if p.zygoteErr != nil {
		s.Spawner = "launcher"
	}
	files := s.Landlock && p.abi >= MinConfinedABI
	s.Confined = files && s.Seccomp && s.ProcessNetwork != "unconfined"
	s.CgroupKill = p.cgErr == nil
	if s.CgroupKill {
		s.Cgroup = p.cgroup
	}
	s.Ceilings = p.ceil.names()
	if len(s.Ceilings) > 0 {
		s.CeilingsCgroup = p.ceil.version()
	}
	var reasons []string
	switch {
	case !s.Landlock:
		reasons = append(reasons, fmt.Sprintf("Landlock is not available (%v): children's files are not confined and they read and write whatever the worker's OS user can", p.abiErr))
	case !files:
		reasons = append(reasons, fmt.Sprintf("Landlock ABI %d is below %d: children's files are confined but these are not restricted: %s", p.abi, MinConfinedABI, strings.Join(missing(p.abi, MinConfinedABI), ", ")))
	}
	if !s.Seccomp {
		reasons = append(reasons, fmt.Sprintf("no seccomp filter (%v): children can open multipath TCP, raw and packet sockets and use ptrace, bpf, io_uring and namespaces as far as the kernel lets their user", p.seccompErr))
	}
	if !s.NetworkNamespace {
		what := "calls whose process grant includes network are refused (CAPSTAN_PROCESS_NETWORK=unconfined lets them use any host)"
		if network == NetworkUnconfined {
			what = "children of calls with network use TCP and UDP to any host, loopback and the NATS server included (CAPSTAN_PROCESS_NETWORK=unconfined)"
		}
		reasons = append(reasons, fmt.Sprintf("no user and network namespace for children (%v): %s", p.netnsErr, what))
	}
	switch {
	case !s.NetworkNamespace:
		reasons = append(reasons, "no tmp limit without a user namespace: a child's TMPDIR is not bounded by process.limits.tmp and can fill the temp directory's file system")
	case !s.TmpLimit:
		reasons = append(reasons, fmt.Sprintf("no tmp limit (%v): a child's TMPDIR is not bounded by process.limits.tmp and can fill the temp directory's file system", p.tmpErr))
	}
	if !s.CgroupKill {
		reasons = append(reasons, fmt.Sprintf("no cgroup v2 kill (%v): a descendant that leaves the child's process group (setsid) can outlive its call", p.cgErr))
	}
	if p.ceilErr != nil {
		reasons = append(reasons, p.ceilErr.Error())
	}
	s.Degraded = len(reasons) > 0
	s.Reason = strings.Join(reasons, "; ")
	if s.Landlock {
		s.Unrestricted = missing(p.abi, 1<<30)
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
