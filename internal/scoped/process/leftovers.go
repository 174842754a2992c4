package process

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Leftovers. A worker killed with SIGKILL leaves its children's private
// TMPDIRs and cgroups behind (and, without a cgroup, maybe the children).
// So that the next start can tell them from those of a live worker on the
// same machine:
//
//   - a process's children's TMPDIRs live in one directory of its own,
//     <TmpDir>/capstan-worker-<owner>-<random>, that holds a lock file the
//     process keeps locked (flock) for as long as it lives; the lock goes
//     with the process, whatever kills it, and works across PID namespaces
//     sharing a temp dir;
//   - a per-call cgroup is named capstan-call-<owner>-<random>, where owner
//     is the process's pid and start time, which /proc tells for a live
//     process.
//
// Sweep removes what belongs to processes that are gone. Release removes
// what a process that stops cleanly holds.

// owner is this process's identity in the names of its leftovers:
// "<pid>.<start time in clock ticks since boot>".
var owner = sync.OnceValue(func() string {
	pid := os.Getpid()
	return strconv.Itoa(pid) + "." + strconv.FormatUint(startTime(pid), 10)
})

// startTime returns the start time of process pid (field 22 of
// /proc/<pid>/stat), 0 when it cannot be read.
func startTime(pid int) uint64 {
	f := statFields(pid)
	if len(f) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(f[19], 10, 64)
	return n
}

// statFields returns the fields of /proc/<pid>/stat after the command (the
// state, field 3, first), nil when it cannot be read.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// ownerAlive reports whether the process named by an owner string runs.
func ownerAlive(o string) bool {
	pidText, start, ok := strings.Cut(o, ".")
	pid, err := strconv.Atoi(pidText)
	if !ok || err != nil || pid <= 0 {
		return false
	}
	n, err := strconv.ParseUint(start, 10, 64)
	return err == nil && startTime(pid) == n
}

const (
	workerDirPrefix = "capstan-worker-"
	lockName        = ".lock"
	// legacyPrefix named children's TMPDIRs directly in the temp dir
	// before they had an owner directory.
	legacyPrefix = "capstan-proc-"
	// legacyAge is how old a legacy TMPDIR must be for Sweep to remove it:
	// it has no owner to ask.
	legacyAge = 24 * time.Hour
)

// ownerDirs maps a temp root to this process's owner directory in it. A
// child's TMPDIR is created under the read lock; Release takes the write
// lock to remove the directories.
var ownerDirs = struct {
	sync.RWMutex
	m map[string]*ownerDir
}{m: map[string]*ownerDir{}}

type ownerDir struct {
	path string
	lock *os.File // kept open and locked until Release
	// live counts the children's TMPDIRs in it not yet removed; it grows
	// only under ownerDirs' read lock.
	live atomic.Int64
}

// childTmp creates a fresh private TMPDIR for one child under this
// process's owner directory in root, creating that first when there is
// none. The caller removes it with removeChildTmp.
func childTmp(root string) (string, *ownerDir, error) {
	ownerDirs.RLock()
	if od := ownerDirs.m[root]; od != nil {
		defer ownerDirs.RUnlock()
		return od.mkdir()
	}
	ownerDirs.RUnlock()
	ownerDirs.Lock()
	defer ownerDirs.Unlock()
	od := ownerDirs.m[root]
	if od == nil {
		path, lock, err := makeOwnerDir(root)
		if err != nil {
			return "", nil, err
		}
		od = &ownerDir{path: path, lock: lock}
		ownerDirs.m[root] = od
	}
	return od.mkdir()
}

// mkdir creates a child's TMPDIR in od; ownerDirs is locked.
func (od *ownerDir) mkdir() (string, *ownerDir, error) {
	od.live.Add(1)
	tmp, err := os.MkdirTemp(od.path, "proc-")
	if err != nil {
		od.live.Add(-1)
		return "", nil, fmt.Errorf("process: create the child's TMPDIR: %w", err)
	}
	return tmp, od, nil
}

// removeChildTmp removes a child's TMPDIR tmp, made in od by childTmp.
func removeChildTmp(tmp string, od *ownerDir) error {
	defer od.live.Add(-1)
	return os.RemoveAll(tmp)
}

// Release removes what this process holds for its children: the per-call
// cgroups kept for reuse (ReleaseIdleCgroups) and its children's temp
// directories (capstan-worker-<owner>-*, with their lock), so that a
// process that stops cleanly leaves nothing in the temp directory. A temp
// directory that still holds the TMPDIR of a child that has not been
// waited for stays (Sweep removes it after this process is gone); a child
// started later gets a new one. Failures are logged to log (nil:
// slog.Default()). The worker calls it when it stops, after its last call.
func Release(log *slog.Logger) {
	if log == nil {
		log = slog.Default()
	}
	ReleaseIdleCgroups()
	ownerDirs.Lock()
	defer ownerDirs.Unlock()
	for root, od := range ownerDirs.m {
		if n := od.live.Load(); n > 0 {
			log.Warn("process temp dir not removed: children still running", "dir", od.path, "children", n)
			continue
		}
		delete(ownerDirs.m, root)
		// The lock is removed with the directory, then released: another
		// worker's Sweep never sees the directory unlocked.
		if err := removeAll(od.path); err != nil {
			log.Warn("process temp dir not removed", "dir", od.path, "error", err)
		}
		_ = od.lock.Close()
	}
}

