package launcher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// carver adds the path rules of one ruleset around a floor (Spec.Floor):
// Landlock only allows, so a rule whose hierarchy holds a floor path is
// replaced by rules for everything beside it.
type carver struct {
	fd      int    // the ruleset
	handled uint64 // the file system rights the ruleset handles
	floor   []string
	lift    []string
	given   []string // the floor as given, for ids
	// ids are the identities of the floor entries that exist and that no
	// Lift path opens: an entry of an expanded directory with one of them
	// (a hard link, a bind mount) is the floor under another name. Built
	// at the first expansion (most rulesets have none).
	ids    []fileID
	idsSet bool
}

type fileID struct{ dev, ino uint64 }

// newCarver returns the carver of ruleset fd for floor and lift, each path
// taken as given and with symlinks resolved.
func newCarver(fd int, handled uint64, floor, lift []string) *carver {
	c := &carver{fd: fd, handled: handled, given: floor}
	dirs := map[string]string{} // resolved parents, shared by most paths
	both := func(list []string) []string {
		var out []string
		for _, p := range list {
			for _, q := range []string{p, realPathIn(p, dirs)} {
				if !slices.Contains(out, q) {
					out = append(out, q)
				}
			}
		}
		return out
	}
	c.floor, c.lift = both(floor), both(lift)
	return c
}

// floorIDs returns c.ids, built on the first call.
func (c *carver) floorIDs() []fileID {
	if !c.idsSet {
		c.idsSet = true
		for _, p := range c.given {
			var st unix.Stat_t
			if slices.Contains(c.lift, p) || unix.Stat(p, &st) != nil {
				continue
			}
			c.ids = append(c.ids, fileID{dev: st.Dev, ino: st.Ino})
		}
	}
	return c.ids
}

// add adds the rule granting rights on path, a rule of the Spec: nothing
// when path does not exist or lies inside the floor (as given or with
// symlinks resolved), the rule itself when its hierarchy holds no floor
// path, else the rules around the floor (expand).
func (c *carver) add(path string, rights uint64) error {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if len(c.floor) == 0 {
		return c.rule(pfd, st.Mode, path, rights)
	}
	real := resolved(pfd, path)
	switch {
	case c.denied(path) || c.denied(real):
		return nil
	case st.Mode&unix.S_IFMT == unix.S_IFDIR && c.contains(real):
		return c.expand(pfd, real, rights)
	}
	return c.rule(pfd, st.Mode, path, rights)
}

// expand adds rules granting rights on every entry of the directory open
// at dfd (dir, with symlinks resolved) but the floor: an entry on the
// floor, or that is a symlink (a rule on it would bind its target), gets
// none; one that holds a floor path is expanded in turn; every other gets
// the rule. The directory itself gets no right, not even listing it (rights
// are inherited by everything below, the floor included), and an entry
// created after this call is in no rule. A directory this process may not
// list gets nothing.
func (c *carver) expand(dfd int, dir string, rights uint64) error {
	rfd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EACCES) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	f := os.NewFile(uintptr(rfd), dir)
	names, err := f.Readdirnames(-1)
	_ = f.Close()
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	var errs []error
	for _, name := range names {
		child := filepath.Join(dir, name)
		if c.denied(child) {
			continue
		}
		errs = append(errs, c.entry(dfd, name, child, rights))
	}
	return errors.Join(errs...)
}

// entry adds the rules of the entry name of the directory open at dfd
// (path child) for expand.
func (c *carver) entry(dfd int, name, child string, rights uint64) error {
	cfd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // removed meanwhile
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", child, err)
	}
	defer unix.Close(cfd)
	var st unix.Stat_t
	if err := unix.Fstat(cfd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", child, err)
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return nil
	case slices.Contains(c.floorIDs(), fileID{dev: st.Dev, ino: st.Ino}):
		return nil
	case st.Mode&unix.S_IFMT == unix.S_IFDIR && c.contains(child):
		return c.expand(cfd, child, rights)
	}
	return c.rule(cfd, st.Mode, child, rights)
}

// rule adds the rule granting rights (those that apply to a file, when
// mode is not a directory's, and that the ruleset handles) on the file
// open at pfd.
func (c *carver) rule(pfd int, mode uint32, path string, rights uint64) error {
	if mode&unix.S_IFMT != unix.S_IFDIR {
		rights &= fileRights
	}
	rights &= c.handled
	if rights == 0 {
		return nil
	}
	if err := ll.LandlockAddPathBeneathRule(c.fd, &ll.PathBeneathAttr{AllowedAccess: rights, ParentFd: pfd}, 0); err != nil {
		return fmt.Errorf("landlock rule for %s: %w", path, err)
	}
	return nil
}

// denied reports whether p lies inside a floor path F and no lift path
// inside F covers it.
func (c *carver) denied(p string) bool {
	for _, f := range c.floor {
		if !covers(f, p) {
			continue
		}
		if !slices.ContainsFunc(c.lift, func(l string) bool { return covers(f, l) && covers(l, p) }) {
			return true
		}
	}
	return false
}

// contains reports whether a floor path lies strictly inside p.
func (c *carver) contains(p string) bool {
	return slices.ContainsFunc(c.floor, func(f string) bool { return f != p && covers(p, f) })
}

// covers reports whether the absolute, clean path p is prefix or lies
// inside it, by path component.
func covers(prefix, p string) bool {
	return p == prefix || prefix == "/" || strings.HasPrefix(p, prefix) && p[len(prefix)] == '/'
}

// resolved returns the path of the file open at fd, with symlinks resolved
// (path when it cannot tell).
func resolved(fd int, path string) string {
	if p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil && filepath.IsAbs(p) && filepath.Clean(p) == p {
		return p
	}
	return realPath(path)
}

// realPath returns p with symlinks resolved; when p does not exist, its
// longest existing parent resolved, joined with the rest.
func realPath(p string) string { return realPathIn(p, nil) }

// realPathIn is realPath with the resolved parent directories kept in dirs
// (nil: none kept).
func realPathIn(p string, dirs map[string]string) string {
	dir := filepath.Dir(p)
	if dir == p {
		return p
	}
	rdir, ok := dirs[dir]
	if !ok {
		rdir = realPathIn(dir, dirs)
		if dirs != nil {
			dirs[dir] = rdir
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
	}
	return filepath.Join(rdir, filepath.Base(p))
}
