// Package process is the scoped process accessor: tool.Runner built from one
// call's resolved process grant (capability.BinaryGrant) and reach (Reach:
// the call's fs_reach and whether it has network).
//
// A child is never started through a shell. Its binary must be allowed by
// the grant (a bare name is then resolved on the trusted PATH, never the
// worker's $PATH; a path is allowed only when listed exactly); its
// environment is minimal (PATH, HOME, LANG, TZ, TMPDIR plus the caller's
// variables, never the worker's own; LD_* and DYLD_* refused); its working
// directory must lie inside the call's reach; stdout and stderr are
// captured and capped. Each child gets a private TMPDIR, removed when Run
// returns.
//
// Confinement (Sandbox reports what this machine offers; the worker logs
// it at start):
//
//   - Landlock. The child is started through the launcher package: the
//     worker binary runs again in launcher mode, restricts itself with a
//     Landlock ruleset and executes the child's binary, so the child and
//     all its descendants can read and execute only the system files every
//     program needs (/usr, /bin, /sbin, /lib*, the loader cache, time zone,
//     CA certificates, nsswitch.conf and the random devices; the resolver
//     files too when the call has network), the trusted PATH, the binary's
//     own directory and the call's fs_reach.read; they can write only the
//     call's fs_reach.write, their TMPDIR and /dev/null, /dev/zero and
//     /dev/full. TCP bind and connect are refused unless the call has
//     network; signals and abstract unix sockets cannot reach processes
//     outside the sandbox. How much of this the kernel enforces depends on
//     its Landlock ABI (SandboxStatus.Unrestricted); from MinConfinedABI
//     the child counts as confined. Without Landlock the child reaches
//     whatever the worker's OS user reaches. Landlock only allows, so the
//     fs floor (the worker's own files, ~/.ssh, ...) is not subtracted from
//     a reach prefix that contains it; no_new_privs is set, so set-user-ID
//     binaries gain nothing.
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
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
	"github.com/capstanhq/capstan/tool"
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
	// NoLandlock starts children unconfined even when Landlock is
	// available, and NoCgroup kills only their process group even when a
	// cgroup is available: the degraded paths, for tests. The worker never
	// sets them.
	NoLandlock, NoCgroup bool
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
	return errors.Join(errs...)
}