// makeOwnerDir creates this process's owner directory in root and locks it.
func makeOwnerDir(root string) (string, *os.File, error) {
	dir, err := os.MkdirTemp(root, workerDirPrefix+owner()+"-")
	if err != nil {
		return "", nil, fmt.Errorf("process: create the children's temp dir: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("process: lock the children's temp dir: %w", err)
	}
	return dir, lock, nil
}

// SweepResult is what Sweep removed.
type SweepResult struct {
	// TempDirs counts the removed temp directories of dead workers
	// (each holding the TMPDIRs of its children) and legacy TMPDIRs.
	TempDirs int
	// Cgroups counts the removed per-call cgroups of dead workers, whose
	// processes were killed first.
	Cgroups int
}

// Sweep removes what processes that are gone left behind: their children's
// temp directories under tmpRoot (empty: os.TempDir()), and their per-call
// cgroups, after killing what still runs in them, under the parents this
// process would use. Errors on single entries are logged and skipped. The
// worker calls it at start.
func Sweep(tmpRoot string, log *slog.Logger) SweepResult {
	if tmpRoot == "" {
		tmpRoot = os.TempDir()
	}
	if log == nil {
		log = slog.Default()
	}
	var res SweepResult
	entries, err := os.ReadDir(tmpRoot)
	if err != nil {
		log.Warn("process leftovers: cannot list the temp dir", "dir", tmpRoot, "error", err)
	}
	for _, e := range entries {
		path := filepath.Join(tmpRoot, e.Name())
		switch {
		case !e.IsDir():
		case strings.HasPrefix(e.Name(), workerDirPrefix):
			if abandoned(path) {
				if err := removeAll(path); err != nil {
					log.Warn("process leftovers: temp dir not removed", "dir", path, "error", err)
					continue
				}
				res.TempDirs++
			}
		case strings.HasPrefix(e.Name(), legacyPrefix):
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > legacyAge {
				if err := removeAll(path); err == nil {
					res.TempDirs++
				}
			}
		}
	}
	sb := probedSandbox()
	var parents []string
	if sb.cgErr == nil {
		parents = append(parents, sb.cgroup)
	}
	for _, ctl := range controllers {
		if d := sb.ceil.v1[ctl]; d != "" {
			parents = append(parents, d)
		}
	}
	for _, parent := range parents {
		res.Cgroups += sweepCgroups(parent, log)
	}
	return res
}

// abandoned reports whether a worker temp dir's owner is gone: its lock
// is free and the process its name records is not alive. Both: between
// creating the lock file and locking it, a live owner's lock is free.
func abandoned(dir string) bool {
	o, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(dir), workerDirPrefix), "-")
	if ownerAlive(o) {
		return false
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		// Not locked by a process that is gone, or broken.
		return true
	}
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

// removeAll removes dir, making directories a child left unwritable
// writable first.
func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// sweepCgroups kills and removes the per-call cgroups under parent whose
// owner is gone, and returns how many it removed.
func sweepCgroups(parent string, log *slog.Logger) int {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), callCgroupPrefix)
		if !e.IsDir() || !ok {
			continue
		}
		o, _, _ := strings.Cut(rest, "-")
		if !strings.Contains(o, ".") || ownerAlive(o) {
			continue // a live owner's, or an older worker's without an owner
		}
		dir := filepath.Join(parent, e.Name())
		cg := &cgroup{dir: dir}
		var err error
		if _, statErr := os.Stat(filepath.Join(dir, "cgroup.kill")); statErr == nil {
			err = cg.kill()
		} else {
			err = killProcs(dir)
		}
		if err == nil {
			err = waitEmpty(dir)
		}
		if err == nil {
			err = os.Remove(dir)
		}
		if err != nil {
			log.Warn("process leftovers: cgroup not removed", "cgroup", dir, "error", err)
			continue
		}
		n++
	}
	return n
}

// waitEmpty waits (at most cgroupRemoveTimeout) until no process is left
// in the cgroup dir.
func waitEmpty(dir string) error {
	deadline := time.Now().Add(cgroupRemoveTimeout)
	pause := time.Millisecond
	for {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return err
		}
		if len(strings.TrimSpace(string(b))) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still has processes %s after they were killed", cgroupRemoveTimeout)
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}
