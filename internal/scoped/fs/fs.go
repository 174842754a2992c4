// Package fs is the scoped filesystem accessor: tool.FS built from one
// call's resolved fs_reach (capability.FSGrant).
//
// Every path is joined to the call's working dir and cleaned lexically, must
// lie inside a prefix of the access's direction (read for ReadFile, Stat and
// ReadDir; write for WriteFile), and is then walked one element at a time
// inside os.Root handles opened on the allowed prefixes, so "..", symlinks
// and races cannot leave the reach. A symlink is followed only when its
// target stays inside an allowed prefix of the same direction; an
// always-deny floor (the worker's own files, credentials in its home, shell
// histories, /etc/shadow, /etc/sudoers*, /proc, /sys, /boot, /root, devices,
// FIFOs and sockets) applies whatever the grant says. Every refusal is a
// *tool.DenialError of kind tool.ErrPathNotReachable:
// "PATH_NOT_REACHABLE: <read|write> not permitted for <abs>".
package fs

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// DefaultMaxReadBytes is the read cap when Config.MaxReadBytes is zero.
const DefaultMaxReadBytes int64 = 64 << 20

// ErrInvalidPath is wrapped by every method given a path that contains a
// NUL byte. It is not a denial.
var ErrInvalidPath = errors.New("path contains a NUL byte")

// ErrTooLarge is wrapped (inside an *fs.PathError) by ReadFile when a file
// is larger than Config.MaxReadBytes. It is not a denial.
var ErrTooLarge = errors.New("file is larger than the read limit")

// Config is the worker-wide part of the accessor: the floor and the read cap.
type Config struct {
	// Home is the worker's home directory; its credentials (.ssh, .aws,
	// .gnupg, .netrc) and shell histories are on the floor. Empty: the
	// current user's home (os.UserHomeDir), if any.
	Home string
	// Floor lists the worker's own files and directories (personalities
	// directory, secrets file, NATS credentials, data directory). Absolute.
	Floor []string
	// MaxReadBytes caps ReadFile. Zero: DefaultMaxReadBytes.
	MaxReadBytes int64
}

// Validate reports a Config that New would refuse: a relative Home or
// Floor entry, or a negative MaxReadBytes. The worker calls it at start-up.
func (c Config) Validate() error {
	var errs []error
	if c.Home != "" && !filepath.IsAbs(c.Home) {
		errs = append(errs, fmt.Errorf("fs config: Home %q must be absolute", c.Home))
	}
	for i, p := range c.Floor {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("fs config: Floor[%d] %q must be absolute", i, p))
		}
	}
	if c.MaxReadBytes < 0 {
		errs = append(errs, fmt.Errorf("fs config: MaxReadBytes %d must not be negative", c.MaxReadBytes))
	}
	return errors.Join(errs...)
}

// accessor implements tool.FS for one grant.
type accessor struct {
	grant capability.FSGrant
	// writable are the grant's Writable and Write prefixes: where a tool may
	// have planted a symlink (see anchor).
	writable []string
	maxRead  int64
	floor    *floor
	onDeny   func(error)
}

// New returns the filesystem accessor of grant g: a nil g (or one without
// prefixes) denies every operation. onDeny, when not nil, is called with
// every denial before it is returned (for audit and metrics); it must not
// block. cfg must be valid (Config.Validate); New panics otherwise, since
// that is a start-up configuration error. The accessor is safe for
// concurrent use and holds no open files between calls.
//
// Each method returns the absolute path the caller named (relative paths
// joined to g.WorkingDir and cleaned), never a symlink's target, so
// messages echo what the caller asked for. A missing file is an error
// matching fs.ErrNotExist, not a denial; reading a directory or listing a
// file are ordinary errors (EISDIR, ENOTDIR), not denials either.
func New(g *capability.FSGrant, cfg Config, onDeny func(error)) tool.FS {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	a := &accessor{
		maxRead: cmp.Or(cfg.MaxReadBytes, DefaultMaxReadBytes),
		onDeny:  onDeny,
	}
	if g != nil {
		a.grant = capability.FSGrant{Read: slices.Clone(g.Read), Write: slices.Clone(g.Write), WorkingDir: g.WorkingDir}
		a.writable = append(slices.Clone(g.Writable), g.Write...)
	}
	a.floor = newFloor(floorHome(cfg.Home), cfg.Floor)
	return a
}

