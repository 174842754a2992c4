// Package process is the scoped process accessor: tool.Runner built from one
// call's resolved process grant (capability.BinaryGrant, with the call's
// ceilings) and reach (Reach: the call's fs_reach, whether it has network,
// and its egress proxy).
//
// A child is never started through a shell. Its binary must be allowed by
// the grant (a bare name is then resolved on the trusted PATH, never the
// worker's $PATH; a path is allowed only when listed exactly); its
// environment is minimal (PATH, HOME, LANG, TZ, TMPDIR plus the caller's
// variables, never the worker's own; LD_* and DYLD_* refused); its working
// directory must lie inside the call's reach; stdout and stderr are
// captured and capped. Each child gets a private TMPDIR, removed when Run
// returns (and by Sweep at the next start when the worker was killed).
//
// Confinement (security.md section 1; Sandbox reports what this machine
// offers and the worker logs it at start). The child is started through
// the launcher package: the worker binary runs again in launcher mode,
// confines itself and executes the child's binary, so the child and all
// its descendants get:
//
//   - Network. A user and network namespace of their own with loopback
//     only. A call without network has nothing else: no socket leaves the
//     namespace, and the seccomp filter refuses IPv4 and IPv6 sockets
//     altogether. A call with network gets the call's egress proxy
//     (Reach.Egress) inside its namespace at 127.0.0.1:launcher.ProxyPort,
//     announced in HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and their lower-case
//     forms, and Landlock lets it connect to that port only; the proxy
//     checks every target against the call's network grant, as the fetch
//     accessor does. Where the machine allows no user namespace such a
//     call is refused (ErrNetworkRefused) unless Config.Network is
//     NetworkUnconfined, which leaves TCP and UDP open to any host.
//   - Files (Landlock). They can read and execute only the system files
//     every program needs (/usr, /bin, /sbin, /lib*, the loader cache,
//     time zone, CA certificates, nsswitch.conf and the random devices;
//     the resolver files too when the call has network), the trusted PATH,
//     the binary's own directory and the call's fs_reach.read; they can
//     write only the call's fs_reach.write, their TMPDIR and /dev/null,
//     /dev/zero and /dev/full. Signals and abstract unix sockets cannot
//     reach processes outside the sandbox. How much of this the kernel
//     enforces depends on its Landlock ABI (SandboxStatus.Unrestricted).
//     Landlock only allows, so the fs floor (the worker's own files,
//     ~/.ssh, ...) is not subtracted from a reach prefix that contains it.
//   - No capabilities and no_new_privs, so neither a root child nor a
//     set-user-ID binary holds any privilege; and the seccomp filter
//     (launcher.Policy) under everything.
//   - Ceilings. The call's cgroup carries memory, pids and cpu limits
//     from the grant (capability.ProcessLimits). A call whose processes
//     met the memory ceiling ends with a *tool.LimitError ("Process killed:
//     memory limit <size> reached"); one that met the pids ceiling gets
//     "pids limit <n> reached" in ProcessResult.LimitsHit.
//   - Disk. The child's TMPDIR is a tmpfs of the grant's tmp limit in a
//     mount namespace of its own (with the user namespace; its pages count
//     against the memory ceiling): writing past it fails with ENOSPC, and
//     a child that filled it gets "tmp limit <size> reached" in
//     ProcessResult.LimitsHit. Without a user namespace (SandboxStatus.
//     TmpLimit) the TMPDIR is an ordinary directory, bounded only by its
//     file system.
//   - Killing. The child runs in its own process group and, when cgroup v2
//     allows it, in its own cgroup created under the worker's cgroup and
//     entered at clone time (clone3), so nothing the child starts can be
//     missed. When the call's context ends, and again after the child
//     exits, the cgroup (cgroup.kill) and the process group are killed with
//     SIGKILL; the cgroup is then removed. Without a cgroup only the process
//     group is killed: a descendant that calls setsid (a daemon that double
//     forks) escapes the kill and can outlive the call, and Run stops
//     waiting for its output after a short delay.
package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
)

// DefaultMaxOutputBytes is the per-stream output cap when
// Config.MaxOutputBytes is zero.
const DefaultMaxOutputBytes = 1 << 20

// TruncatedMarker ends a stream that was cut at the output cap.
const TruncatedMarker = "\n[output truncated]"

// drainDelay bounds how long Run waits, after the child has exited or been
// killed, for its output pipes to close. A descendant that left the process
// group (setsid) and escaped the kill can hold them open forever; after
// drainDelay Run closes its ends and returns what it has.
const drainDelay = 2 * time.Second

