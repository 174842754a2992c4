package file_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/tools/file"
	"github.com/capstanhq/capstan/tool"
)

func TestWriteFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		path    string
		content string
		want    string // the ok value, with %s for the abs path
	}{
		{"new file", "a.txt", "hello", "Written 5 bytes to %s"},
		{"parents created", "deep/er/a.txt", "x\n", "Written 2 bytes to %s"},
		{"bytes not characters", "a.txt", "héllo", "Written 6 bytes to %s"},
		{"empty content", "a.txt", "", "Written 0 bytes to %s"},
		{"relative path cleaned", "d/../b.txt", "b", "Written 1 bytes to %s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			abs := e.p(tt.path)
			res := e.run(t, file.WriteFile(), jsonArgs(t, map[string]any{"path": tt.path, "content": tt.content}))
			require.Equal(t, tool.OK(fmt.Sprintf(tt.want, abs)), res)
			require.Equal(t, tt.content, e.read(t, relOf(e, abs)))
			got, found := e.reads.get(abs)
			require.True(t, found, "a write records the new mtime")
			require.True(t, got.Equal(e.mtime(t, relOf(e, abs))))
		})
	}
}

func TestWriteFileOverwritesNeverReadFileUnchecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	abs := e.write(t, "a.txt", "old")
	e.touch(t, "a.txt", time.Now().Add(-time.Hour))
	require.Equal(t, tool.OK("Written 3 bytes to "+abs), e.run(t, file.WriteFile(), `{"path":"a.txt","content":"new"}`))
	require.Equal(t, "new", e.read(t, "a.txt"))
}

// readAt and changedAt are the mtimes of the STALE_WRITE tests.
var (
	readAt    = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	changedAt = time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC)
)

// staleTools are the tools that run the STALE_WRITE check, with args that
// would succeed on "a.txt" holding "old".
var staleTools = []struct {
	tool tool.Tool
	args string
	done string // ok value prefix
}{
	{file.WriteFile(), `{"path":"a.txt","content":"new"}`, "Written 3 bytes to "},
	{file.PatchFile(), `{"path":"a.txt","old_text":"old","new_text":"new"}`, "Patched "},
}

func TestStaleWriteModified(t *testing.T) {
	t.Parallel()
	for _, st := range staleTools {
		t.Run(st.tool.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			abs := e.write(t, "a.txt", "old")
			e.touch(t, "a.txt", readAt)
			require.True(t, e.run(t, file.ReadFile(), `{"path":"a.txt"}`).OK)
			e.touch(t, "a.txt", changedAt) // changed by someone else
			require.Equal(t, tool.Fail(tool.CodeStaleWrite, "STALE_WRITE: "+abs+
				" was read at 2026-01-02T03:04:05.123456789Z but modified externally at 2026-01-02T04:00:00Z. Re-read the file before writing."),
				e.run(t, st.tool, st.args))
			require.Equal(t, "old", e.read(t, "a.txt"), "nothing written")

			require.True(t, e.run(t, file.ReadFile(), `{"path":"a.txt"}`).OK, "re-read")
			require.Equal(t, tool.OK(st.done+abs), e.run(t, st.tool, st.args))
			require.Equal(t, "new", e.read(t, "a.txt"))
		})
	}
}

func TestStaleWriteDeleted(t *testing.T) {
	t.Parallel()
	for _, st := range staleTools {
		t.Run(st.tool.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			abs := e.write(t, "a.txt", "old")
			e.touch(t, "a.txt", readAt)
			require.True(t, e.run(t, file.ReadFile(), `{"path":"a.txt"}`).OK)
			require.NoError(t, os.Remove(abs))
			require.Equal(t, tool.Fail(tool.CodeStaleWrite, "STALE_WRITE: "+abs+
				" was read at 2026-01-02T03:04:05.123456789Z but no longer exists on disk. Re-read the file before writing."),
				e.run(t, st.tool, st.args))
			require.NoFileExists(t, abs)
		})
	}
}

