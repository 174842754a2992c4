package mcphost

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if rogueOnce.dir != "" {
		_ = os.RemoveAll(rogueOnce.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// rogueOnce builds testdata/rogue once per test binary.
var rogueOnce struct {
	sync.Once
	dir string
	bin string
	err error
}

// rogue returns the path of the rogue MCP server, built once (in a
// directory of its own: Landlock lets a child read its binary's directory).
func rogue(t *testing.T) string {
	t.Helper()
	rogueOnce.Do(func() {
		rogueOnce.dir, rogueOnce.err = os.MkdirTemp("", "capstan-rogue-")
		if rogueOnce.err != nil {
			return
		}
		rogueOnce.bin = filepath.Join(rogueOnce.dir, "rogue")
		cmd := exec.Command("go", "build", "-o", rogueOnce.bin, "./testdata/rogue")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			rogueOnce.err = err
			rogueOnce.bin = string(out)
		}
	})
	require.NoError(t, rogueOnce.err, "go build ./testdata/rogue: %s", rogueOnce.bin)
	return rogueOnce.bin
}

// logBuffer is a slog handler's destination that tests read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testHost is a running Host and the tools it hosts.
type testHost struct {
	t     *testing.T
	h     *Host
	logs  *logBuffer
	mu    sync.Mutex
	tools map[string]tool.Tool
}

// startHost runs a Host for defs until the test ends and waits for every
// first start. cfg's zero fields get quick test timings.
func startHost(t *testing.T, cfg Config, defs ...*Definition) *testHost {
	t.Helper()
	th := &testHost{t: t, logs: &logBuffer{}, tools: map[string]tool.Tool{}}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(th.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if cfg.Process.TrustedPATH == nil {
		cfg.Process.TrustedPATH = process.DefaultTrustedPATH
	}
	if cfg.Process.Network == "" {
		cfg.Process.Network = process.NetworkConfined
	}
	if cfg.RestartMin == 0 {
		cfg.RestartMin = 50 * time.Millisecond
	}
	if cfg.RestartMax == 0 {
		cfg.RestartMax = time.Second
	}
	cfg.OnTools = func(server string, tools []tool.Tool) {
		th.mu.Lock()
		defer th.mu.Unlock()
		for _, tl := range tools {
			th.tools[tl.Name] = tl
		}
	}
	h, err := New(cfg, defs)
	require.NoError(t, err)
	th.h = h
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-h.Started():
	case <-time.After(60 * time.Second):
		t.Fatal("host did not end its first starts in 60s")
	}
	return th
}

func (th *testHost) tool(name string) tool.Tool {
	th.t.Helper()
	th.mu.Lock()
	defer th.mu.Unlock()
	tl, ok := th.tools[name]
	require.True(th.t, ok, "tool %s is not hosted (logs:\n%s)", name, th.logs.String())
	return tl
}

// call runs a hosted tool as the worker would, collecting its progress.
func (th *testHost) call(ctx context.Context, name, args string) (tool.Result, []tool.Progress, error) {
	th.t.Helper()
	var mu sync.Mutex
	var progress []tool.Progress
	tc := &tool.Context{CallID: "c1", EmitFunc: func(p tool.Progress) error {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, p)
		return nil
	}}
	res, err := th.tool(name).Execute(ctx, json.RawMessage(args), tc)
	mu.Lock()
	defer mu.Unlock()
	return res, progress, err
}

func (th *testHost) status(server string) Status {
	return th.h.Status()[server]
}

// waitState waits until server is in state, and returns its status.
func (th *testHost) waitState(server, state string) Status {
	th.t.Helper()
	var st Status
	require.Eventually(th.t, func() bool {
		st = th.status(server)
		return st.State == state
	}, 30*time.Second, 10*time.Millisecond, "server %s never %s (logs:\n%s)", server, state, th.logs.String())
	return st
}

// requireConfined skips a test whose point is the sandbox on a machine
// without it.
func requireConfined(t *testing.T) {
	t.Helper()
	sb := process.Sandbox()
	if !sb.Landlock || !sb.NetworkNamespace || !sb.Seccomp {
		t.Skipf("this machine cannot confine children (landlock %t, network namespace %t, seccomp %t): nothing to prove",
			sb.Landlock, sb.NetworkNamespace, sb.Seccomp)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
