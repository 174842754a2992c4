package file_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
	"github.com/capstanhq/capstan/tool"
)

// env is a fixture: a temp dir (the working dir, readable and writable
// unless the grant says otherwise), the real scoped accessor over it and an
// in-memory read-record store.
type env struct {
	dir   string
	reads *memReads
	tc    *tool.Context
}

// newEnv returns an env whose grant reads and writes the whole dir.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvGrant(t, func(dir string) *capability.FSGrant {
		return &capability.FSGrant{Read: []string{dir}, Write: []string{dir}, WorkingDir: dir}
	})
}

// newEnvGrant returns an env with the grant made by grant from the dir.
func newEnvGrant(t *testing.T, grant func(dir string) *capability.FSGrant) *env {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	reads := newMemReads()
	acc := scopedfs.New(grant(dir), scopedfs.Config{Home: t.TempDir()}, nil)
	return &env{dir: dir, reads: reads, tc: &tool.Context{FS: acc, Reads: reads, WorkingDir: dir, SessionID: "s"}}
}

// p returns the absolute path of rel in the env.
func (e *env) p(rel string) string { return filepath.Join(e.dir, rel) }

// write creates rel with content (and its parents) directly on disk.
func (e *env) write(t *testing.T, rel, content string) string {
	t.Helper()
	abs := e.p(rel)
	require.NoError(t, os.MkdirAll(filepath.Dir(abs), 0o755))
	require.NoError(t, os.WriteFile(abs, []byte(content), 0o644))
	return abs
}

// read returns the content of rel on disk.
func (e *env) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(e.p(rel))
	require.NoError(t, err)
	return string(b)
}

// run executes tl with args (a JSON object) in the env.
func (e *env) run(t *testing.T, tl tool.Tool, args string) tool.Result {
	t.Helper()
	res, err := tl.Execute(context.Background(), json.RawMessage(args), e.tc)
	require.NoError(t, err)
	return res
}

// mtime returns the modification time of rel on disk.
func (e *env) mtime(t *testing.T, rel string) time.Time {
	t.Helper()
	fi, err := os.Stat(e.p(rel))
	require.NoError(t, err)
	return fi.ModTime()
}

// touch sets the modification time of rel to at.
func (e *env) touch(t *testing.T, rel string, at time.Time) {
	t.Helper()
	require.NoError(t, os.Chtimes(e.p(rel), at, at))
}

// jsonArgs marshals an args object.
func jsonArgs(t *testing.T, v map[string]any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// memReads is an in-memory tool.ReadRecords for one session.
type memReads struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func newMemReads() *memReads { return &memReads{m: map[string]time.Time{}} }

func (r *memReads) Record(_ context.Context, abs string, mtime time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[abs] = mtime
	return nil
}

func (r *memReads) Recorded(_ context.Context, abs string) (time.Time, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.m[abs]
	return t, ok, nil
}

// get returns the record of abs.
func (r *memReads) get(abs string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.m[abs]
	return t, ok
}

// brokenReads is a record store that always fails.
type brokenReads struct{}

var errStore = errors.New("kv unavailable")

func (brokenReads) Record(context.Context, string, time.Time) error { return errStore }
func (brokenReads) Recorded(context.Context, string) (time.Time, bool, error) {
	return time.Time{}, false, errStore
}
