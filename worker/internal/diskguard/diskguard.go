// Package diskguard keeps tools from filling the file system of a worker's
// data directory (security.md section 1, "Disk").
package diskguard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/dustin/go-humanize"
	"golang.org/x/sys/unix"
)

// checkEvery bounds how often the free space is read (statfs); calls
// in between use the last reading.
const checkEvery = 250 * time.Millisecond

// Guard keeps tools from filling the file system of the worker's data
// directory, which the JetStream store of an embedded server shares: while
// its free space is below min, calls that start processes or write files
// are handed back (security.md section 1, "Disk").
type Guard struct {
	dir string
	min int64 // <= 0: off
	// free returns the free space, in bytes, available to unprivileged
	// users of dir's file system.
	free func(dir string) (int64, error)

	mu      sync.Mutex
	at      time.Time
	last    int64
	lastErr error
}

// New returns the guard of dir's file system with a floor of min bytes
// free (<= 0: off).
func New(dir string, min int64) *Guard {
	return &Guard{dir: dir, min: min, free: freeSpace}
}

// freeSpace is the space available to unprivileged users on dir's file
// system; a dir that does not exist yet is measured at its nearest
// existing parent.
func freeSpace(dir string) (int64, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return 0, err
	}
	for {
		var st unix.Statfs_t
		err := unix.Statfs(abs, &st)
		if err == nil {
			return int64(st.Bavail) * st.Bsize, nil
		}
		parent := filepath.Dir(abs)
		if !errors.Is(err, os.ErrNotExist) || parent == abs {
			return 0, fmt.Errorf("statfs %s: %w", abs, err)
		}
		abs = parent
	}
}

// Needed reports whether a call of grant is held to the floor of free
// space: it starts processes or writes files.
func Needed(g *capability.Grant) bool {
	return g != nil && (g.Process != nil || (g.FS != nil && len(g.FS.Write) > 0))
}

// Low returns the refusal of a call that needs disk while free space is
// below the floor ("disk: <free> free, below CAPSTAN_MIN_FREE_DISK
// (<min>)"), nil otherwise. A reading that fails does not hold calls back
// (the readiness check reports it).
func (g *Guard) Low() error {
	if g == nil || g.min <= 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := time.Now(); g.at.IsZero() || now.Sub(g.at) >= checkEvery {
		g.last, g.lastErr = g.free(g.dir)
		g.at = now
	}
	if g.lastErr != nil || g.last >= g.min {
		return nil
	}
	return &lowDiskError{free: g.last, min: g.min}
}

// Check is the "disk" readiness check: it reads the free space now.
func (g *Guard) Check() error {
	if g == nil || g.min <= 0 {
		return nil
	}
	free, err := g.free(g.dir)
	if err != nil {
		return fmt.Errorf("disk: cannot read the free space of the data directory: %w", err)
	}
	if free < g.min {
		return &lowDiskError{free: free, min: g.min}
	}
	return nil
}

// lowDiskError is the reason a call that needs disk is handed back.
type lowDiskError struct{ free, min int64 }

// Error returns "disk: <free> free, below CAPSTAN_MIN_FREE_DISK (<min>)".
func (e *lowDiskError) Error() string {
	return fmt.Sprintf("disk: %s free, below CAPSTAN_MIN_FREE_DISK (%s)",
		humanize.IBytes(uint64(max(e.free, 0))), humanize.IBytes(uint64(e.min)))
}
