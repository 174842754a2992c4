package launcher

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// ABI returns the Landlock ABI version of the running kernel, as
// go-landlock uses it (ABI 6 or more without the kernel's fix for signal
// scoping counts as 5): 0 with the reason when Landlock is not available
// (not built in, not enabled at boot, or not Linux).
func ABI() (int, error) {
	v, err := llsyscall.LandlockGetABIVersion()
	switch {
	case err != nil:
		return 0, fmt.Errorf("landlock_create_ruleset: %w", err)
	case v < 1:
		return 0, fmt.Errorf("landlock_create_ruleset returned ABI %d", v)
	}
	if v >= 6 {
		if errata, err := llsyscall.LandlockGetErrata(); err != nil || errata&signalScopingFix == 0 {
			v = 5
		}
	}
	return v, nil
}

// signalScopingFix is the Landlock erratum bit of the signal scoping fix.
const signalScopingFix = 0x2

// Restrict confines the calling process and everything it executes from
// now on to s, in go-landlock's best-effort mode: every access right the
// running kernel's Landlock ABI can restrict is restricted, and the rights
// it cannot are left as they are (Status of the process package reports
// which). Without Landlock it fails: a launcher asked for Landlock never
// runs a child without it.
//
//   - Files: s.Read hierarchies may be read, listed and executed; s.Write
//     hierarchies may also be written, truncated (ABI 3+), and have
//     entries created, removed, renamed and linked (moving between
//     directories needs ABI 2+); anything else is refused with EACCES.
//     Device ioctls (ABI 5+) and connecting to pathname unix sockets made
//     outside the sandbox (ABI 9+) are refused everywhere.
//   - Network (ABI 4+ for TCP, 10+ for UDP): NetNone refuses every bind,
//     connect and send; NetProxy allows TCP connect to ProxyPort only (in
//     the child's own namespace that is the egress proxy); NetHost leaves
//     the network alone.
//   - IPC (ABI 6+): signals to, and abstract unix sockets of, processes
//     outside the sandbox are refused.
//
// It also sets no_new_privs, so set-user-ID binaries gain nothing.
func Restrict(s Spec) error {
	abi, err := ABI()
	if err != nil {
		return err
	}
	cfg := landlock.V11
	if s.Net == NetHost {
		cfg.HandledAccessNet = 0
	}
	var rules []landlock.Rule
	for _, p := range s.Read {
		dir, ok, err := kind(p)
		switch {
		case err != nil:
			return err
		case !ok:
			continue
		case dir:
			rules = append(rules, landlock.RODirs(p).IgnoreIfMissing())
		default:
			rules = append(rules, landlock.ROFiles(p).IgnoreIfMissing())
		}
	}
	for _, p := range s.Write {
		dir, ok, err := kind(p)
		switch {
		case err != nil:
			return err
		case !ok:
			continue
		case dir:
			rule := landlock.RWDirs(p).IgnoreIfMissing()
			// Refer is not restrictable before ABI 2; asking for it there
			// would make best-effort mode drop Landlock altogether.
			if abi >= 2 {
				rule = rule.WithRefer()
			}
			rules = append(rules, rule)
		default:
			rules = append(rules, landlock.RWFiles(p).IgnoreIfMissing())
		}
	}
	if s.Net == NetProxy {
		rules = append(rules, landlock.ConnectTCP(ProxyPort))
	}
	return cfg.BestEffort().Restrict(rules...)
}

// kind reports whether p is a directory; ok is false when p does not exist.
func kind(p string) (dir, ok bool, err error) {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return false, false, nil
	case err != nil:
		return false, false, fmt.Errorf("stat %s: %w", p, err)
	}
	return fi.IsDir(), true, nil
}