// runner implements tool.Runner for one grant.
type runner struct {
	grant     *capability.BinaryGrant
	reach     Reach
	resolver  *Resolver
	maxOutput int
	path      string
	home      string
	tmpRoot   string
	landlock  bool
	cgroup    string // parent of the per-call cgroups; "" = none
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
func New(g *capability.BinaryGrant, reach Reach, res *Resolver, cfg Config, onDeny func(error)) tool.Runner {
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
	sb := probedSandbox().status
	r := &runner{
		resolver:  res,
		maxOutput: cmp.Or(cfg.MaxOutputBytes, DefaultMaxOutputBytes),
		path:      strings.Join(trusted, string(os.PathListSeparator)),
		home:      cfg.Home,
		tmpRoot:   cmp.Or(cfg.TmpDir, os.TempDir()),
		landlock:  sb.Landlock && !cfg.NoLandlock,
		log:       cmp.Or(cfg.Logger, slog.Default()),
		onDeny:    onDeny,
	}
	if sb.CgroupKill && !cfg.NoCgroup {
		r.cgroup = sb.Cgroup
	}
	if g != nil {
		r.grant = &capability.BinaryGrant{Declared: slices.Clone(g.Declared)}
		if g.Ceiling != nil {
			r.grant.Ceiling = &capability.Ceiling{Allow: slices.Clone(g.Ceiling.Allow)}
		}
	}
	r.reach.Network = reach.Network
	if reach.FS != nil {
		r.reach.FS = &capability.FSGrant{Read: slices.Clone(reach.FS.Read), Write: slices.Clone(reach.FS.Write), WorkingDir: reach.FS.WorkingDir}
	}
	return r
}

// Run starts cmd.Binary with cmd.Args and waits for it.
//
//   - The binary must be allowed by the grant, else
//     "BINARY_NOT_ALLOWED: <binary> is not in the declared allowedBinaries".
//     A bare name is resolved on the trusted PATH (not found: an error
//     wrapping exec.ErrNotFound, not a denial); a name with '/' is used as
//     listed, a relative one against cmd.Dir (which must then be set).
//     argv[0] is cmd.Binary as given.
//   - The environment is PATH (the trusted PATH), HOME, LANG=C.UTF-8, TZ=UTC
//     and TMPDIR (a fresh private directory, removed when Run returns),
//     then cmd.Env, whose values win. A name starting with LD_ or DYLD_ (any
//     case) is refused: "ENV_NOT_ALLOWED: <name> may not be set for a child
//     process". An empty name, or one containing '=' or NUL, and a value
//     containing NUL are errors.
//   - cmd.Dir must be absolute and covered by the reach's read or write
//     prefixes, else "PATH_NOT_REACHABLE: read not permitted for <dir>",
//     and must be a directory, else "process: working directory <dir>:
//     <system error>" (wrapping it); empty means "/" (never the worker's
//     current directory), where a confined child can list nothing.
//   - cmd.Stdin is the child's stdin (empty: /dev/null).
//
// A child that exits, with any status, gives a ProcessResult and a nil
// error: ExitCode is its exit status, or 128+n when signal n killed it.
// When ctx ends first, the child's cgroup and process group are killed and
// Run returns context.Cause(ctx) with the output captured so far (ExitCode
// -1). After the child ends (exit or kill) they are killed again, so
// background jobs do not outlive the call. A binary that cannot be started
// (missing, not executable, Landlock refused) is an error wrapping the
// system error.
func (r *runner) Run(ctx context.Context, cmd tool.Command) (*tool.ProcessResult, error) {
	if cmd.Binary == "" {
		return nil, errors.New("process: empty binary name")
	}
	if err := r.grant.Check(cmd.Binary); err != nil {
		r.denied(err)
		return nil, err
	}
	if err := r.checkEnv(cmd.Env); err != nil {
		return nil, err
	}
	dir := "/"
	if cmd.Dir != "" {
		if !filepath.IsAbs(cmd.Dir) {
			return nil, fmt.Errorf("process: dir %q must be an absolute path", cmd.Dir)
		}
		dir = filepath.Clean(cmd.Dir)
		if err := r.checkDir(dir); err != nil {
			r.denied(err)
			return nil, err
		}
		if err := isDir(dir); err != nil {
			return nil, fmt.Errorf("process: working directory %s: %w", dir, err)
		}
	}
	path, err := r.binaryPath(cmd)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	tmp, err := os.MkdirTemp(r.tmpRoot, "capstan-proc-")
	if err != nil {
		return nil, fmt.Errorf("process: create the child's TMPDIR: %w", err)
	}
	defer r.removeTmp(ctx, tmp)
	return r.run(ctx, path, dir, tmp, cmd)
}

// run starts the child in its own process group (and cgroup, when there
// is one), confined when Landlock is used, and collects its result.
func (r *runner) run(ctx context.Context, path, dir, tmp string, cmd tool.Command) (*tool.ProcessResult, error) {
	c := exec.CommandContext(ctx, path)
	c.Args = append([]string{cmd.Binary}, cmd.Args...)
	c.Env = r.environ(cmd.Env, tmp)
	c.Dir = dir
	if len(cmd.Stdin) > 0 {
		c.Stdin = bytes.NewReader(cmd.Stdin)
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The launcher's status pipe, when the child is confined.
	var status, statusW *os.File
	if r.landlock {
		var err error
		if status, statusW, err = launcher.Prepare(c, r.spec(path, tmp), path, c.Args); err != nil {
			return nil, fmt.Errorf("process: %w", err)
		}
		defer closeAll(status, statusW)
	}
	var cg *cgroup
	if r.cgroup != "" {
		var err error
		if cg, err = newCgroup(r.cgroup); err != nil {
			return nil, err
		}
		defer r.removeCgroup(ctx, cg)
		c.SysProcAttr.UseCgroupFD = true
		c.SysProcAttr.CgroupFD = int(cg.fd.Fd())
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("process: stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, fmt.Errorf("process: stderr pipe: %w", err)
	}
	c.Stdout, c.Stderr = outW, errW
	var killed atomic.Bool
	c.Cancel = func() error {
		killed.Store(true)
		return r.kill(c.Process.Pid, cg)
	}
	// WaitDelay bounds the stdin copier when a descendant holds stdin.
	c.WaitDelay = drainDelay
	if err := c.Start(); err != nil {
		closeAll(outR, outW, errR, errW)
		return nil, fmt.Errorf("process: start %s: %w", cmd.Binary, err)
	}
	closeAll(outW, errW)
	if status != nil {
		closeAll(statusW)
		if err := launcher.Await(status); err != nil {
			_ = c.Wait()
			_ = r.kill(c.Process.Pid, cg)
			closeAll(outR, errR)
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, fmt.Errorf("process: start %s: %w", cmd.Binary, err)
		}
	}
	stdout, stderr := &capture{max: r.maxOutput}, &capture{max: r.maxOutput}
	var wg sync.WaitGroup
	wg.Go(func() { stdout.drain(outR) })
	wg.Go(func() { stderr.drain(errR) })

	waitErr := c.Wait()
	// Background jobs of the child stay in its cgroup and group: kill them
	// so that nothing outlives the call and the pipes close.
	_ = r.kill(c.Process.Pid, cg)
	drained := make(chan struct{})
	go func() {
		wg.Wait()
		close(drained)
	}()
	timer := time.NewTimer(drainDelay)
	select {
	case <-drained:
		timer.Stop()
	case <-timer.C:
		// A descendant that escaped the kill holds the pipes: stop reading.
		closeAll(outR, errR)
		<-drained
	}
	closeAll(outR, errR)

	res := &tool.ProcessResult{ExitCode: -1, Stdout: stdout.bytes(), Stderr: stderr.bytes()}
	if killed.Load() {
		return res, context.Cause(ctx)
	}
	if c.ProcessState == nil {
		return nil, fmt.Errorf("process: wait %s: %w", cmd.Binary, waitErr)
	}
	res.ExitCode = exitCode(c.ProcessState)
	return res, nil
}

// kill sends SIGKILL to the child's cgroup, when it has one, and to its
// process group pgid.
func (r *runner) kill(pgid int, cg *cgroup) error {
	var err error
	if cg != nil {
		err = cg.kill()
	}
	return errors.Join(err, killGroup(pgid))
}

// removeTmp removes the child's TMPDIR, logging a failure (a child can
// make a directory in it unreadable; Run's result does not depend on it).
func (r *runner) removeTmp(ctx context.Context, tmp string) {
	if err := os.RemoveAll(tmp); err != nil {
		r.log.WarnContext(ctx, "process TMPDIR not removed", "error", err)
	}
}

// removeCgroup removes the call's cgroup, logging a failure (Run's result
// does not depend on it).
func (r *runner) removeCgroup(ctx context.Context, cg *cgroup) {
	if err := cg.remove(); err != nil {
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

func (r *runner) denied(err error) {
	if r.onDeny != nil {
		r.onDeny(err)
	}
}
