package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
	"github.com/capstanhq/capstan/internal/scoped/process/zygote"
	"github.com/capstanhq/capstan/tool"
)

// Child is a child process started by Runner.Start: checked, confined,
// placed in its cgroups and served its egress proxy exactly as a Run's
// child. Its standard streams are the caller's; Wait must be called once,
// after which nothing of the child is left.
type Child struct {
	// Stdin is the write end of the child's standard input.
	Stdin io.WriteCloser
	// Stdout and Stderr are the read ends of the child's standard output
	// and error; they reach EOF once the child and every process holding
	// them are gone (Wait kills them all, when it can).
	Stdout, Stderr io.ReadCloser
	// Pid is the child's process id (the launcher's, which became the
	// child's binary).
	Pid int

	r       *Runner
	ctx     context.Context
	name    string // cmd.Binary, for messages
	proc    *os.Process
	unwatch func() bool // stops the kill at the end of ctx
	cg      *callCgroup
	tmp     string
	owner   *ownerDir // where tmp is
	tmpfs   *os.File  // the root of the tmpfs on tmp; nil without one
	killed  atomic.Bool
	// mu orders Kill with the end of the child: once reaped is set, its
	// cgroup may serve another call and its process group id another
	// process, so Kill touches neither.
	mu     sync.Mutex
	reaped bool
	stop   func() // stops the egress proxy; nil without one
	once   sync.Once
	exit   *tool.ProcessResult
	err    error
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
//     and TMPDIR (a fresh private directory, removed when Run returns; a
//     tmpfs of the grant's tmp limit where the child has a user
//     namespace), then cmd.Env, whose values win, then for a call with network the
//     proxy variables. A name starting with LD_ or DYLD_ (any case) is
//     refused: "ENV_NOT_ALLOWED: <name> may not be set for a child
//     process". An empty name, or one containing '=' or NUL, and a value
//     containing NUL are errors.
//   - cmd.Dir must be absolute and covered by the reach's read or write
//     prefixes, else "PATH_NOT_REACHABLE: read not permitted for <dir>",
//     and must be a directory, else "process: working directory <dir>:
//     <system error>" (wrapping it); empty means "/" (never the worker's
//     current directory), where a confined child can list nothing.
//   - cmd.Stdin is the child's stdin (empty: end of file at once).
//   - A call with network on a machine without network namespaces is
//     refused (ErrNetworkRefused) unless the Config allows it.
//
// A child that exits, with any status, gives a ProcessResult and a nil
// error: ExitCode is its exit status, or 128+n when signal n killed it,
// and LimitsHit names the ceilings its processes met ("pids limit <n>
// reached", "tmp limit <size> reached": it filled its TMPDIR). When the memory
// ceiling killed one of them the result comes with a *tool.LimitError.
// When ctx ends first, the child's cgroup and process group are killed and
// Run returns context.Cause(ctx) with the output captured so far (ExitCode
// -1). After the child ends (exit or kill) they are killed again, so
// background jobs do not outlive the call. A binary that cannot be started
// (missing, not executable, confinement refused) is an error wrapping the
// system error.
func (r *Runner) Run(ctx context.Context, cmd tool.Command) (*tool.ProcessResult, error) {
	ch, err := r.Start(ctx, cmd)
	if err != nil {
		return nil, err
	}
	stdout, stderr := &capture{max: r.maxOutput}, &capture{max: r.maxOutput}
	var wg sync.WaitGroup
	// The writer ends with EPIPE once every reader is gone (Wait kills
	// them all).
	wg.Go(func() {
		if len(cmd.Stdin) > 0 {
			_, _ = ch.Stdin.Write(cmd.Stdin)
		}
		_ = ch.Stdin.Close()
	})
	wg.Go(func() { stdout.drain(ch.Stdout) })
	wg.Go(func() { stderr.drain(ch.Stderr) })
	res, err := ch.Wait()
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
		_ = ch.Stdout.Close()
		_ = ch.Stderr.Close()
		<-drained
	}
	_ = ch.Stdout.Close()
	_ = ch.Stderr.Close()
	if res == nil {
		return nil, err
	}
	res.Stdout, res.Stderr = stdout.bytes(), stderr.bytes()
	return res, err
}

// Start starts cmd as Run does (the same checks, environment, working
// directory, confinement, cgroups and egress proxy; cmd.Stdin is ignored)
// and returns at once with the child's pipes, for a child that lives as
// long as its caller talks to it (a hosted MCP server). The child is
// killed when ctx ends; the caller must call Wait.
func (r *Runner) Start(ctx context.Context, cmd tool.Command) (*Child, error) {
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
	mode, err := r.netMode()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	tmp, owner, err := childTmp(r.tmpRoot)
	if err != nil {
		return nil, err
	}
	ch, err := r.start(ctx, path, dir, tmp, mode, cmd)
	if err != nil {
		r.removeTmp(ctx, tmp, owner)
		return nil, err
	}
	ch.owner = owner
	return ch, nil
}

