package process

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
)

// cgroupRemoveTimeout bounds how long a call waits, after killing its
// cgroup, for the killed processes to be gone so that the cgroup can be
// removed.
const cgroupRemoveTimeout = 5 * time.Second

// ownCgroup returns the directory of this process's cgroup v2: the cgroup2
// mount point joined with the "0::" entry of /proc/self/cgroup.
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	path, ok := "", false
	for line := range strings.Lines(string(b)) {
		if p, found := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "0::"); found {
			path, ok = p, true
			break
		}
	}
	if !ok || !filepath.IsAbs(path) {
		return "", errors.New("this process is in no cgroup v2 (no 0:: entry in /proc/self/cgroup)")
	}
	mounts, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer mounts.Close()
	return cgroupDir(mounts, path)
}

// cgroupDir finds, in a mountinfo listing, the cgroup2 mount that shows
// path and returns path's directory under it.
func cgroupDir(mountinfo io.Reader, path string) (string, error) {
	sc := bufio.NewScanner(mountinfo)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 1 || tail[0] != "cgroup2" {
			continue
		}
		root, point := unescapeMount(fields[3]), unescapeMount(fields[4])
		rel, ok := strings.CutPrefix(path, root)
		if !ok || (rel != "" && root != "/" && !strings.HasPrefix(rel, "/")) {
			continue
		}
		return filepath.Join(point, rel), nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read /proc/self/mountinfo: %w", err)
	}
	return "", errors.New("no cgroup2 file system is mounted where this process's cgroup is visible")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// probeCgroup checks that a child cgroup with cgroup.kill (Linux 5.14) can
// be created under parent, that a process can be started inside it
// (clone3, which a seccomp filter may refuse), and that it can be removed
// again.
func probeCgroup(parent string) error {
	cg, err := newCgroup(parent)
	if err != nil {
		return fmt.Errorf("create a cgroup under %s: %w", parent, errors.Unwrap(err))
	}
	err = func() error {
		if _, err := os.Stat(filepath.Join(cg.dir, "cgroup.kill")); err != nil {
			return fmt.Errorf("cgroup.kill is not supported (Linux 5.14 or later is needed): %w", err)
		}
		if err := launcher.Check(&syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.fd.Fd())}); err != nil {
			return fmt.Errorf("start a process inside a cgroup: %w", err)
		}
		return nil
	}()
	_ = cg.fd.Close()
	if rmErr := os.Remove(cg.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("remove probe cgroup %s: %w", cg.dir, rmErr))
	}
	return err
}

// cgroup is the cgroup v2 of one child and all its descendants.
type cgroup struct {
	dir string
	// fd is open on dir, for clone3 to start the child inside the cgroup.
	fd *os.File
}

// newCgroup creates an empty cgroup under parent, named for this process
// (see owner) so that a later start can tell it was left behind.
func newCgroup(parent string) (*cgroup, error) {
	dir, err := os.MkdirTemp(parent, callCgroupPrefix+owner()+"-")
	if err != nil {
		return nil, fmt.Errorf("process: create cgroup: %w", err)
	}
	fd, err := os.Open(dir)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("process: open cgroup: %w", err)
	}
	return &cgroup{dir: dir, fd: fd}, nil
}

