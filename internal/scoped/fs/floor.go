package fs

import (
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/capstanhq/capstan/internal/capability"
)

// homeFloor are the entries of the worker's home that no grant reaches:
// credentials and shell histories.
var homeFloor = []string{
	".ssh", ".aws", ".gnupg", ".netrc",
	".bash_history", ".zsh_history", ".history", ".python_history",
	".node_repl_history", ".psql_history", ".mysql_history",
}

// systemFloor are system paths that no grant reaches. /etc/sudoers* and /root
// are handled by rule (see floor.denies); /etc/gshadow and the "-" backups
// hold the same hashes as /etc/shadow.
var systemFloor = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/proc", "/sys", "/boot",
}

// Floor-by-rule anchors.
const (
	rootHome   = "/root"
	etcDir     = "/etc"
	sudoersPre = "sudoers"
)

// floor is the always-deny floor of one accessor. The lexical part is
// checked against every path the accessor resolves (the caller's and each
// symlink target); the identity part (device and inode of every floor entry
// that exists) is checked against every directory the accessor traverses
// and every file it opens, so a bind mount, a hard link or a symlinked
// prefix cannot reach the floor under another name.
type floor struct {
	paths []string // absolute, clean

	once  sync.Once
	infos []os.FileInfo
}

// newFloor builds the floor from the worker's home (empty: none) and its
// own files.
func newFloor(home string, own []string) *floor {
	f := &floor{}
	for _, p := range own {
		f.paths = append(f.paths, filepath.Clean(p))
	}
	if home != "" {
		for _, name := range homeFloor {
			f.paths = append(f.paths, filepath.Join(home, name))
		}
	}
	f.paths = append(f.paths, systemFloor...)
	f.paths = append(f.paths, filepath.Join(etcDir, sudoersPre), filepath.Join(etcDir, sudoersPre+".d"))
	return f
}

// floorHome returns the home whose entries are on the floor: home, or the
// current user's when home is empty ("" when there is none).
func floorHome(home string) string {
	if home == "" {
		if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
			home = h
		}
	}
	if home != "" {
		home = filepath.Clean(home)
	}
	return home
}

// Floor is the always-deny floor of a worker, by path: the one the file
// accessor applies, for whoever else must keep to it (the process runner
// computes its children's Landlock rules around it). It is immutable and
// safe for concurrent use.
type Floor struct {
	f     *floor
	paths []string // concrete, see Paths
}

// NewFloor returns the floor of a worker whose home directory is home
// (empty: the current user's, if any) and whose own files and directories
// are own (its personalities directory, MCP servers directory, secrets
// file, NATS credentials and data directory; absolute): the same floor
// New builds from Config.Home and Config.Floor. /etc is listed once, here,
// for the entries whose name starts with "sudoers".
func NewFloor(home string, own []string) *Floor {
	f := &Floor{f: newFloor(floorHome(home), own)}
	f.paths = slices.Clone(f.f.paths)
	if entries, err := os.ReadDir(etcDir); err == nil {
		for _, e := range entries {
			p := filepath.Join(etcDir, e.Name())
			if strings.HasPrefix(e.Name(), sudoersPre) && !slices.Contains(f.paths, p) {
				f.paths = append(f.paths, p)
			}
		}
	}
	f.paths = append(f.paths, rootHome)
	return f
}

// Denies reports whether abs (absolute and clean) is on the floor for an
// access whose allowed prefixes (of the access's direction, read or write)
// are allowed: it lies inside one of Paths, or is an entry of /etc whose
// name starts with "sudoers" (whenever it was created), or lies inside
// /root and no allowed prefix inside /root covers it. The comparison is
// lexical, by path component.
func (f *Floor) Denies(abs string, allowed []string) bool { return f.f.denies(abs, allowed) }

// Paths returns the concrete floor paths, absolute and clean: the own
// files, the credential files and shell histories of the home, /etc/shadow
// and its kin, /proc, /sys, /boot, /etc/sudoers, /etc/sudoers.d and every
// other entry of /etc whose name started with "sudoers" when the floor was
// built, and /root (which Lifts may open in part). Some may not exist. The
// caller must not change the slice.
func (f *Floor) Paths() []string { return f.paths }

// Lifts returns the prefixes of allowed that the floor's /root exception
// lets a grant reach: those inside /root that Denies does not refuse for
// allowed (so none inside another floor path).
func (f *Floor) Lifts(allowed []string) []string {
	var out []string
	for _, p := range allowed {
		if capability.Covers(rootHome, p) && !f.f.denies(p, allowed) {
			out = append(out, p)
		}
	}
	return out
}

// denies reports whether abs (absolute and clean) is on the floor. allowed
// is the prefix list of the access's direction: an allowed prefix inside
// /root lifts the /root rule for the paths it covers, and nothing else.
func (f *floor) denies(abs string, allowed []string) bool {
	for _, p := range f.paths {
		if capability.Covers(p, abs) {
			return true
		}
	}
	// /etc/sudoers*: every entry of /etc whose name starts with "sudoers".
	if capability.Covers(etcDir, abs) && abs != etcDir {
		first, _, _ := strings.Cut(abs[len(etcDir)+1:], string(filepath.Separator))
		if strings.HasPrefix(first, sudoersPre) {
			return true
		}
	}
	if capability.Covers(rootHome, abs) {
		for _, p := range allowed {
			if capability.Covers(rootHome, p) && capability.Covers(p, abs) {
				return false
			}
		}
		return true
	}
	return false
}

// identities stats every floor entry once (following symlinks); entries that
// do not exist are skipped. /root is left out: its rule is lexical, with an
// exception the identity check could not express.
func (f *floor) identities() []os.FileInfo {
	f.once.Do(func() {
		for _, p := range f.paths {
			if fi, err := os.Stat(p); err == nil {
				f.infos = append(f.infos, fi)
			}
		}
	})
	return f.infos
}

// same reports whether fi is one of the floor entries.
func (f *floor) same(fi iofs.FileInfo) bool {
	for _, id := range f.identities() {
		if os.SameFile(id, fi) {
			return true
		}
	}
	return false
}

// special reports whether m is a device, FIFO, socket or other irregular
// file: floor types whatever their path.
func special(m iofs.FileMode) bool {
	return m&(iofs.ModeDevice|iofs.ModeCharDevice|iofs.ModeNamedPipe|iofs.ModeSocket|iofs.ModeIrregular) != 0
}
