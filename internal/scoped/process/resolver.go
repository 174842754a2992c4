package process

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/capstanhq/capstan/tool"
)

// DefaultTrustedPATH is the trusted PATH when none is configured. It is
// never taken from the worker's own $PATH.
var DefaultTrustedPATH = []string{"/usr/local/bin", "/usr/bin", "/bin"}

// Resolver resolves bare binary names on a fixed trusted PATH and caches
// each answer, found or not, for its lifetime: a name is looked up on disk
// once (the worker builds one Resolver at start-up and shares it between
// calls). It is safe for concurrent use.
type Resolver struct {
	path []string

	mu    sync.RWMutex
	cache map[string]resolved
}

type resolved struct {
	path string
	err  error
}

// NewResolver returns a Resolver over path, in order (nil or empty:
// DefaultTrustedPATH). Empty entries are skipped; a relative entry is a
// programmer error and panics, since it would resolve against the worker's
// current directory.
func NewResolver(path []string) *Resolver {
	if len(path) == 0 {
		path = DefaultTrustedPATH
	}
	r := &Resolver{cache: map[string]resolved{}}
	for _, dir := range path {
		if dir == "" {
			continue
		}
		if !filepath.IsAbs(dir) {
			panic(fmt.Sprintf("process: trusted PATH entry %q must be absolute", dir))
		}
		r.path = append(r.path, filepath.Clean(dir))
	}
	return r
}

// Path returns the directories the Resolver searches, in order.
func (r *Resolver) Path() []string { return slices.Clone(r.path) }

// Resolve returns the absolute path of the first executable regular file
// named name in the trusted PATH. name must be a bare name: non-empty,
// without '/', NUL, and not "." or "..". A name that is not found gives an
// error wrapping exec.ErrNotFound; it is not a denial.
func (r *Resolver) Resolve(name string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return "", fmt.Errorf("resolve binary %q: not a bare name", name)
	}
	r.mu.RLock()
	res, ok := r.cache[name]
	r.mu.RUnlock()
	if ok {
		return res.path, res.err
	}
	res = r.lookup(name)
	r.mu.Lock()
	if prev, ok := r.cache[name]; ok {
		res = prev
	} else {
		r.cache[name] = res
	}
	r.mu.Unlock()
	return res.path, res.err
}

func (r *Resolver) lookup(name string) resolved {
	for _, dir := range r.path {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		// Missing or unreadable entries are skipped, as exec.LookPath does.
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return resolved{path: p}
		}
	}
	return resolved{err: fmt.Errorf("resolve binary %q on the trusted PATH %s: %w", name, strings.Join(r.path, string(os.PathListSeparator)), exec.ErrNotFound)}
}

// binaryPath returns the path to execute for cmd.Binary.
func (r *Runner) binaryPath(cmd tool.Command) (string, error) {
	switch {
	case !strings.ContainsRune(cmd.Binary, '/'):
		return r.resolver.Resolve(cmd.Binary)
	case filepath.IsAbs(cmd.Binary):
		return filepath.Clean(cmd.Binary), nil
	case cmd.Dir == "":
		return "", fmt.Errorf("process: relative binary %q needs an absolute dir", cmd.Binary)
	}
	return filepath.Join(cmd.Dir, cmd.Binary), nil
}
