// Package process is the scoped process accessor: tool.Runner built from one
// call's resolved process grant (capability.BinaryGrant).
//
// A child is never started through a shell. Its binary must be allowed by
// the grant (a bare name is then resolved on the trusted PATH, never the
// worker's $PATH); its environment is minimal (PATH, HOME, LANG, TZ, TMPDIR
// plus the caller's variables, never the worker's own); it runs in its own
// process group, which is killed with SIGKILL when the call's context ends
// and again after the child exits, so no background job outlives the call;
// stdout and stderr are captured and capped.
//
// The runner does not scope what the child itself touches: a child reaches
// whatever the worker's OS user reaches. Command.Dir in particular is not
// checked against any fs_reach; the tool that builds the Command is
// responsible for that check (through its tool.FS) when it needs one.
package process

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
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
	"github.com/capstanhq/capstan/tool"
)

// DefaultMaxOutputBytes is the per-stream output cap when
// Config.MaxOutputBytes is zero.
const DefaultMaxOutputBytes = 1 << 20

// TruncatedMarker ends a stream that was cut at the output cap.
const TruncatedMarker = "\n[output truncated]"

// drainDelay bounds how long Run waits, after the child has exited or been
// killed, for its output pipes to close. A descendant that left the process
// group (setsid) can hold them open forever; after drainDelay Run closes its
// ends and returns what it has.
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
	// Home is the child's HOME. Empty: the child's TMPDIR.
	Home string
	// TmpDir is the child's TMPDIR. Empty: os.TempDir().
	TmpDir string
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
	resolver  *Resolver
	maxOutput int
	baseEnv   map[string]string
	onDeny    func(error)
}

