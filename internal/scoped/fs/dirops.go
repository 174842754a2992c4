package fs

import (
	"context"
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/capstanhq/capstan/internal/capability"
)

// Exists reports whether path names a file or directory inside the read
// reach, following symlinks that stay inside it. A missing file is false
// with a nil error; a device, FIFO or socket is a denial, as for Stat.
func (a *accessor) Exists(ctx context.Context, path string) (bool, string, error) {
	_, abs, err := a.Stat(ctx, path)
	switch {
	case err == nil:
		return true, abs, nil
	case errors.Is(err, iofs.ErrNotExist):
		return false, abs, nil
	}
	return false, abs, err
}

// MkdirAll creates the directory path and its missing parents (0755) inside
// the write reach. An existing directory (or a symlink to one inside the
// reach) is not an error; an existing file is (EEXIST).
func (a *accessor) MkdirAll(ctx context.Context, path string) (string, error) {
	abs, err := a.check(ctx, capability.Write, path)
	if err != nil {
		return abs, err
	}
	t, err := a.resolve("mkdir", capability.Write, abs, true)
	if err != nil {
		return abs, err
	}
	defer t.close()
	switch {
	case t.info == nil:
		if err := t.dir.Mkdir(t.name, 0o755); err != nil && !errors.Is(err, iofs.ErrExist) {
			return abs, pathErr("mkdir", abs, err)
		}
	case special(t.info.Mode()):
		return abs, a.denyPath(capability.Write, abs)
	case !t.info.IsDir():
		return abs, pathErr("mkdir", abs, syscall.EEXIST)
	}
	return abs, nil
}

// Remove removes the file, symlink (never its target) or empty directory
// path inside the write reach. Its parent directory must be inside the
// write reach too, so a granted prefix itself cannot be removed. Devices,
// FIFOs, sockets and anything on the floor are denials; a missing file is an
// error matching fs.ErrNotExist; a directory that is not empty is ENOTEMPTY.
func (a *accessor) Remove(ctx context.Context, path string) (string, error) {
	abs, err := a.check(ctx, capability.Write, path)
	if err != nil {
		return abs, err
	}
	parent := filepath.Dir(abs)
	if parent == abs || longestPrefix(a.grant.Write, parent) == "" || a.floor.denies(abs, a.grant.Write) {
		return abs, a.denyPath(capability.Write, abs)
	}
	t, err := a.resolveAs("remove", capability.Write, parent, abs, false)
	if err != nil {
		return abs, err
	}
	defer t.close()
	if t.info == nil {
		return abs, pathErr("remove", abs, iofs.ErrNotExist)
	}
	if !t.info.IsDir() {
		return abs, pathErr("remove", abs, syscall.ENOTDIR)
	}
	dir := t.dir
	if t.name != "." {
		dir, err = t.dir.OpenRoot(t.name)
		if err != nil {
			return abs, pathErr("remove", abs, err)
		}
		defer dir.Close()
		di, err := dir.Stat(".")
		if err != nil {
			return abs, pathErr("remove", abs, err)
		}
		if !os.SameFile(di, t.info) {
			return abs, pathErr("remove", abs, errChanged)
		}
	}
	name := filepath.Base(abs)
	fi, err := dir.Lstat(name)
	if err != nil {
		return abs, pathErr("remove", abs, err)
	}
	if special(fi.Mode()) || a.floor.same(fi) {
		return abs, a.denyPath(capability.Write, abs)
	}
	if err := dir.Remove(name); err != nil {
		return abs, pathErr("remove", abs, err)
	}
	return abs, nil
}