// Config is the worker-wide part of the runner.
type Config struct {
	// TrustedPATH is the child's PATH and, when New builds the Resolver, the
	// path bare names are resolved on. Empty: DefaultTrustedPATH. Never the
	// worker's own $PATH.
	TrustedPATH []string
	// MaxOutputBytes caps stdout and stderr each; a cut stream ends with
	// TruncatedMarker. Zero: DefaultMaxOutputBytes.
	MaxOutputBytes int
	// Home is the child's HOME. Empty: the child's TMPDIR. It is not added
	// to the child's reach.
	Home string
	// TmpDir is where each child's private TMPDIR is created. Empty:
	// os.TempDir().
	TmpDir string
	// Network is what a call with network gets where the machine allows
	// no user namespace (CAPSTAN_PROCESS_NETWORK).
	Network NetworkMode
	// NoLandlock, NoSeccomp and NoNetNS start children without Landlock,
	// the seccomp filter or a network namespace even when the machine has
	// them, and NoCgroup kills only their process group and applies no
	// ceilings even when a cgroup is available: the degraded paths, for
	// tests. The worker never sets them.
	NoLandlock, NoSeccomp, NoNetNS, NoCgroup bool
	// NoZygote starts confined children through the launcher even when
	// this binary has the zygote: for tests of the portable path.
	NoZygote bool
	// Logger receives what Run cannot return: a per-call cgroup or TMPDIR
	// that could not be removed. Nil: slog.Default().
	Logger *slog.Logger
}

// Validate reports a Config that New would refuse: a relative or empty
// TrustedPATH entry, or one containing the list separator; a negative
// MaxOutputBytes; a relative Home or TmpDir. The worker calls it at start-up.
func (c Config) Validate() error {
	var errs []error
	for i, dir := range c.TrustedPATH {
		if !filepath.IsAbs(dir) || strings.ContainsRune(dir, os.PathListSeparator) {
			errs = append(errs, fmt.Errorf("process config: TrustedPATH[%d] %q must be an absolute directory without %q", i, dir, os.PathListSeparator))
		}
	}
	if c.MaxOutputBytes < 0 {
		errs = append(errs, fmt.Errorf("process config: MaxOutputBytes %d must not be negative", c.MaxOutputBytes))
	}
	if c.Home != "" && !filepath.IsAbs(c.Home) {
		errs = append(errs, fmt.Errorf("process config: Home %q must be absolute", c.Home))
	}
	if c.TmpDir != "" && !filepath.IsAbs(c.TmpDir) {
		errs = append(errs, fmt.Errorf("process config: TmpDir %q must be absolute", c.TmpDir))
	}
	if c.Network != NetworkConfined && c.Network != NetworkUnconfined {
		errs = append(errs, fmt.Errorf("process config: Network %q must be %q or %q", c.Network, NetworkConfined, NetworkUnconfined))
	}
	return errors.Join(errs...)
}

// Runner is the tool.Runner of one call: it starts the children of one
// process grant, confined to one reach (see the package comment). It is
// safe for concurrent use.
type Runner struct {
	grant     *capability.BinaryGrant
	limits    capability.ProcessLimits
	reach     Reach
	resolver  *Resolver
	maxOutput int
	path      string
	home      string
	tmpRoot   string
	landlock  bool
	seccomp   bool
	netns     bool
	tmpfs     bool // each child's TMPDIR is a tmpfs of the tmp limit
	zygote    bool // confined children start through the zygote
	network   NetworkMode
	netnsErr  error    // why there is no network namespace
	cgroup    string   // parent of the per-call cgroups v2; "" = none
	ceil      ceilings // where the ceilings are enforced
	noCeil    bool     // Config.NoCgroup
	log       *slog.Logger
	onDeny    func(error)
}

// New returns the process runner of grant g: a nil g denies every Run.
// reach is what the children may touch (see the package comment). Bare
// names are resolved with res, which the worker builds once and shares
// (nil: a Resolver over cfg.TrustedPATH, private to this runner). onDeny,
// when not nil, is called with every denial before it is returned; it must
// not block. cfg must be valid (Config.Validate); New panics otherwise,
// since that is a start-up configuration error. The runner confines its
// children as Sandbox reports, less what cfg turns off; it is safe for
// concurrent use.
func New(g *capability.BinaryGrant, reach Reach, res *Resolver, cfg Config, onDeny func(error)) *Runner {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	trusted := cfg.TrustedPATH
	if len(trusted) == 0 {
		trusted = DefaultTrustedPATH
	}
	if res == nil {
		res = NewResolver(trusted)
	}
	sb := probedSandbox()
	r := &Runner{
		resolver:  res,
		maxOutput: cmp.Or(cfg.MaxOutputBytes, DefaultMaxOutputBytes),
		path:      strings.Join(trusted, string(os.PathListSeparator)),
		home:      cfg.Home,
		tmpRoot:   cmp.Or(cfg.TmpDir, os.TempDir()),
		landlock:  sb.status.Landlock && !cfg.NoLandlock,
		seccomp:   sb.status.Seccomp && !cfg.NoSeccomp,
		netns:     sb.status.NetworkNamespace && !cfg.NoNetNS,
		tmpfs:     sb.status.TmpLimit && !cfg.NoNetNS,
		zygote:    sb.zygoteErr == nil && !cfg.NoZygote,
		network:   cfg.Network,
		netnsErr:  sb.netnsErr,
		log:       cmp.Or(cfg.Logger, slog.Default()),
		onDeny:    onDeny,
		noCeil:    cfg.NoCgroup,
	}
	if cfg.NoNetNS {
		r.netnsErr = errNetNSOff
	}
	if sb.status.CgroupKill && !cfg.NoCgroup {
		r.cgroup = sb.cgroup
	}
	if !cfg.NoCgroup {
		r.ceil = sb.ceil
		if r.cgroup == "" {
			r.ceil.v2 = nil
		}
	}
	r.limits = capability.DefaultProcessLimits()
	if g != nil {
		r.grant = &capability.BinaryGrant{Declared: slices.Clone(g.Declared)}
		if g.Ceiling != nil {
			r.grant.Ceiling = &capability.Ceiling{Allow: slices.Clone(g.Ceiling.Allow)}
		}
		r.limits = g.Limits.WithDefaults()
	}
	r.reach.Network, r.reach.Egress = reach.Network, reach.Egress
	if reach.FS != nil {
		r.reach.FS = &capability.FSGrant{Read: slices.Clone(reach.FS.Read), Write: slices.Clone(reach.FS.Write), WorkingDir: reach.FS.WorkingDir}
	}
	return r
}