// kill sends SIGKILL to every process in the cgroup, at once.
func (c *cgroup) kill() error {
	f, err := os.OpenFile(filepath.Join(c.dir, "cgroup.kill"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("process: kill cgroup: %w", err)
	}
	_, err = f.Write([]byte("1"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("process: kill cgroup: %w", err)
	}
	return nil
}

// waitUnpopulated waits (up to cgroupRemoveTimeout) until no process is
// left in the cgroup or below.
func (c *cgroup) waitUnpopulated() error {
	deadline := time.Now().Add(cgroupRemoveTimeout)
	pause := 100 * time.Microsecond
	for {
		populated, err := c.populated()
		if err != nil {
			return err
		}
		if !populated {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process: cgroup %s still has processes %s after they were killed", c.dir, cgroupRemoveTimeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// remove kills what is left in the cgroup, waits (up to
// cgroupRemoveTimeout) until it is empty, and removes it.
func (c *cgroup) remove() error {
	defer c.fd.Close()
	if err := c.kill(); err != nil {
		return err
	}
	deadline := time.Now().Add(cgroupRemoveTimeout)
	pause := time.Millisecond
	for {
		populated, err := c.populated()
		if err != nil {
			return err
		}
		if !populated {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process: cgroup %s still has processes %s after they were killed", c.dir, cgroupRemoveTimeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
	if err := os.Remove(c.dir); err != nil {
		return fmt.Errorf("process: remove cgroup: %w", err)
	}
	return nil
}

// callCgroupPrefix starts the name of every per-call cgroup (v2 and v1).
const callCgroupPrefix = "capstan-call-"

// callCgroup is everything one Run's children are placed in: the cgroup v2
// that is killed as a whole (nil without one) and carries the v2
// ceilings, and the per-call cgroups of the v1 hierarchies that carry the
// others.
type callCgroup struct {
	v2    *cgroup
	v2ctl []string          // ceilings enforced by v2
	v1    map[string]string // controller -> per-call v1 directory
	// baseMemory and basePids are the oom_kill and pids "max" counters
	// when the call took the cgroups (they are reused: cgpool.go).
	baseMemory, basePids int64
	key                  string // its pool key
	// spent is set once cgroup.kill was written: this kernel then kills
	// every process later cloned into the cgroup (its kill sequence no
	// longer matches), so it is never reused.
	spent bool
}

// newCallCgroup creates the cgroups of one Run under the probed parents
// and writes the limits. parent is the v2 parent ("" for none).
func newCallCgroup(parent string, c ceilings, l capability.ProcessLimits) (*callCgroup, error) {
	cc := &callCgroup{}
	if parent != "" {
		cg, err := newCgroup(parent)
		if err != nil {
			return nil, err
		}
		cc.v2, cc.v2ctl = cg, c.v2
		if err := v2Limits(cg.dir, c.v2, l); err != nil {
			_ = cc.remove()
			return nil, err
		}
	}
	for _, ctl := range controllers {
		base := c.v1[ctl]
		if base == "" || (ctl == "cpu" && l.CPU == 0) {
			// No cpu limit: no cgroup to join (a join costs a migration).
			continue
		}
		dir, err := os.MkdirTemp(base, callCgroupPrefix+owner()+"-")
		if err != nil {
			_ = cc.remove()
			return nil, fmt.Errorf("process: create %s cgroup: %w", ctl, err)
		}
		if cc.v1 == nil {
			cc.v1 = map[string]string{}
		}
		cc.v1[ctl] = dir
		if err := v1Limits(ctl, dir, l); err != nil {
			_ = cc.remove()
			return nil, err
		}
	}
	cc.key = poolKey(parent, c, l)
	cc.baseMemory, cc.basePids = cc.counters()
	return cc, nil
}

// v1Dirs lists the per-call v1 directories, for the launcher to join.
func (cc *callCgroup) v1Dirs() []string {
	var out []string
	for _, ctl := range controllers {
		if d := cc.v1[ctl]; d != "" {
			out = append(out, d)
		}
	}
	return out
}

// kill sends SIGKILL to every process of the call. An empty cgroup v2 is
// left alone (see spent).
func (cc *callCgroup) kill() error {
	if cc.v2 != nil {
		if populated, err := cc.v2.populated(); err == nil && !populated {
			return nil
		}
		cc.spent = true
		return cc.v2.kill()
	}
	for _, dir := range cc.v1 {
		return killProcs(dir)
	}
	return nil
}

// hits reports which ceilings the call's processes reached since the call
// took the cgroups: the memory ceiling killed one of them, or the pids
// ceiling refused a fork.
func (cc *callCgroup) hits() (memory, pids bool) {
	m, p := cc.counters()
	return m > cc.baseMemory, p > cc.basePids
}

// remove kills what is left and removes every cgroup of the call.
func (cc *callCgroup) remove() error {
	var errs []error
	if cc.v2 != nil {
		errs = append(errs, cc.v2.remove())
	}
	for _, ctl := range controllers {
		dir := cc.v1[ctl]
		if dir == "" {
			continue
		}
		if err := killProcs(dir); err != nil {
			errs = append(errs, err)
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("process: remove cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// killProcs sends SIGKILL to the processes listed in dir's cgroup.procs
// until it is empty (at most cgroupRemoveTimeout): the kill of a cgroup
// without cgroup.kill.
func killProcs(dir string) error {
	deadline := time.Now().Add(cgroupRemoveTimeout)
	pause := time.Millisecond
	for {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("process: kill cgroup: %w", err)
		}
		pids := strings.Fields(string(b))
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process: cgroup %s still has processes %s after they were killed", dir, cgroupRemoveTimeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// populated reports whether a process is left in the cgroup or below.
func (c *cgroup) populated() (bool, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("process: read cgroup events: %w", err)
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("populated ")); ok {
			return string(v) != "0", nil
		}
	}
	return false, fmt.Errorf("process: %s has no populated entry", filepath.Join(c.dir, "cgroup.events"))
}
