package file

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	iofs "io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

// search_files limits.
const (
	// DefaultMaxResults and MaxMaxResults bound max_results.
	DefaultMaxResults = 50
	MaxMaxResults     = 200
	// MaxSearchFileBytes is the size above which a file is skipped (2 MiB).
	MaxSearchFileBytes = 2 << 20
	// BinarySniffBytes is how much of a file is looked at for a NUL byte.
	BinarySniffBytes = 8000
)

// skippedDirs are directory names search_files never enters.
var skippedDirs = map[string]bool{".git": true, "node_modules": true}

const searchFilesSchema = `{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "minLength": 1, "description": "Go (RE2) regular expression matched against each line"},
    "path": {"type": "string", "minLength": 1, "description": "directory (or file) to search; default: the working directory"},
    "glob": {"type": "string", "minLength": 1, "description": "only search files whose base name matches this glob (e.g. *.go)"},
    "max_results": {"type": "integer", "minimum": 1, "maximum": 200, "description": "stop after this many matching lines; default 50"}
  },
  "required": ["pattern"],
  "additionalProperties": false
}`

type searchArgs struct {
	Pattern    string `json:"pattern"`
	Path       string `json:"path"`
	Glob       string `json:"glob"`
	MaxResults *int   `json:"max_results"`
}

// SearchFiles returns the search_files tool. It walks path (default ".",
// the working directory; a file is searched alone) with tc.FS.ReadDir in
// name order, depth first, and answers one line per matching line:
//
//	<abs>:<line>: <text>
//
// abs being the file's absolute path, line 1-based and text the line
// without its "\n" (nor a "\r" before it); the empty segment after a
// file's final line break is not a line here. It never enters directories
// named .git or node_modules and skips symlinks to directories, files
// larger than MaxSearchFileBytes, binary files (a NUL byte in the first
// BinarySniffBytes), files whose base name does not match glob
// (filepath.Match) and entries it may not read (reach denials and other
// errors below the root). It stops after max_results matching lines
// (default 50, at most 200); when more exist the last line is
// "[more matches not shown: max_results is <n>]". No match at all: ok
// "No matches for <pattern>". An invalid pattern or glob is input_invalid
// naming the parse error. Untrusted output.
func SearchFiles() tool.Tool {
	return tool.Tool{
		Name:        SearchFilesName,
		SideEffects: tool.SideEffectsNone,
		Description: "Searches files for lines matching a Go regular expression and returns them as " +
			"\"<path>:<line>: <text>\". Skips .git, node_modules, binary files and files over 2 MB.",
		Schema:            json.RawMessage(searchFilesSchema),
		Toolset:           Toolset,
		Capabilities:      readReach(),
		OutputIsUntrusted: true,
		Execute:           tool.Typed(executeSearch),
	}
}

func executeSearch(ctx context.Context, a searchArgs, tc *tool.Context) (tool.Result, error) {
	if a.Pattern == "" {
		return tool.InvalidArguments("args.pattern is required and must not be empty"), nil
	}
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return tool.InvalidArguments("args.pattern is not a valid Go regular expression: " + err.Error()), nil
	}
	if a.Glob != "" {
		if _, err := filepath.Match(a.Glob, ""); err != nil {
			return tool.InvalidArguments("args.glob " + strconv.Quote(a.Glob) + " is not a valid glob: " + err.Error()), nil
		}
	}
	limit := DefaultMaxResults
	if a.MaxResults != nil {
		if *a.MaxResults < 1 || *a.MaxResults > MaxMaxResults {
			return tool.InvalidArguments("args.max_results must be between 1 and " + strconv.Itoa(MaxMaxResults)), nil
		}
		limit = *a.MaxResults
	}
	if tc.FS == nil {
		return noFS(), nil
	}
	root := absPath(tc, cmp.Or(a.Path, "."))
	s := &searcher{fs: tc.FS, re: re, glob: a.Glob, limit: limit}
	info, _, err := tc.FS.Stat(ctx, root)
	if err != nil {
		return fsFailure(ctx, "read", "search", root, err)
	}
	if info.IsDir() {
		entries, _, rerr := tc.FS.ReadDir(ctx, root)
		if rerr != nil {
			return fsFailure(ctx, "read", "search", root, rerr)
		}
		err = s.entries(ctx, root, entries)
	} else {
		err = s.file(ctx, root, info)
	}
	if err != nil && !errors.Is(err, errEnough) {
		return tool.Result{}, err
	}
	if len(s.out) == 0 {
		return tool.OK("No matches for " + a.Pattern), nil
	}
	value := strings.Join(s.out, "\n")
	if s.more {
		value += "\n[more matches not shown: max_results is " + strconv.Itoa(limit) + "]"
	}
	return tool.OK(value), nil
}

// errEnough stops the walk once more than max_results lines matched.
var errEnough = errors.New("enough matches")

// searcher is one search_files walk.
type searcher struct {
	fs    tool.FS
	re    *regexp.Regexp
	glob  string
	limit int
	out   []string
	more  bool
}

// walk searches the directory dir (absolute) below the root; a directory
// it cannot list is skipped. Only a cancelled ctx or errEnough ends the walk
// early.
func (s *searcher) walk(ctx context.Context, dir string) error {
	entries, _, err := s.fs.ReadDir(ctx, dir)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
	return s.entries(ctx, dir, entries)
}

// entries searches the entries of dir, in name order.
func (s *searcher) entries(ctx context.Context, dir string, entries []iofs.DirEntry) error {
	slices.SortFunc(entries, func(x, y iofs.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		p := filepath.Join(dir, e.Name())
		switch t := e.Type(); {
		case t.IsDir():
			if skippedDirs[e.Name()] {
				continue
			}
			if err := s.walk(ctx, p); err != nil {
				return err
			}
		case t.IsRegular() || t&iofs.ModeSymlink != 0:
			// Stat follows a symlink that stays inside the reach; only
			// regular files are searched, so linked directories are not
			// entered and cannot loop.
			info, _, err := s.fs.Stat(ctx, p)
			if err != nil || !info.Mode().IsRegular() {
				continue
			}
			if err := s.file(ctx, p, info); err != nil {
				return err
			}
		}
	}
	return nil
}

// file searches the regular file abs.
func (s *searcher) file(ctx context.Context, abs string, info iofs.FileInfo) error {
	if s.glob != "" {
		if ok, _ := filepath.Match(s.glob, filepath.Base(abs)); !ok {
			return nil
		}
	}
	if info.Size() > MaxSearchFileBytes {
		return nil
	}
	data, _, err := s.fs.ReadFile(ctx, abs)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
	if len(data) > MaxSearchFileBytes || bytes.IndexByte(data[:min(len(data), BinarySniffBytes)], 0) >= 0 {
		return nil
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) > 1 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1] // the empty segment after a final line break is not a line
	}
	for i, line := range lines {
		line = strings.TrimSuffix(line, "\r")
		if !s.re.MatchString(line) {
			continue
		}
		if len(s.out) == s.limit {
			s.more = true
			return errEnough
		}
		s.out = append(s.out, abs+":"+strconv.Itoa(i+1)+": "+line)
	}
	return nil
}