// ErrNetworkRefused is wrapped by the error of a Run whose call has
// network on a machine that allows no network namespace, when the runner's
// Network mode is NetworkConfined.
var ErrNetworkRefused = errors.New("process network refused")

// NetworkRefused returns the refusal of a call whose process grant
// includes network for runners built with c: "" when such calls may run
// (this machine gives children a network namespace, or c.Network is
// NetworkUnconfined), else NetworkRefusal's message.
func (c Config) NetworkRefused() string {
	switch {
	case c.Network == NetworkUnconfined:
		return ""
	case c.NoNetNS:
		return NetworkRefusal(errNetNSOff)
	case probedSandbox().netnsErr != nil:
		return NetworkRefusal(probedSandbox().netnsErr)
	}
	return ""
}

// errNetNSOff is the reason of Config.NoNetNS.
var errNetNSOff = errors.New("turned off by the runner's configuration")

// NetworkRefusal is the message of a call refused because its process
// grant includes network and the machine allows no network namespace
// (security.md section 1); reason says why there is none.
func NetworkRefusal(reason error) string {
	return fmt.Sprintf("Process network needs a network namespace, which this machine does not allow: %v", reason)
}

// netMode returns the launcher's network mode for this runner's children.
func (r *Runner) netMode() (launcher.Net, error) {
	switch {
	case !r.reach.Network:
		return launcher.NetNone, nil
	case r.netns:
		if r.reach.Egress == nil {
			return "", errors.New("process: the call has network but no egress proxy")
		}
		return launcher.NetProxy, nil
	case r.network == NetworkUnconfined:
		return launcher.NetHost, nil
	}
	return "", networkRefused{r.netnsErr}
}

// networkRefused is the error of a call with network where no network
// namespace is allowed; it matches ErrNetworkRefused.
type networkRefused struct{ reason error }

func (e networkRefused) Error() string        { return NetworkRefusal(e.reason) }
func (e networkRefused) Is(target error) bool { return target == ErrNetworkRefused }

// kill sends SIGKILL to the child's cgroup, when it has one, and to its
// process group pgid.
func (r *Runner) kill(pgid int, cg *callCgroup) error {
	var err error
	if cg != nil {
		err = cg.kill()
	}
	return errors.Join(err, killGroup(pgid))
}

// removeTmp removes the child's TMPDIR, made in od, logging a failure (a
// child can make a directory in it unreadable; Run's result does not
// depend on it).
func (r *Runner) removeTmp(ctx context.Context, tmp string, od *ownerDir) {
	if err := removeChildTmp(tmp, od); err != nil {
		r.log.WarnContext(ctx, "process TMPDIR not removed", "error", err)
	}
}

// releaseTmpfs reports whether the child's tmpfs (nil: none) is full and
// closes it, logging a failure to tell (Run's result then names no tmp
// limit).
func (r *Runner) releaseTmpfs(ctx context.Context, f *os.File) (full bool) {
	if f == nil {
		return false
	}
	defer closeFile(f)
	full, err := launcher.TmpFull(f)
	if err != nil {
		r.log.WarnContext(ctx, "process TMPDIR usage unknown", "error", err)
	}
	return full
}

// releaseCgroup empties the call's cgroups and returns them to the pool
// (or removes them), logging a failure (Run's result does not depend on
// it).
func (r *Runner) releaseCgroup(ctx context.Context, cg *callCgroup) {
	if err := releaseCgroup(cg, cg.key); err != nil {
		r.log.WarnContext(ctx, "process cgroup not removed", "error", err)
	}
}

// isDir returns nil when dir is a directory, else the system error (for
// example ENOENT or ENOTDIR).
func isDir(dir string) error {
	fi, err := os.Stat(dir)
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case err != nil:
		return err
	case !fi.IsDir():
		return syscall.ENOTDIR
	}
	return nil
}

// exitCode returns the exit status, or 128+n for a child killed by signal n.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// killGroup sends SIGKILL to the process group pgid; a group that is gone
// already is not an error.
func killGroup(pgid int) error {
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

func (r *Runner) denied(err error) {
	if r.onDeny != nil {
		r.onDeny(err)
	}
}
