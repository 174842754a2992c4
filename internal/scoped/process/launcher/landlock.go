package launcher

import (
	"errors"
	"fmt"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// ABI returns the Landlock ABI version of the running kernel, as
// go-landlock uses it (ABI 6 or more without the kernel's fix for signal
// scoping counts as 5): 0 with the reason when Landlock is not available
// (not built in, not enabled at boot, or not Linux).
func ABI() (int, error) {
	v, err := ll.LandlockGetABIVersion()
	switch {
	case err != nil:
		return 0, fmt.Errorf("landlock_create_ruleset: %w", err)
	case v < 1:
		return 0, fmt.Errorf("landlock_create_ruleset returned ABI %d", v)
	}
	if v >= 6 {
		if errata, err := ll.LandlockGetErrata(); err != nil || errata&signalScopingFix == 0 {
			v = 5
		}
	}
	return v, nil
}

// signalScopingFix is the Landlock erratum bit of the signal scoping fix.
const signalScopingFix = 0x2

// presets are go-landlock's configurations of every ABI: what each one
// can restrict.
var presets = []landlock.Config{
	landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6,
	landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11,
}

// Access rights of the rules (linux/landlock.h).
const (
	readRights = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir
	// writeRights are added to readRights for a writable hierarchy.
	writeRights = ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile |
		ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock |
		ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym | ll.AccessFSTruncate | ll.AccessFSRefer
	// fileRights are the rights that apply to a file (the others apply to
	// the entries of a directory).
	fileRights = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate
)

// Ruleset builds the Landlock ruleset of s (s.Read, s.Write and s.Net) for
// the running kernel's ABI and returns it as a close-on-exec file, for a
// launcher to restrict itself with. Every access right the ABI can restrict
// is handled, so anything the rules do not grant is refused:
//
//   - Files: s.Read hierarchies may be read, listed and executed; s.Write
//     hierarchies may also be written, truncated (ABI 3+), and have
//     entries created, removed, renamed and linked (moving between
//     directories needs ABI 2+); anything else is refused with EACCES.
//     Device ioctls (ABI 5+) and connecting to pathname unix sockets
//     (ABI 9+) are granted nowhere. A path that does not exist is skipped;
//     a path naming a file grants that file only.
//   - Network (ABI 4+ for TCP, 10+ for UDP): NetNone refuses every bind,
//     connect and send; NetProxy allows TCP connect to ProxyPort only (in
//     the child's own namespace that is the egress proxy); NetHost leaves
//     the network alone.
//   - IPC (ABI 6+): signals to, and abstract unix sockets of, processes
//     outside the sandbox are refused.
//
// Without Landlock it fails.
func Ruleset(s Spec) (*os.File, error) {
	abi, err := ABI()
	if err != nil {
		return nil, err
	}
	cfg := presets[min(abi, len(presets))-1]
	fsHandled := uint64(cfg.HandledAccessFS)
	netHandled := uint64(cfg.HandledAccessNet)
	if s.Net == NetHost {
		netHandled = 0
	}
	attr := ll.RulesetAttr{HandledAccessFS: fsHandled, HandledAccessNet: netHandled, Scoped: uint64(cfg.Scoped)}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return nil, fmt.Errorf("landlock_create_ruleset: %w", err)
	}
	rs := os.NewFile(uintptr(fd), "landlock-ruleset")
	add := func(path string, rights uint64) error {
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
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			rights &= fileRights
		}
		rights &= fsHandled
		if rights == 0 {
			return nil
		}
		if err := ll.LandlockAddPathBeneathRule(fd, &ll.PathBeneathAttr{AllowedAccess: rights, ParentFd: pfd}, 0); err != nil {
			return fmt.Errorf("landlock rule for %s: %w", path, err)
		}
		return nil
	}
	var errs []error
	for _, p := range s.Read {
		errs = append(errs, add(p, readRights))
	}
	for _, p := range s.Write {
		errs = append(errs, add(p, readRights|writeRights))
	}
	if s.Net == NetProxy && netHandled&ll.AccessNetConnectTCP != 0 {
		if err := ll.LandlockAddNetPortRule(fd, &ll.NetPortAttr{AllowedAccess: ll.AccessNetConnectTCP, Port: ProxyPort}, 0); err != nil {
			errs = append(errs, fmt.Errorf("landlock rule for port %d: %w", ProxyPort, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		_ = rs.Close()
		return nil, err
	}
	return rs, nil
}

// TmpAccess returns the Landlock rights of a writable hierarchy at the
// running kernel's ABI, which a child whose TMPDIR is a tmpfs gives the
// tmpfs's root in its ruleset before restricting itself: the rule of the
// TMPDIR directory does not cover the tmpfs mounted over it (Landlock
// skips a mount point's own rules on its way up). Without Landlock it
// fails.
func TmpAccess() (uint64, error) {
	abi, err := ABI()
	if err != nil {
		return 0, err
	}
	return (readRights | writeRights) & uint64(presets[min(abi, len(presets))-1].HandledAccessFS), nil
}

// addTmpRule adds to the ruleset rs the rule that lets the child use the
// tmpfs mounted on dir (TmpAccess).
func addTmpRule(rs int, dir string) error {
	rights, err := TmpAccess()
	if err != nil {
		return err
	}
	pfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the tmpfs on %s: %w", dir, err)
	}
	defer unix.Close(pfd)
	if err := ll.LandlockAddPathBeneathRule(rs, &ll.PathBeneathAttr{AllowedAccess: rights, ParentFd: pfd}, 0); err != nil {
		return fmt.Errorf("landlock rule for the tmpfs on %s: %w", dir, err)
	}
	return nil
}

// restrictSelf confines the calling thread, and what it executes, to the
// ruleset rs (Ruleset). The thread's no_new_privs bit must be set.
func restrictSelf(rs int) error {
	if err := ll.LandlockRestrictSelf(rs, 0); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}