// TestWriteRefreshesRecord: after a successful write the next write is
// checked against the written mtime, not the one first read.
func TestWriteRefreshesRecord(t *testing.T) {
	t.Parallel()
	for _, st := range staleTools {
		t.Run(st.tool.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			abs := e.write(t, "a.txt", "old")
			e.touch(t, "a.txt", readAt)
			require.True(t, e.run(t, file.ReadFile(), `{"path":"a.txt"}`).OK)
			require.Equal(t, tool.OK(st.done+abs), e.run(t, st.tool, st.args))
			got, _ := e.reads.get(abs)
			require.True(t, got.Equal(e.mtime(t, "a.txt")), "record refreshed to the written mtime")
			require.False(t, got.Equal(readAt))

			e.touch(t, "a.txt", readAt) // pretend the written mtime is the one read, as a record check
			require.NoError(t, e.reads.Record(context.Background(), abs, readAt))
			require.Equal(t, tool.OK("Written 1 bytes to "+abs), e.run(t, file.WriteFile(), `{"path":"a.txt","content":"x"}`),
				"a write after a write needs no re-read")
			e.touch(t, "a.txt", changedAt)
			require.Equal(t, tool.CodeStaleWrite, e.run(t, file.WriteFile(), `{"path":"a.txt","content":"y"}`).Code)
		})
	}
}

func TestWriteFileBoundary(t *testing.T) {
	t.Parallel()
	e := newEnvGrant(t, func(dir string) *capability.FSGrant {
		return &capability.FSGrant{Read: []string{dir}, Write: []string{dir + "/out"}, WorkingDir: dir}
	})
	require.Equal(t, tool.OK("Written 1 bytes to "+e.p("out/new/a.txt")), e.run(t, file.WriteFile(), `{"path":"out/new/a.txt","content":"x"}`))
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, `Filesystem boundary: write of "`+e.p("a.txt")+
		`" is outside this personality's fs_reach allowlist.`), e.run(t, file.WriteFile(), `{"path":"a.txt","content":"x"}`))
	require.NoFileExists(t, e.p("a.txt"))
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed,
		`Filesystem boundary: write of "/etc/capstan-test" is outside this personality's fs_reach allowlist.`),
		e.run(t, file.WriteFile(), `{"path":"/etc/capstan-test","content":"x"}`))
}

// TestWriteFileWriteOnly: a path that can be written but not read is
// written without read-back and without a record.
func TestWriteFileWriteOnly(t *testing.T) {
	t.Parallel()
	e := newEnvGrant(t, func(dir string) *capability.FSGrant {
		return &capability.FSGrant{Read: []string{dir + "/pub"}, Write: []string{dir + "/drop"}, WorkingDir: dir}
	})
	abs := e.p("drop/a.txt")
	require.Equal(t, tool.OK("Written 1 bytes to "+abs), e.run(t, file.WriteFile(), `{"path":"drop/a.txt","content":"x"}`))
	require.Equal(t, "x", e.read(t, "drop/a.txt"))
	_, found := e.reads.get(abs)
	require.False(t, found)
}

func TestWriteFileDirectory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.write(t, "d/a.txt", "x")
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "Cannot write "+e.p("d")+": is a directory"),
		e.run(t, file.WriteFile(), `{"path":"d","content":"x"}`))
}

func TestWriteFileRecordStoreFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	abs := e.p("a.txt")
	e.tc.Reads = brokenReads{}
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "Cannot check "+abs+" for STALE_WRITE: kv unavailable"),
		e.run(t, file.WriteFile(), `{"path":"a.txt","content":"x"}`))
	require.NoFileExists(t, abs, "the check fails closed")

	e.tc.Reads = recordFails{newMemReads()}
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "Written 1 bytes to "+abs+
		", but recording its modification time failed: kv unavailable. Re-read the file before writing it again."),
		e.run(t, file.WriteFile(), `{"path":"a.txt","content":"x"}`))
}

func TestWriteFileWithoutRecordStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.tc.Reads = nil
	require.Equal(t, tool.OK("Written 1 bytes to "+e.p("a.txt")), e.run(t, file.WriteFile(), `{"path":"a.txt","content":"x"}`))
}

func TestWriteFileVerification(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	abs := e.p("a.txt")
	e.tc.FS = corruptFS{e.tc.FS}
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "Write verification failed for "+abs+
		": wrote 5 bytes but read back 6 bytes, first difference at byte 5"),
		e.run(t, file.WriteFile(), `{"path":"a.txt","content":"hello"}`))
	_, found := e.reads.get(abs)
	require.False(t, found, "an unverified write is not recorded")
}

// corruptFS reads back more than was written.
type corruptFS struct{ tool.FS }

func (c corruptFS) ReadFile(ctx context.Context, path string) ([]byte, string, error) {
	b, abs, err := c.FS.ReadFile(ctx, path)
	return append(b, '!'), abs, err
}

// recordFails finds records but cannot store them.
type recordFails struct{ *memReads }

func (recordFails) Record(context.Context, string, time.Time) error { return errStore }
