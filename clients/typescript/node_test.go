// Package typescript_test runs the TypeScript client's tests (node --test)
// against a real Capstan pool: an embedded nats-server that requires its
// credentials, and a real worker with the built-in tools plus one gated tool.
// The same shared cases (testdata/cases.json) run through the Go client here,
// and the Go client's ToolsFor is handed to the TypeScript tests, which check
// that their port of the gates gives the same catalog.
package typescript_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// personalities are stored before the worker starts. "gated" grants what
// the weather tool declares; "strict" does not; "researcher" is a tenant's
// personality with a small toolset. "ops" holds echo calls whose text is
// "pay" or "refund" for approval by alice or bob (test/approvals.test.ts);
// "opsself" holds every echo call and lets its caller decide it.
var personalities = map[string]string{
	"default":    "id: default\n",
	"researcher": "id: researcher\ntoolset: [echo, web]\n",
	"gated": "id: gated\ntoolset: [echo, weather]\npermissions: [\"weather:*\"]\n" +
		"safety:\n  network:\n    allow: [\"*.example.com\"]\nfs_reach:\n  read: [/srv]\n",
	"strict": "id: strict\ntoolset: [echo, weather]\npermissions: [\"weather:read\"]\n" +
		"safety:\n  network:\n    allow: [\"example.com\"]\n",
	"ops": "id: ops\ntoolset: [echo]\napproval:\n  require:\n    - tool: echo\n      when: {text: [pay, refund]}\n" +
		"  timeout: 1h\n  approvers: [alice, bob]\n",
	"opsself": "id: opsself\ntoolset: [echo]\napproval:\n  require: [{tool: echo}]\n  self: true\n",
}

// weather is a tool behind a permission, a declared host and a declared
// path: what the personality gates of ToolsFor look at.
func weather() tool.Tool {
	return tool.Tool{
		Name:        "weather",
		Description: "Forecast for a city.",
		Schema:      json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
		Toolset:     "weather",
		Permissions: []string{"weather:read"},
		Capabilities: tool.Capabilities{
			Network: &tool.Network{AllowedHosts: []string{"api.example.com"}},
			FSReach: &tool.FSReach{Read: tool.Paths("/srv/data")},
		},
		Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
			return tool.OK("sunny"), nil
		},
	}
}

// reportRows is how many rows the report tool returns in its structured
// payload: about 400 KiB of JSON, over the worker's 256 KiB structured
// limit, so the result leaves it out (structured_omitted) and the worker
// stores it as a blob (test/client.test.ts reads it back).
const reportRows = 8000

// report is a tool whose structured payload is too large for its result.
func report() tool.Tool {
	return tool.Tool{
		Name:        "report",
		Description: "A report with a large structured payload.",
		Schema:      json.RawMessage(`{"type":"object","properties":{}}`),
		Toolset:     "report",
		Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
			rows := make([]any, reportRows)
			for i := range rows {
				rows[i] = map[string]any{"n": i, "label": fmt.Sprintf("row %05d of the report", i)}
			}
			r := tool.OK(fmt.Sprintf("report of %d rows", reportRows))
			r.Structured = map[string]any{"rows": rows}
			return r, nil
		},
	}
}

// pool starts an embedded server and a worker until the test ends and
// returns the server's URL.
func pool(t *testing.T, ctx context.Context) string {
	t.Helper()
	url := bustest.Server(t)
	conn := bustest.Conn(t, url, "")
	kv, err := conn.KV(ctx, bus.Personalities)
	require.NoError(t, err)
	for id, doc := range personalities {
		_, err := kv.Put(ctx, id, []byte(doc))
		require.NoError(t, err)
	}
	tools := append(builtin.All(), weather(), report())
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), WorkerID: "ts-pool",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownGrace: 2 * time.Second}, tools...)
	require.NoError(t, err)
	workertest.Run(t, w, nil)
	return url
}

type sharedCases struct {
	Cases []struct {
		Name string          `json:"name"`
		Call json.RawMessage `json:"call"`
		Want map[string]any  `json:"want"`
	} `json:"cases"`
}