// ReadFile returns the content of a regular file inside the read reach, at
// most Config.MaxReadBytes (larger: an error wrapping ErrTooLarge).
func (a *accessor) ReadFile(ctx context.Context, path string) ([]byte, string, error) {
	abs, err := a.check(ctx, capability.Read, path)
	if err != nil {
		return nil, abs, err
	}
	t, err := a.resolve("open", capability.Read, abs, false)
	if err != nil {
		return nil, abs, err
	}
	defer t.close()
	if err := a.checkFinal(capability.Read, abs, t, false); err != nil {
		return nil, abs, err
	}
	f, err := t.dir.OpenFile(t.name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, abs, pathErr("open", abs, err)
	}
	defer f.Close()
	fi, err := checkOpened(f, t.info)
	if err != nil {
		return nil, abs, pathErr("open", abs, err)
	}
	if fi.Size() > a.maxRead {
		return nil, abs, pathErr("read", abs, ErrTooLarge)
	}
	data, err := io.ReadAll(io.LimitReader(f, a.maxRead+1))
	if err != nil {
		return nil, abs, pathErr("read", abs, err)
	}
	if int64(len(data)) > a.maxRead {
		return nil, abs, pathErr("read", abs, ErrTooLarge)
	}
	return data, abs, nil
}

// WriteFile writes data to a regular file inside the write reach, creating
// missing parent directories (0755) inside it. It writes a temporary file
// in the same directory and renames it over the target, so readers never
// see a partial file; when the temporary file cannot be created it writes
// in place. A new file gets mode 0644; an existing file keeps its
// permission bits (a rename gives it a new inode: hard links to the old
// one keep the old content). A write prefix that does not exist yet is
// created with its parents (os.MkdirAll on the granted path).
func (a *accessor) WriteFile(ctx context.Context, path string, data []byte) (string, error) {
	abs, err := a.check(ctx, capability.Write, path)
	if err != nil {
		return abs, err
	}
	t, err := a.resolve("write", capability.Write, abs, true)
	if err != nil {
		return abs, err
	}
	defer t.close()
	perm := iofs.FileMode(0o644)
	if t.info != nil {
		if err := a.checkFinal(capability.Write, abs, t, false); err != nil {
			return abs, err
		}
		perm = t.info.Mode().Perm()
	}
	if err := writeAtomic(t, data, perm); err != nil {
		if !errors.Is(err, errNoTemp) {
			return abs, pathErr("write", abs, err)
		}
		if err := a.writePlain(abs, t, data); err != nil {
			return abs, err
		}
	}
	return abs, nil
}

// Stat returns the file info of a path inside the read reach, following
// symlinks that stay inside it. The info's Name is the base of the path
// the caller named.
func (a *accessor) Stat(ctx context.Context, path string) (iofs.FileInfo, string, error) {
	abs, err := a.check(ctx, capability.Read, path)
	if err != nil {
		return nil, abs, err
	}
	t, err := a.resolve("stat", capability.Read, abs, false)
	if err != nil {
		return nil, abs, err
	}
	defer t.close()
	if t.info == nil {
		return nil, abs, pathErr("stat", abs, iofs.ErrNotExist)
	}
	if special(t.info.Mode()) {
		return nil, abs, a.denyPath(capability.Read, abs)
	}
	return namedInfo{FileInfo: t.info, name: filepath.Base(abs)}, abs, nil
}

