package file

import (
	"bytes"
	"context"
	"errors"
	iofs "io/fs"
	"strconv"
	"time"

	"github.com/capstanhq/capstan/tool"
)

// checkStale is the STALE_WRITE check of write_file and patch_file, run
// before anything is written. A path without a read record (or a call
// without tc.Reads) passes. With a record, the file's current mtime must
// equal the recorded one; otherwise the result is a STALE_WRITE failure:
//
//	STALE_WRITE: <abs> was read at <ISO> but modified externally at <ISO>. Re-read the file before writing.
//	STALE_WRITE: <abs> was read at <ISO> but no longer exists on disk. Re-read the file before writing.
//
// A read that found no file records the zero time: writing the still
// missing path then goes ahead (that read is the "re-read" the deleted-file
// message asks for), and a file created since is STALE_WRITE.
//
// It returns nil when the write may go ahead. A record store that fails
// fails the call (execution_failed): the check never passes by default.
func checkStale(ctx context.Context, tc *tool.Context, abs string) (*tool.Result, error) {
	if tc.Reads == nil {
		return nil, nil
	}
	readAt, found, err := tc.Reads.Recorded(ctx, abs)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		res := tool.Fail(tool.CodeExecutionFailed, "Cannot check "+abs+" for STALE_WRITE: "+err.Error())
		return &res, nil
	}
	if !found {
		return nil, nil
	}
	info, _, err := tc.FS.Stat(ctx, abs)
	seenMissing := readAt.IsZero() // recorded by a read that found no file
	switch {
	case seenMissing && errors.Is(err, iofs.ErrNotExist) && ctx.Err() == nil:
		return nil, nil
	case err == nil && seenMissing:
		res := tool.Fail(tool.CodeStaleWrite, "STALE_WRITE: "+abs+" did not exist when it was read but was created externally at "+
			iso(info.ModTime())+". Re-read the file before writing.")
		return &res, nil
	case err == nil:
		if info.ModTime().Equal(readAt) {
			return nil, nil
		}
		res := tool.Fail(tool.CodeStaleWrite, "STALE_WRITE: "+abs+" was read at "+iso(readAt)+
			" but modified externally at "+iso(info.ModTime())+". Re-read the file before writing.")
		return &res, nil
	case errors.Is(err, iofs.ErrNotExist) && ctx.Err() == nil:
		res := tool.Fail(tool.CodeStaleWrite, "STALE_WRITE: "+abs+" was read at "+iso(readAt)+
			" but no longer exists on disk. Re-read the file before writing.")
		return &res, nil
	}
	res, err := fsFailure(ctx, "read", "write", abs, err)
	return &res, err
}

// writeVerified writes data to abs, reads it back and records the new mtime
// in tc.Reads. The mtime is taken before the read-back, so a change racing
// the write shows as a verification failure or a later STALE_WRITE, never
// as a silently refreshed record. done is the ok message of the tool.
//
// When abs is writable but not readable it cannot be read back: the write
// is then reported as done, unverified, and no record is stored (the agent
// cannot have read the path, so there is no record to refresh).
func writeVerified(ctx context.Context, tc *tool.Context, abs string, data []byte, done string) (tool.Result, error) {
	if _, err := tc.FS.WriteFile(ctx, abs, data); err != nil {
		return fsFailure(ctx, "write", "write", abs, err)
	}
	info, _, err := tc.FS.Stat(ctx, abs)
	if errors.Is(err, tool.ErrPathNotReachable) {
		return tool.OK(done), nil
	}
	if err != nil {
		return verifyFailed(ctx, abs, "cannot stat the written file: "+reason(err))
	}
	back, _, err := tc.FS.ReadFile(ctx, abs)
	if errors.Is(err, tool.ErrPathNotReachable) {
		return tool.OK(done), nil
	}
	if err != nil {
		return verifyFailed(ctx, abs, "cannot read the written file back: "+reason(err))
	}
	if !bytes.Equal(back, data) {
		return verifyFailed(ctx, abs, mismatch(data, back))
	}
	if err := record(ctx, tc, abs, info.ModTime()); err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, context.Cause(ctx)
		}
		return tool.Fail(tool.CodeExecutionFailed, done+", but recording its modification time failed: "+
			err.Error()+". Re-read the file before writing it again."), nil
	}
	return tool.OK(done), nil
}

// verifyFailed is the result of a failed read-back of abs.
func verifyFailed(ctx context.Context, abs, why string) (tool.Result, error) {
	if ctx.Err() != nil {
		return tool.Result{}, context.Cause(ctx)
	}
	return tool.Fail(tool.CodeExecutionFailed, "Write verification failed for "+abs+": "+why), nil
}

// mismatch describes how the read-back differs from what was written:
// "wrote <n> bytes but read back <m> bytes, first difference at byte <i>"
// (i 0-based).
func mismatch(want, got []byte) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	return "wrote " + strconv.Itoa(len(want)) + " bytes but read back " + strconv.Itoa(len(got)) +
		" bytes, first difference at byte " + strconv.Itoa(i)
}

// record stores mtime as the last seen modification time of abs, when the
// call has a record store.
func record(ctx context.Context, tc *tool.Context, abs string, mtime time.Time) error {
	if tc.Reads == nil {
		return nil
	}
	return tc.Reads.Record(ctx, abs, mtime)
}