// TestSharedCasesThroughTheGoClient runs testdata/cases.json with the Go
// client; test/cases.test.ts runs the same file with the TypeScript client.
func TestSharedCasesThroughTheGoClient(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := pool(t, ctx)
	c, err := client.New(ctx, client.Config{NATSURL: url, NATSCreds: bustest.Creds(url), Name: t.Name()})
	require.NoError(t, err)
	defer c.Close()
	data, err := os.ReadFile(filepath.Join("testdata", "cases.json"))
	require.NoError(t, err)
	var sc sharedCases
	require.NoError(t, json.Unmarshal(data, &sc))
	calls := make([]client.Call, len(sc.Cases))
	for i, tc := range sc.Cases {
		require.NoError(t, json.Unmarshal(tc.Call, &calls[i]), tc.Name)
	}
	results := c.ExecuteParallel(ctx, client.Turn{Wait: time.Minute}, calls)
	for i, tc := range sc.Cases {
		got := map[string]any{}
		b, err := json.Marshal(results[i])
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &got))
		for k, want := range tc.Want {
			require.Equal(t, want, got[k], "%s: field %s of %s", tc.Name, k, b)
		}
	}
}

// TestTypeScriptClient runs `node --test` on the compiled tests of the
// TypeScript client against a real pool. It needs node and the package's
// node_modules (npm ci); without them it skips, saying so.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	node := nodeAndModules(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	compileTests(t, ctx, node)

	url := pool(t, ctx)
	c, err := client.New(ctx, client.Config{NATSURL: url, NATSCreds: bustest.Creds(url), Name: t.Name()})
	require.NoError(t, err)
	defer c.Close()
	toolsFor := map[string][]string{}
	for id := range personalities {
		entries, err := c.ToolsFor(ctx, id)
		require.NoError(t, err)
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name)
		}
		sort.Strings(names)
		toolsFor[id] = names
	}
	require.Contains(t, toolsFor["gated"], "weather", "the gated personality may call weather")
	require.NotContains(t, toolsFor["strict"], "weather", "the strict personality may not")
	expected, err := json.Marshal(toolsFor)
	require.NoError(t, err)

	files, err := filepath.Glob(filepath.Join("build", "test", "*.test.js"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "compiled tests in build/test")
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == tenantTests })
	cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-concurrency=1"}, files...)...)
	cmd.Env = append(os.Environ(),
		"CAPSTAN_TEST_NATS_URL="+url,
		"CAPSTAN_TEST_NATS_CREDS="+bustest.Creds(url),
		"CAPSTAN_TEST_TOOLS_FOR="+string(expected),
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		// All of it: the failing tests' details are anywhere in the output.
		t.Fatalf("node --test failed: %v\n%s", err, out)
	}
	t.Logf("node --test:\n%s", tail(string(out), 120))
}

// tenantTests is the compiled test file TestTypeScriptClientAsTenant runs
// (and the other harness leaves out).
const tenantTests = "tenant.test.js"

// tenantPasswords are the passwords of deploy/nats/auth.conf's users here,
// given to the server through the variables the file reads.
var tenantPasswords = map[string]string{
	"CAPSTAN_NATS_WORKER_PASSWORD":            "worker-test-password",
	"CAPSTAN_NATS_OPERATOR_PASSWORD":          "operator-test-password",
	"CAPSTAN_NATS_BACKEND_PASSWORD":           "backend-test-password",
	"CAPSTAN_NATS_APPROVER_PASSWORD":          "approver-test-password",
	"CAPSTAN_NATS_TENANT_RESEARCHER_PASSWORD": "researcher-test-password",
	"CAPSTAN_NATS_TENANT_SUPPORT_PASSWORD":    "support-test-password",
}

