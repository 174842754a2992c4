package capability

import (
	"path/filepath"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

// Mode is the direction of a filesystem access.
type Mode int

// The two access modes.
const (
	Read Mode = iota + 1
	Write
)

// String returns "read" or "write".
func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "unknown"
}

// Covers reports whether prefix covers path: both are absolute and clean
// (filepath.Clean leaves them unchanged) and path equals prefix or continues
// it with a separator. The comparison is byte-exact and by component, so
// "/data" covers "/data" and "/data/x" but never "/data2". A relative or
// unclean argument is never covered.
func Covers(prefix, path string) bool {
	if !isAbsClean(prefix) || !isAbsClean(path) {
		return false
	}
	if path == prefix {
		return true
	}
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	// prefix is clean, so it ends with a separator only when it is the root.
	return strings.HasSuffix(prefix, string(filepath.Separator)) || path[len(prefix)] == filepath.Separator
}

func isAbsClean(p string) bool { return filepath.IsAbs(p) && filepath.Clean(p) == p }

// coveredBy reports whether one prefix of list covers path.
func coveredBy(list []string, path string) bool {
	for _, prefix := range list {
		if Covers(prefix, path) {
			return true
		}
	}
	return false
}

// JoinPath resolves p the way every filesystem accessor does: an absolute p
// is cleaned; a relative p is joined to workingDir (never the process's
// current directory) and cleaned lexically, so "a/link/../x" becomes "a/x".
// With an empty workingDir a relative p stays relative (and is covered by
// nothing).
func JoinPath(workingDir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	if workingDir == "" {
		return filepath.Clean(p)
	}
	return filepath.Join(workingDir, p)
}

// FSGrant is the resolved filesystem reach of one call. Read and Write hold
// absolute, clean prefixes (nil or empty: nothing in that direction);
// WorkingDir is the directory relative paths are joined to. A nil *FSGrant
// allows nothing.
type FSGrant struct {
	Read       []string
	Write      []string
	WorkingDir string
	// Writable lists the prefixes that tools under the call's personality
	// may write (its fs_reach.write), absolute and clean; Resolve fills it.
	// A symlink inside one of them may have been planted by a tool, so the
	// accessor never follows one there blindly, not even in the path of a
	// Read or Write prefix itself: it opens the shortest writable prefix
	// that covers a granted prefix and walks down from it under the link
	// rule. Links outside every writable prefix are the operator's and are
	// followed when a prefix is opened.
	Writable []string
}

// Check resolves path with JoinPath against the grant's working dir and
// reports whether a prefix of mode's list covers it. It returns the absolute
// path (also on denial, for messages) and nil or a *tool.DenialError of kind
// tool.ErrPathNotReachable: "read not permitted for <abs>" or "write not
// permitted for <abs>". It is lexical only: the accessor must still open the
// path inside an os.Root so that symlinks cannot leave the prefix.
func (g *FSGrant) Check(mode Mode, path string) (abs string, err error) {
	var wd string
	if g != nil {
		wd = g.WorkingDir
	}
	abs = JoinPath(wd, path)
	if g != nil && coveredBy(g.list(mode), abs) {
		return abs, nil
	}
	return abs, tool.Deny(tool.ErrPathNotReachable, mode.String()+" not permitted for "+abs)
}

// list returns the prefixes of mode.
func (g *FSGrant) list(mode Mode) []string {
	switch mode {
	case Read:
		return g.Read
	case Write:
		return g.Write
	}
	return nil
}

// Empty reports whether the grant reaches nothing in either direction.
func (g *FSGrant) Empty() bool { return g == nil || (len(g.Read) == 0 && len(g.Write) == 0) }
