// Package file holds the built-in file tools of tools.md: read_file,
// write_file, patch_file and search_files. They reach the filesystem only
// through the call's tool.Context: tc.FS (the scoped accessor of the
// resolved fs_reach) and tc.Reads (the shared STALE_WRITE read records).
//
// Shared rules:
//
//   - A relative path is joined to tc.WorkingDir and cleaned; an absolute
//     one is cleaned. That absolute path ("<abs>") is what the tools pass to
//     the accessor and show in every message.
//   - No accessor (tc.FS nil) → not_available "Filesystem capability not
//     configured for this personality."
//   - A reach denial (tool.ErrPathNotReachable) → execution_failed
//     `Filesystem boundary: <read|write> of "<abs>" is outside this
//     personality's fs_reach allowlist.` ("read" for ReadFile, Stat and
//     ReadDir, "write" for WriteFile; the path is in plain double quotes,
//     not Go-escaped).
//   - A missing file → execution_failed "Cannot <verb> <abs>: file not
//     found"; any other accessor failure → "Cannot <verb> <abs>: <reason>"
//     (verb read, write or search; reason is the underlying error without
//     the operation and path the accessor put around it).
//   - A cancelled or expired ctx is returned as a Go error (its cause), so the
//     worker reports the cancellation or timeout itself.
//
// STALE_WRITE: read_file records abs → mtime in tc.Reads (already scoped to
// the session by the worker). write_file and patch_file look the record up
// before writing; a path never read (no record) is not checked. The times
// in STALE_WRITE messages are UTC in time.RFC3339Nano (RFC 3339 with as many
// fractional-second digits as needed, none when the time is a whole second):
// "2026-01-02T03:04:05.123456789Z". With tc.Reads nil nothing is recorded
// or checked. Changes within the filesystem's mtime granularity cannot be
// seen.
package file

import (
	"context"
	"errors"
	iofs "io/fs"
	"path/filepath"
	"time"

	"github.com/capstanhq/capstan/tool"
)

// The tools' names.
const (
	ReadFileName    = "read_file"
	WriteFileName   = "write_file"
	PatchFileName   = "patch_file"
	SearchFilesName = "search_files"
)

// Toolset is the toolset label of every tool of this package.
const Toolset = "file"

// ReadFileMaxResultChars is read_file's max_result_chars.
const ReadFileMaxResultChars = 40000

// MsgNoFS is the not_available message of a call without a filesystem accessor.
const MsgNoFS = "Filesystem capability not configured for this personality."

// Tools returns read_file, write_file, patch_file and search_files, in that
// order. read_file's reducer (shape.ReadFileReducer) is registered by the
// worker, not here.
func Tools() []tool.Tool {
	return []tool.Tool{ReadFile(), WriteFile(), PatchFile(), SearchFiles()}
}

// readReach declares fs_reach {read: from-personality}.
func readReach() tool.Capabilities {
	return tool.Capabilities{FSReach: &tool.FSReach{Read: tool.FromPersonality()}}
}

// readWriteReach declares fs_reach {read: from-personality, write: from-personality}.
func readWriteReach() tool.Capabilities {
	return tool.Capabilities{FSReach: &tool.FSReach{Read: tool.FromPersonality(), Write: tool.FromPersonality()}}
}

// absPath resolves p the way the accessor does: cleaned when absolute,
// joined to the working dir and cleaned when relative.
func absPath(tc *tool.Context, p string) string {
	if filepath.IsAbs(p) || tc.WorkingDir == "" {
		return filepath.Clean(p)
	}
	return filepath.Join(tc.WorkingDir, p)
}

// noFS is the result of a call without a filesystem accessor.
func noFS() tool.Result { return tool.Fail(tool.CodeNotAvailable, MsgNoFS) }

// boundary is the execution_failed result of a reach denial of abs in mode
// ("read" or "write").
func boundary(mode, abs string) tool.Result {
	return tool.Fail(tool.CodeExecutionFailed,
		"Filesystem boundary: "+mode+` of "`+abs+`" is outside this personality's fs_reach allowlist.`)
}

// fsFailure turns an accessor error into a result: a reach denial in mode,
// a missing file, or another failure to <verb> abs. A cancelled ctx is
// returned as an error instead.
func fsFailure(ctx context.Context, mode, verb, abs string, err error) (tool.Result, error) {
	switch {
	case ctx.Err() != nil:
		return tool.Result{}, context.Cause(ctx)
	case errors.Is(err, tool.ErrPathNotReachable):
		return boundary(mode, abs), nil
	case errors.Is(err, iofs.ErrNotExist):
		return tool.Fail(tool.CodeExecutionFailed, "Cannot "+verb+" "+abs+": file not found"), nil
	}
	return tool.Fail(tool.CodeExecutionFailed, "Cannot "+verb+" "+abs+": "+reason(err)), nil
}

// reason is err without the "<op> <path>: " of an *fs.PathError.
func reason(err error) string {
	var pe *iofs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// iso formats t for STALE_WRITE messages.
func iso(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