// TestMain sets the password variables before any configuration is parsed
// (nats-server resolves $VAR references when it parses the file).
func TestMain(m *testing.M) {
	for k, v := range tenantPasswords {
		if err := os.Setenv(k, v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

var (
	compileOnce sync.Once
	compileErr  error
)

// compileTests compiles the TypeScript tests into build/test once for every
// test of this package that runs them.
func compileTests(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	compileOnce.Do(func() {
		build := exec.CommandContext(ctx, node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.test.json")
		if out, err := build.CombinedOutput(); err != nil {
			compileErr = fmt.Errorf("tsc -p tsconfig.test.json: %v\n%s", err, out)
		}
	})
	if compileErr != nil {
		t.Fatal(compileErr)
	}
}

// nodeAndModules returns the node binary, or skips the test saying what is
// missing.
func nodeAndModules(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the TypeScript client's tests need Node.js 20 or later")
	}
	if _, err := os.Stat(filepath.Join("node_modules", "typescript")); err != nil {
		t.Skip("clients/typescript/node_modules is missing: run `npm ci` in clients/typescript (.ci/run does)")
	}
	return node
}

// TestTypeScriptClientAsTenant runs test/tenant.test.ts: the TypeScript
// client connected as the NATS user tenant-researcher to a server started
// from deploy/nats (users and permissions as deployed), served by the real
// worker binary (built here) connected as the worker user. It proves that
// everything the client does is allowed to a tenant, and that the server
// refuses the tenant every read and write of the other tenant's personality.
func TestTypeScriptClientAsTenant(t *testing.T) {
	t.Parallel()
	node := nodeAndModules(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	compileTests(t, ctx, node)

	url := bustest.ConfigServer(t, filepath.Join("..", "..", "deploy", "nats", "nats-1.conf"))
	as := func(user string) string {
		pw := tenantPasswords["CAPSTAN_NATS_"+strings.ToUpper(strings.ReplaceAll(user, "-", "_"))+"_PASSWORD"]
		return bustest.UserURL(url, user, pw)
	}
	// The operator creates the topology and stores both tenants' personalities.
	op, err := client.New(ctx, client.Config{NATSURL: as("operator"), Name: "operator " + t.Name()})
	require.NoError(t, err)
	defer op.Close()
	for _, doc := range []string{"id: researcher\n", "id: support\n"} {
		_, problems, err := op.PutPersonality(ctx, []byte(doc))
		require.NoError(t, err)
		require.Empty(t, problems)
	}

	bin := filepath.Join(t.TempDir(), "worker")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/capstanhq/capstan/cmd/worker").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/worker: %v\n%s", err, out)
	}
	var logs safeBuffer
	w := exec.Command(bin)
	w.Env = append(os.Environ(), "CAPSTAN_NATS_URL="+as("worker"), "CAPSTAN_WORKER_ID=ts-tenant-pool",
		"CAPSTAN_HTTP_ADDR=127.0.0.1:0", "CAPSTAN_SHUTDOWN_GRACE=2s", "CAPSTAN_SECRETS_BACKEND=none", "CAPSTAN_LOG_FORMAT=json")
	w.Stdout, w.Stderr = &logs, &logs
	require.NoError(t, w.Start())
	// exited is closed once the worker has exited (waitErr says how), so
	// that both the wait for readiness and the clean-up may see it.
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = w.Wait(); close(exited) }()
	defer func() {
		_ = w.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = w.Process.Kill()
			<-exited
		}
	}()

	// Ready once it answers the tenant.
	tenant, err := client.New(ctx, client.Config{NATSURL: as("tenant-researcher"), Name: "tenant " + t.Name(),
		Personality: "researcher", InboxPrefix: "_INBOX_researcher"})
	require.NoError(t, err)
	defer tenant.Close()
	deadline := time.Now().Add(90 * time.Second)
	for {
		r := tenant.ExecuteParallel(ctx, client.Turn{Wait: 5 * time.Second},
			[]client.Call{{Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"ready?"}`)}})[0]
		if r.OK {
			break
		}
		select {
		case <-exited:
			t.Fatalf("the worker exited: %v\n%s", waitErr, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker did not answer in 90s: %s %s\n%s", r.Code, r.Error, logs.String())
		}
	}

	cmd := exec.CommandContext(ctx, node, "--test", "--test-concurrency=1", filepath.Join("build", "test", tenantTests))
	cmd.Env = append(os.Environ(),
		"CAPSTAN_TEST_TENANT_URL="+url,
		"CAPSTAN_TEST_TENANT_USER=tenant-researcher",
		"CAPSTAN_TEST_TENANT_PASS="+tenantPasswords["CAPSTAN_NATS_TENANT_RESEARCHER_PASSWORD"],
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test %s failed: %v\n%s\nworker log:\n%s", tenantTests, err, out, tail(logs.String(), 60))
	}
	t.Logf("node --test:\n%s", tail(string(out), 40))
}

// safeBuffer is a bytes.Buffer for a child's output read while it runs.
type safeBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *safeBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *safeBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = append([]string{"..."}, l[len(l)-lines:]...)
	}
	return strings.Join(l, "\n")
}