// New returns the process runner of grant g: a nil g denies every Run.
// Bare names are resolved with res, which the worker builds once and
// shares (nil: a Resolver over cfg.TrustedPATH, private to this runner).
// onDeny, when not nil, is called with every denial before it is returned;
// it must not block. cfg must be valid (Config.Validate); New panics
// otherwise, since that is a start-up configuration error. The runner is
// safe for concurrent use.
func New(g *capability.BinaryGrant, res *Resolver, cfg Config, onDeny func(error)) tool.Runner {
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
	tmp := cmp.Or(cfg.TmpDir, os.TempDir())
	r := &runner{
		resolver:  res,
		maxOutput: cmp.Or(cfg.MaxOutputBytes, DefaultMaxOutputBytes),
		onDeny:    onDeny,
		baseEnv: map[string]string{
			"PATH":   strings.Join(trusted, string(os.PathListSeparator)),
			"HOME":   cmp.Or(cfg.Home, tmp),
			"LANG":   "C.UTF-8",
			"TZ":     "UTC",
			"TMPDIR": tmp,
		},
	}
	if g != nil {
		r.grant = &capability.BinaryGrant{Declared: slices.Clone(g.Declared)}
		if g.Ceiling != nil {
			r.grant.Ceiling = &capability.Ceiling{Allow: slices.Clone(g.Ceiling.Allow)}
		}
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
//     and TMPDIR, then cmd.Env, whose values win. A name starting with LD_
//     or DYLD_ (any case) is refused: "ENV_NOT_ALLOWED: <name> may not be
//     set for a child process". An empty name, or one containing '=' or
//     NUL, and a value containing NUL are errors.
//   - cmd.Dir must be absolute; empty means "/" (never the worker's
//     current directory). It is not checked against any fs_reach.
//   - cmd.Stdin is the child's stdin (empty: /dev/null).
//
// A child that exits, with any status, gives a ProcessResult and a nil
// error: ExitCode is its exit status, or 128+n when signal n killed it.
// When ctx ends first, the child's process group is killed and Run returns
// context.Cause(ctx) with the output captured so far (ExitCode -1). After
// the child ends (exit or kill) its whole process group is killed, so
// background jobs do not outlive the call; a descendant that left the group
// and holds the pipes delays Run by a few seconds at most.
func (r *runner) Run(ctx context.Context, cmd tool.Command) (*tool.ProcessResult, error) {
	if cmd.Binary == "" {
		return nil, errors.New("process: empty binary name")
	}
	if err := r.grant.Check(cmd.Binary); err != nil {
		r.denied(err)
		return nil, err
	}
	env, err := r.env(cmd.Env)
	if err != nil {
		return nil, err
	}
	dir := "/"
	if cmd.Dir != "" {
		if !filepath.IsAbs(cmd.Dir) {
			return nil, fmt.Errorf("process: dir %q must be an absolute path", cmd.Dir)
		}
		dir = filepath.Clean(cmd.Dir)
	}
	path, err := r.binaryPath(cmd)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	return r.run(ctx, path, dir, env, cmd)
}

// binaryPath returns the path to execute for cmd.Binary.
func (r *runner) binaryPath(cmd tool.Command) (string, error) {
	switch {
	case !strings.ContainsRune(cmd.Binary, '/'):
		return r.resolver.Resolve(cmd.Binary)
	case filepath.IsAbs(cmd.Binary):
		return cmd.Binary, nil
	case cmd.Dir == "":
		return "", fmt.Errorf("process: relative binary %q needs an absolute dir", cmd.Binary)
	}
	return filepath.Join(cmd.Dir, cmd.Binary), nil
}

// env returns the child's environment, sorted.
func (r *runner) env(extra map[string]string) ([]string, error) {
	names := slices.Sorted(maps.Keys(extra))
	for _, name := range names {
		upper := strings.ToUpper(name)
		if strings.HasPrefix(upper, "LD_") || strings.HasPrefix(upper, "DYLD_") {
			err := tool.Deny(tool.ErrEnvNotAllowed, name+" may not be set for a child process")
			r.denied(err)
			return nil, err
		}
	}
	for _, name := range names {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return nil, fmt.Errorf("process: invalid environment variable name %q", name)
		}
		if strings.ContainsRune(extra[name], 0) {
			return nil, fmt.Errorf("process: value of environment variable %s contains NUL", name)
		}
	}
	all := maps.Clone(r.baseEnv)
	maps.Copy(all, extra)
	env := make([]string, 0, len(all))
	for _, name := range slices.Sorted(maps.Keys(all)) {
		env = append(env, name+"="+all[name])
	}
	return env, nil
}

// run starts the child in its own process group and collects its result.
func (r *runner) run(ctx context.Context, path, dir string, env []string, cmd tool.Command) (*tool.ProcessResult, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("process: stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return nil, fmt.Errorf("process: stderr pipe: %w", err)
	}
	c := exec.CommandContext(ctx, path)
	c.Args = append([]string{cmd.Binary}, cmd.Args...)
	c.Env = env
	c.Dir = dir
	c.Stdout, c.Stderr = outW, errW
	if len(cmd.Stdin) > 0 {
		c.Stdin = bytes.NewReader(cmd.Stdin)
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var killed atomic.Bool
	c.Cancel = func() error {
		killed.Store(true)
		return killGroup(c.Process.Pid)
	}
	// WaitDelay bounds the stdin copier when a descendant holds stdin.
	c.WaitDelay = drainDelay
	if err := c.Start(); err != nil {
		closeAll(outR, outW, errR, errW)
		return nil, fmt.Errorf("process: start %s: %w", cmd.Binary, err)
	}
	closeAll(outW, errW)
	stdout, stderr := &capture{max: r.maxOutput}, &capture{max: r.maxOutput}
	var wg sync.WaitGroup
	wg.Go(func() { stdout.drain(outR) })
	wg.Go(func() { stderr.drain(errR) })

	waitErr := c.Wait()
	// Background jobs of the child stay in its group: kill them so that
	// nothing outlives the call and the pipes close.
	_ = killGroup(c.Process.Pid)
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
		// A descendant outside the group holds the pipes: stop reading.
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
