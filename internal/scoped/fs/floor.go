package fs

import (
	iofs "io/fs"
	"os"
	"path/filepath"
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

// newFloor builds the floor from the worker's home and its own files.
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
