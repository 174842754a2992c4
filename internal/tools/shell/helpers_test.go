package shell_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tool/tooltest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// resolver is shared, as the worker shares its one.
var resolver = process.NewResolver(process.DefaultTrustedPATH)

// runner returns the real runner of a grant declaring binaries, with no
// fs reach.
func runner(binaries ...string) tool.Runner {
	return process.New(&capability.BinaryGrant{Declared: binaries}, process.Reach{}, resolver, process.Config{}, nil)
}

// runnerIn is runner with dirs as the read reach.
func runnerIn(dirs []string, binaries ...string) tool.Runner {
	reach := process.Reach{FS: &capability.FSGrant{Read: dirs}}
	return process.New(&capability.BinaryGrant{Declared: binaries}, reach, resolver, process.Config{}, nil)
}

func ctxT(t *testing.T) context.Context { return tooltest.Context(t, 30*time.Second) }

// call runs tl with args (a JSON object) and tc.
func call(t *testing.T, tl tool.Tool, args string, tc *tool.Context) (tool.Result, error) {
	t.Helper()
	return tl.Execute(ctxT(t), json.RawMessage(args), tc)
}

// mustExec is call that requires no Go error.
func mustExec(t *testing.T, tl tool.Tool, args string, tc *tool.Context) tool.Result {
	t.Helper()
	res, err := call(t, tl, args, tc)
	require.NoError(t, err)
	return res
}

// realDir is a fresh temp dir with symlinks resolved, as a child's getcwd
// reports it.
func realDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	return d
}

// jsonArgs encodes args as a JSON object.
func jsonArgs(t *testing.T, args map[string]any) string {
	t.Helper()
	b, err := json.Marshal(args)
	require.NoError(t, err)
	return string(b)
}

// recorder collects the progress events of a call.
type recorder struct {
	mu  sync.Mutex
	got []tool.Progress
}

func (r *recorder) emit(p tool.Progress) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, p)
	return nil
}

func (r *recorder) events() []tool.Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]tool.Progress(nil), r.got...)
}
