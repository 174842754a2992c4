package fs

import (
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/capstanhq/capstan/internal/capability"
)

// maxLinkHops bounds symlink resolution, as the kernel's MAXSYMLINKS does.
const maxLinkHops = 40

// errChanged reports that a path element was replaced while it was opened.
var errChanged = errors.New("file changed while it was opened")

// target is a path resolved inside the reach: the final element, named
// inside the root of its parent directory. The caller must call close.
type target struct {
	// dir is the root of the final element's parent directory.
	dir *os.Root
	// name is the final element inside dir ("." when the path is a prefix).
	name string
	// info is the Lstat of the final element (never a symlink), or nil when
	// it does not exist.
	info iofs.FileInfo
	// roots are every root opened on the way, dir included.
	roots []*os.Root
}

func (t *target) close() {
	for _, r := range t.roots {
		_ = r.Close()
	}
}

// resolve walks abs (absolute, clean, already checked against the grant)
// one element at a time from its anchor (see anchor), each inside the root
// of its parent directory.
// Symlinks are resolved here rather than by os.Root: a link's target (made
// absolute against the link's directory and cleaned) must be covered by a
// prefix of mode and be off the floor, and the walk then starts again from
// the prefix that covers it. Link targets are cleaned lexically, like every
// path here ("a/b/../c" is "a/c" even when b is itself a link); the result
// is walked again, so this can change which file is meant but never lets
// the walk leave the reach. Every directory entered and the final element
// are compared with the floor's identities, and every directory opened is
// compared with the Lstat that admitted it, so a swap mid-walk fails.
//
// With create, missing intermediate directories are made (0755), inside
// their parent's root, and a missing anchor is made with MkdirAll.
// Denials carry abs, the path the caller named; other errors are
// *iofs.PathError values for abs.
func (a *accessor) resolve(op string, mode capability.Mode, abs string, create bool) (*target, error) {
	return a.resolveAs(op, mode, abs, abs, create)
}

// resolveAs is resolve of path with denials and errors about named (the path
// the caller gave, when path is derived from it).
func (a *accessor) resolveAs(op string, mode capability.Mode, path, named string, create bool) (*target, error) {
	allowed := a.grant.Read
	if mode == capability.Write {
		allowed = a.grant.Write
	}
	cur := path
	hops := 0
walk:
	for {
		prefix := longestPrefix(allowed, cur)
		if prefix == "" || a.floor.denies(cur, allowed) {
			return nil, a.denyPath(mode, named)
		}
		anchor := a.anchor(prefix)
		if create && cur != anchor {
			if _, err := os.Stat(anchor); errors.Is(err, iofs.ErrNotExist) {
				if err := os.MkdirAll(anchor, 0o755); err != nil {
					return nil, pathErr(op, named, err)
				}
			}
		}
		root, err := os.OpenRoot(anchor)
		if err != nil {
			return nil, pathErr(op, named, err)
		}
		t := &target{roots: []*os.Root{root}}
		rootInfo, err := root.Stat(".")
		if err != nil {
			t.close()
			return nil, pathErr(op, named, err)
		}
		if a.floor.same(rootInfo) {
			t.close()
			return nil, a.denyPath(mode, named)
		}
		if cur == anchor {
			t.dir, t.name, t.info = root, ".", rootInfo
			return t, nil
		}
		elems := strings.Split(strings.TrimPrefix(cur[len(anchor):], string(filepath.Separator)), string(filepath.Separator))
		dir := root
		for i, elem := range elems {
			last := i == len(elems)-1
			fi, err := dir.Lstat(elem)
			if errors.Is(err, iofs.ErrNotExist) {
				if last {
					t.dir, t.name = dir, elem
					return t, nil
				}
				if !create {
					t.close()
					return nil, pathErr(op, named, iofs.ErrNotExist)
				}
				if err := dir.Mkdir(elem, 0o755); err != nil && !errors.Is(err, iofs.ErrExist) {
					t.close()
					return nil, pathErr(op, named, err)
				}
				fi, err = dir.Lstat(elem)
			}
			if err != nil {
				t.close()
				return nil, pathErr(op, named, err)
			}
			if fi.Mode()&iofs.ModeSymlink != 0 {
				hops++
				if hops > maxLinkHops {
					t.close()
					return nil, pathErr(op, named, syscall.ELOOP)
				}
				link, err := dir.Readlink(elem)
				t.close()
				if err != nil {
					return nil, pathErr(op, named, err)
				}
				linkPath := filepath.Join(anchor, filepath.Join(elems[:i+1]...))
				if !filepath.IsAbs(link) {
					link = filepath.Join(filepath.Dir(linkPath), link)
				}
				cur = filepath.Join(append([]string{link}, elems[i+1:]...)...)
				continue walk
			}
			if a.floor.same(fi) {
				t.close()
				return nil, a.denyPath(mode, named)
			}
			if last {
				t.dir, t.name, t.info = dir, elem, fi
				return t, nil
			}
			if !fi.IsDir() {
				t.close()
				return nil, pathErr(op, named, syscall.ENOTDIR)
			}
			next, err := dir.OpenRoot(elem)
			if err != nil {
				t.close()
				return nil, pathErr(op, named, err)
			}
			t.roots = append(t.roots, next)
			ni, err := next.Stat(".")
			if err != nil {
				t.close()
				return nil, pathErr(op, named, err)
			}
			if !os.SameFile(fi, ni) {
				t.close()
				return nil, pathErr(op, named, errChanged)
			}
			dir = next
		}
		// Unreachable: elems is never empty when cur != prefix.
		t.close()
		return nil, pathErr(op, named, iofs.ErrNotExist)
	}
}

// anchor returns the directory the walk to a path under prefix starts from:
// the shortest writable prefix that covers prefix, or prefix itself. Every
// element below the anchor is walked without following links blindly, so a
// symlink a tool planted in a writable area (even one that replaces a
// granted prefix: "out/data" -> "/etc") is judged by the link rule; links
// above it, and in prefixes no tool can write, are the operator's and are
// followed by os.OpenRoot.
func (a *accessor) anchor(prefix string) string {
	best := prefix
	for _, w := range a.writable {
		if capability.Covers(w, prefix) && len(w) < len(best) {
			best = w
		}
	}
	return best
}

// longestPrefix returns the longest prefix of list that covers path, or "".
func longestPrefix(list []string, path string) string {
	best := ""
	for _, p := range list {
		if capability.Covers(p, path) && len(p) > len(best) {
			best = p
		}
	}
	return best
}

// pathErr returns an *iofs.PathError for abs with err's innermost cause, so
// messages name the absolute path and not a root-relative one, and
// errors.Is(err, iofs.ErrNotExist) keeps working.
func pathErr(op, abs string, err error) error {
	var pe *iofs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		err = le.Err
	}
	return &iofs.PathError{Op: op, Path: abs, Err: err}
}

// checkOpened compares an opened file with the Lstat that admitted it.
func checkOpened(f *os.File, want iofs.FileInfo) (iofs.FileInfo, error) {
	got, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if want != nil && !os.SameFile(want, got) {
		return nil, errChanged
	}
	return got, nil
}