// start starts the child in its own process group (and cgroups, when there
// are), confined through the zygote when this binary has one, else through
// the launcher, and serves its egress proxy when it has one. On error
// nothing is left but tmp.
func (r *Runner) start(ctx context.Context, path, dir, tmp string, mode launcher.Net, cmd tool.Command) (_ *Child, err error) {
	ch := &Child{r: r, ctx: ctx, tmp: tmp, name: cmd.Binary}
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	argv := append([]string{cmd.Binary}, cmd.Args...)
	env := r.environ(cmd.Env, tmp, mode == launcher.NetProxy)
	if r.cgroup != "" || len(r.ceil.v1) > 0 {
		if ch.cg, err = acquireCgroup(r.cgroup, r.ceil, r.limits); err != nil {
			return nil, err
		}
		cleanup = append(cleanup, func() { r.releaseCgroup(ctx, ch.cg) })
	}
	pipe := func(what string) (rd, wr *os.File, err error) {
		rd, wr, err = os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("process: %s pipe: %w", what, err)
		}
		cleanup = append(cleanup, func() { closeAll(rd, wr) })
		return rd, wr, nil
	}
	inR, inW, err := pipe("stdin")
	if err != nil {
		return nil, err
	}
	outR, outW, err := pipe("stdout")
	if err != nil {
		return nil, err
	}
	errR, errW, err := pipe("stderr")
	if err != nil {
		return nil, err
	}
	var v1 []string
	if ch.cg != nil {
		v1 = ch.cg.v1Dirs()
	}
	confined := r.landlock || r.seccomp || r.netns || len(v1) > 0
	var status *os.File // the runner's end of the status channel
	switch {
	case confined && r.zygote:
		status, err = r.spawnZygote(ch, path, dir, argv, env, r.spec(path, tmp, mode, v1), inR, outW, errW)
	default:
		status, err = r.spawnExec(ch, path, dir, argv, env, confined, r.spec(path, tmp, mode, v1), inR, outW, errW)
	}
	if err != nil {
		return nil, err
	}
	closeAll(inR, outW, errW)
	ch.Stdin, ch.Stdout, ch.Stderr = inW, outR, errR
	reap := func() {
		_ = r.kill(ch.Pid, ch.cg)
		_, _ = ch.proc.Wait()
	}
	if status != nil {
		files, aerr := launcher.AwaitFiles(status)
		if aerr != nil {
			reap()
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, fmt.Errorf("process: start %s: %w", cmd.Binary, aerr)
		}
		ch.tmpfs = files.Tmp
		if files.Listener != nil {
			if ch.stop, err = r.serveEgress(ctx, files.Listener); err != nil {
				reap()
				closeFile(ch.tmpfs)
				return nil, err
			}
		}
	}
	// The call's end kills the child and everything it started.
	ch.unwatch = context.AfterFunc(ctx, func() { _ = ch.Kill() })
	return ch, nil
}

// spawnExec starts the child with os/exec: through the launcher when it is
// confined (the launcher's status channel is returned), else directly.
func (r *Runner) spawnExec(ch *Child, path, dir string, argv, env []string, confined bool, spec launcher.Spec, in, out, errw *os.File) (*os.File, error) {
	c := exec.Command(path)
	c.Args, c.Env, c.Dir = argv, env, dir
	c.Stdin, c.Stdout, c.Stderr = in, out, errw
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if ch.cg != nil && ch.cg.v2 != nil {
		c.SysProcAttr.UseCgroupFD = true
		c.SysProcAttr.CgroupFD = int(ch.cg.v2.fd.Fd())
	}
	var h *launcher.Handle
	if confined {
		if spec.NetNS {
			launcher.NetNSAttr(c.SysProcAttr)
		}
		if spec.Tmp != "" {
			launcher.MountNSAttr(c.SysProcAttr)
		}
		var err error
		if h, err = launcher.Prepare(c, spec, path, argv); err != nil {
			return nil, fmt.Errorf("process: %w", err)
		}
	}
	if err := c.Start(); err != nil {
		if h != nil {
			h.Close()
		}
		return nil, fmt.Errorf("process: start %s: %w", argv[0], err)
	}
	ch.proc, ch.Pid = c.Process, c.Process.Pid
	if h == nil {
		return nil, nil
	}
	h.Started()
	return h.Status(), nil
}