// ReadDir returns the entries of a directory inside the read reach, sorted
// by name.
func (a *accessor) ReadDir(ctx context.Context, path string) ([]iofs.DirEntry, string, error) {
	abs, err := a.check(ctx, capability.Read, path)
	if err != nil {
		return nil, abs, err
	}
	t, err := a.resolve("readdir", capability.Read, abs, false)
	if err != nil {
		return nil, abs, err
	}
	defer t.close()
	if err := a.checkFinal(capability.Read, abs, t, true); err != nil {
		return nil, abs, err
	}
	d, err := t.dir.OpenFile(t.name, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, abs, pathErr("readdir", abs, err)
	}
	defer d.Close()
	if _, err := checkOpened(d, t.info); err != nil {
		return nil, abs, pathErr("readdir", abs, err)
	}
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, abs, pathErr("readdir", abs, err)
	}
	slices.SortFunc(entries, func(x, y iofs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	return entries, abs, nil
}

// check applies the grant to path (lexically) and the context. A path with
// a NUL byte names no file (and lexical cleaning could drop the element
// that holds it): it is refused first, as invalid input.
func (a *accessor) check(ctx context.Context, mode capability.Mode, path string) (string, error) {
	if strings.IndexByte(path, 0) >= 0 {
		abs := capability.JoinPath(a.grant.WorkingDir, path)
		return abs, fmt.Errorf("%s %q: %w", mode, abs, ErrInvalidPath)
	}
	abs, err := a.grant.Check(mode, path)
	if err != nil {
		a.denied(err)
		return abs, err
	}
	if err := ctx.Err(); err != nil {
		return abs, context.Cause(ctx)
	}
	return abs, nil
}

// checkFinal checks the resolved final element: it must exist, have the
// kind the operation needs (a directory for ReadDir, a regular file
// otherwise) and not be a device, FIFO or socket (a denial).
func (a *accessor) checkFinal(mode capability.Mode, abs string, t *target, wantDir bool) error {
	op := "open"
	if mode == capability.Write {
		op = "write"
	}
	switch {
	case t.info == nil:
		return pathErr(op, abs, iofs.ErrNotExist)
	case special(t.info.Mode()):
		return a.denyPath(mode, abs)
	case wantDir && !t.info.IsDir():
		return pathErr("readdir", abs, syscall.ENOTDIR)
	case !wantDir && t.info.IsDir():
		return pathErr(op, abs, syscall.EISDIR)
	case !wantDir && !t.info.Mode().IsRegular():
		return a.denyPath(mode, abs)
	}
	return nil
}

// denyPath returns (and reports) the denial of abs in mode.
func (a *accessor) denyPath(mode capability.Mode, abs string) error {
	err := tool.Deny(tool.ErrPathNotReachable, mode.String()+" not permitted for "+abs)
	a.denied(err)
	return err
}

func (a *accessor) denied(err error) {
	if a.onDeny != nil {
		a.onDeny(err)
	}
}

// errNoTemp reports that the temporary file of an atomic write could not be
// created; WriteFile then writes in place.
var errNoTemp = errors.New("cannot create temporary file")

// writeAtomic writes data to a new temporary file next to the target and
// renames it over the target, inside t.dir.
func writeAtomic(t *target, data []byte, perm iofs.FileMode) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".capstan-" + hex.EncodeToString(rnd[:]) + ".tmp"
	f, err := t.dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("%w: %w", errNoTemp, err)
	}
	err = writeAndClose(f, data, perm)
	if err == nil {
		err = t.dir.Rename(tmp, t.name)
	}
	if err != nil {
		_ = t.dir.Remove(tmp)
	}
	return err
}

func writeAndClose(f *os.File, data []byte, perm iofs.FileMode) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writePlain writes data in place: open without truncating, check that the
// opened file is the regular file that was resolved, then truncate and
// write.
func (a *accessor) writePlain(abs string, t *target, data []byte) error {
	f, err := t.dir.OpenFile(t.name, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return pathErr("write", abs, err)
	}
	fi, err := checkOpened(f, t.info)
	if err == nil && !fi.Mode().IsRegular() {
		_ = f.Close()
		return a.denyPath(capability.Write, abs)
	}
	if err == nil {
		err = f.Truncate(0)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return pathErr("write", abs, err)
	}
	return nil
}

// namedInfo reports the base of the caller's path as the file's name.
type namedInfo struct {
	iofs.FileInfo
	name string
}

func (n namedInfo) Name() string { return n.name }