// spawnZygote starts the confined child through the zygote and returns the
// runner's end of its status channel.
func (r *Runner) spawnZygote(ch *Child, path, dir string, argv, env []string, spec launcher.Spec, in, out, errw *os.File) (_ *os.File, err error) {
	ours, theirs, err := launcher.Channel()
	if err != nil {
		return nil, err
	}
	defer closeAll(theirs)
	defer func() {
		if err != nil {
			closeAll(ours)
		}
	}()
	req := zygote.Request{
		Path: path, Argv: argv, Env: env, Dir: dir,
		NetNS: spec.NetNS, Proxy: spec.Net == launcher.NetProxy, UID: os.Geteuid(), GID: os.Getegid(), ProxyPort: launcher.ProxyPort,
		Tmp: spec.Tmp, TmpBytes: spec.TmpBytes,
		CgroupsV1: spec.Cgroups, Status: theirs, Stdin: in, Stdout: out, Stderr: errw,
	}
	if spec.Landlock {
		if req.Ruleset, err = launcher.Ruleset(spec); err != nil {
			return nil, fmt.Errorf("process: %w", err)
		}
		defer closeAll(req.Ruleset)
		if spec.Tmp != "" {
			if req.TmpAccess, err = launcher.TmpAccess(); err != nil {
				return nil, fmt.Errorf("process: %w", err)
			}
		}
	}
	if spec.Seccomp {
		if req.Filter, err = launcher.Filter(spec.Net != launcher.NetNone); err != nil {
			return nil, fmt.Errorf("process: %w", err)
		}
	}
	if ch.cg != nil && ch.cg.v2 != nil {
		req.CgroupV2 = ch.cg.v2.fd
	}
	pid, err := zygote.Spawn(req)
	if err != nil {
		return nil, fmt.Errorf("process: start %s: %w", argv[0], err)
	}
	// The child is this process's own (CLONE_PARENT): it stays a zombie
	// until waited for, so the pid cannot name another process.
	proc, err := os.FindProcess(pid)
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return nil, fmt.Errorf("process: start %s: %w", argv[0], err)
	}
	ch.proc, ch.Pid = proc, pid
	return ours, nil
}

// serveEgress serves the call's egress proxy on the listener the child's
// namespace handed back, until the returned stop is called.
func (r *Runner) serveEgress(ctx context.Context, f *os.File) (stop func(), err error) {
	ln, err := net.FileListener(f)
	closeAll(f)
	if err != nil {
		return nil, fmt.Errorf("process: egress listener: %w", err)
	}
	ectx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.reach.Egress.Serve(ectx, ln); err != nil && ectx.Err() == nil {
			r.log.WarnContext(ctx, "egress proxy stopped", "error", err)
		}
	}()
	return func() {
		cancel()
		_ = ln.Close()
		<-done
	}, nil
}

// Kill kills the child and everything it started (its cgroup and process
// group) at once; Wait then returns. After the child has ended and been
// cleaned up, Kill does nothing.
func (ch *Child) Kill() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.reaped {
		return nil
	}
	ch.killed.Store(true)
	return ch.r.kill(ch.Pid, ch.cg)
}

// Wait waits for the child to exit, then kills what it left running,
// stops its egress proxy, releases its tmpfs and removes its cgroups and
// TMPDIR. The result has ExitCode and LimitsHit (its Stdout and Stderr
// are the caller's to read from the pipes). The error is context.Cause of Start's ctx when that
// ended first or Kill was called (ExitCode -1), a *tool.LimitError when
// the memory ceiling killed one of the child's processes, or a wait
// failure. Later calls return the same.
func (ch *Child) Wait() (*tool.ProcessResult, error) {
	ch.once.Do(func() { ch.exit, ch.err = ch.wait() })
	return ch.exit, ch.err
}

func (ch *Child) wait() (*tool.ProcessResult, error) {
	r := ch.r
	state, waitErr := ch.proc.Wait()
	if ch.unwatch != nil {
		ch.unwatch()
	}
	// Background jobs of the child stay in its cgroup and group: kill them
	// so that nothing outlives the call and the pipes close. From here on
	// Kill leaves the cgroup, soon back in the pool, alone.
	ch.mu.Lock()
	_ = r.kill(ch.Pid, ch.cg)
	ch.reaped = true
	ch.mu.Unlock()
	if ch.stop != nil {
		ch.stop()
	}
	res := &tool.ProcessResult{ExitCode: -1}
	var memory, pids bool
	if ch.cg != nil {
		memory, pids = ch.cg.hits()
	}
	if pids {
		res.LimitsHit = append(res.LimitsHit, fmt.Sprintf("pids limit %d reached", r.limits.Pids))
	}
	// Before the cgroup goes back to the pool: closing the last reference
	// to the tmpfs frees its pages, which are charged to the cgroup.
	if r.releaseTmpfs(ch.ctx, ch.tmpfs) {
		res.LimitsHit = append(res.LimitsHit, "tmp limit "+r.limits.TmpText+" reached")
	}
	if ch.cg != nil {
		r.releaseCgroup(ch.ctx, ch.cg)
	}
	r.removeTmp(ch.ctx, ch.tmp, ch.owner)
	if ch.killed.Load() {
		err := context.Cause(ch.ctx)
		if err == nil {
			err = errKilled
		}
		return res, err
	}
	if state == nil {
		return nil, fmt.Errorf("process: wait %s: %w", ch.name, waitErr)
	}
	res.ExitCode = exitCode(state)
	if memory {
		return res, &tool.LimitError{Limit: "memory limit " + r.limits.MemoryText}
	}
	return res, nil
}

// errKilled is Wait's error after Kill while Start's context still runs.
var errKilled = errors.New("process: killed")
