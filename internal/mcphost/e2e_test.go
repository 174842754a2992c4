package mcphost_test

// End-to-end tests: a worker hosting real, third-party MCP servers
// (@modelcontextprotocol/server-filesystem and server-everything, pinned in
// testdata/npm and installed by "npm ci", which .ci/run does), called through
// NATS by the client library exactly as an agent backend would.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/mcphost"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/worker"
)

// npmServers returns the node binary and the directory holding the
// installed test servers, or skips the test saying what is missing.
func npmServers(t *testing.T) (node, npmDir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the tests against real MCP servers need Node.js and npm")
	}
	node, err = filepath.EvalSymlinks(node)
	require.NoError(t, err)
	npmDir, err = filepath.Abs(filepath.Join("testdata", "npm"))
	require.NoError(t, err)
	for _, pkg := range []string{"server-filesystem", "server-everything"} {
		if _, err := os.Stat(filepath.Join(npmDir, "node_modules", "@modelcontextprotocol", pkg, "dist", "index.js")); err != nil {
			t.Skipf("@modelcontextprotocol/%s is not installed: run \"npm ci\" in internal/mcphost/testdata/npm (.ci/run does)", pkg)
		}
	}
	return node, npmDir
}

// syncBuffer collects the worker's log.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// pool is an embedded NATS server, a worker hosting the MCP servers of a
// definitions directory, and a client.
type pool struct {
	t      *testing.T
	url    string
	w      *worker.Worker
	c      *client.Client
	conn   *bus.Conn
	logs   *syncBuffer
	node   string
	npmDir string
	// granted is the directory the filesystem server serves.
	granted string
}

// definitions of the two real servers, written to a directory of their own.
func (p *pool) writeDefinitions(dir string) {
	p.t.Helper()
	pkg := func(name string) string {
		return filepath.Join(p.npmDir, "node_modules", "@modelcontextprotocol", name, "dist", "index.js")
	}
	defs := map[string]string{
		"fs.yaml": `name: fs
command: [` + p.node + `, ` + pkg("server-filesystem") + `, ` + p.granted + `]
capabilities:
  fs_reach: {read: [` + p.npmDir + `, ` + p.granted + `]}
timeout: 30s
`,
		"everything.yml": `name: everything
command: [` + p.node + `, ` + pkg("server-everything") + `, stdio]
capabilities:
  fs_reach: {read: [` + p.npmDir + `]}
`,
	}
	for name, doc := range defs {
		require.NoError(p.t, os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o600))
	}
}

// startPool starts a pool whose personalities directory holds personalities
// (id → document, "%NPM%" and "%GRANTED%" replaced).
func startPool(t *testing.T, personalities map[string]string) *pool {
	t.Helper()
	node, npmDir := npmServers(t)
	p := &pool{t: t, url: bustest.Server(t), logs: &syncBuffer{}, node: node, npmDir: npmDir, granted: t.TempDir()}
	defsDir, persDir := t.TempDir(), t.TempDir()
	p.writeDefinitions(defsDir)
	for id, doc := range personalities {
		doc = strings.NewReplacer("%NPM%", npmDir, "%GRANTED%", p.granted).Replace(doc)
		require.NoError(t, os.WriteFile(filepath.Join(persDir, id+".yaml"), []byte(doc), 0o600))
	}
	w, err := worker.New(worker.Config{
		NATSURL: p.url, NATSCreds: bustest.Creds(p.url), WorkerID: "mcp-e2e", MCPServersDir: defsDir, PersonalitiesDir: persDir,
		CallTimeout: 60 * time.Second, ShutdownGrace: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(p.logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}, echo.Tool())
	require.NoError(t, err)
	p.w = w
	workertest.Run(t, w, p.logs.String)
	for _, server := range []string{"fs", "everything"} {
		require.Equal(t, mcphost.StateUp, p.status(server).State, "server %s is up; log:\n%s", server, p.logs.String())
	}
	p.c, err = client.New(ctxT(t), client.Config{NATSURL: p.url, NATSCreds: bustest.Creds(p.url)})
	require.NoError(t, err)
	t.Cleanup(p.c.Close)
	p.conn = bustest.Conn(t, p.url, "")
	return p
}

// status is a hosted server's status as /readyz shows it.
func (p *pool) status(server string) mcphost.Status {
	p.t.Helper()
	rd := p.w.Readiness(ctxT(p.t))
	st, ok := rd.Details["mcp_servers"].(map[string]mcphost.Status)
	require.True(p.t, ok, "readiness details: %+v", rd.Details)
	return st[server]
}

// run runs one call and returns its result.
func (p *pool) run(call client.Call) client.Result {
	p.t.Helper()
	if call.SessionID == "" {
		call.SessionID = "s1"
	}
	res := p.c.ExecuteParallel(ctxT(p.t), client.Turn{}, []client.Call{call})
	return res[0]
}

// resultsOf counts the results stored for callID.
func (p *pool) resultsOf(callID string) int {
	p.t.Helper()
	names := p.conn.Names()
	n := 0
	idle := time.NewTimer(2 * time.Second)
	got := make(chan struct{}, 16)
	stop, err := p.conn.Tail(ctxT(p.t), names.ResultsStream(), []string{names.Prefix() + ".result.>"}, bus.FromStart, func(m *bus.Msg) {
		var r client.Result
		if json.Unmarshal(m.Data, &r) == nil && r.CallID == callID {
			got <- struct{}{}
		}
	})
	require.NoError(p.t, err)
	defer stop()
	for {
		select {
		case <-got:
			n++
		case <-idle.C:
			return n
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func args(v map[string]any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

const readerPersonality = `id: reader
mcp_servers: [fs]
fs_reach:
  read: ["%GRANTED%", "%NPM%"]
`

// The worker hosts @modelcontextprotocol/server-filesystem confined to a
// temp dir: a personality allowed its tools reads a granted file; a path
// outside the grant is refused by the server; a personality without the
// server, or whose reach does not cover the server's, is refused by the
// worker.
func TestFilesystemServer(t *testing.T) {
	t.Parallel()
	p := startPool(t, map[string]string{
		"reader":  readerPersonality,
		"default": "id: default\n",
		"other":   "id: other\nmcp_servers: [everything]\nfs_reach: {read: [\"%NPM%\"]}\n",
	})
	require.NoError(t, os.WriteFile(filepath.Join(p.granted, "notes.txt"), []byte("hello from the granted dir\n"), 0o600))
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "private.txt"), []byte("not for the agent"), 0o600))

	// The catalog shows the server's tools with its description, schema
	// and declaration.
	tools, err := p.c.Tools(ctxT(t))
	require.NoError(t, err)
	var entry *client.CatalogEntry
	for i := range tools {
		if tools[i].Name == "mcp__fs__read_text_file" {
			entry = &tools[i]
		}
	}
	require.NotNil(t, entry, "mcp__fs__read_text_file is in the catalog")
	require.Contains(t, entry.Description, "Read the complete contents of a file")
	require.Contains(t, string(entry.Schema), `"path"`)
	require.True(t, entry.OutputIsUntrusted)
	require.Contains(t, string(entry.Capabilities), p.granted)

	res := p.run(client.Call{Tool: "mcp__fs__read_file", PersonalityID: "reader", Args: args(map[string]any{"path": filepath.Join(p.granted, "notes.txt")})})
	require.True(t, res.OK, "%+v", res)
	require.Contains(t, res.Value, "hello from the granted dir")
	require.True(t, strings.HasPrefix(res.Value, `<untrusted source="`+filepath.Join(p.granted, "notes.txt")+`" tool="mcp__fs__read_file">`), res.Value)

	res = p.run(client.Call{Tool: "mcp__fs__read_file", PersonalityID: "reader", Args: args(map[string]any{"path": filepath.Join(outside, "private.txt")})})
	require.False(t, res.OK)
	require.Equal(t, protocol.CodeExecutionFailed, res.Code)
	require.Contains(t, res.Error, "Access denied - path outside allowed directories")
	require.NotContains(t, res.Error, "not for the agent")

	res = p.run(client.Call{Tool: "mcp__fs__read_file", PersonalityID: "default", Args: args(map[string]any{"path": filepath.Join(p.granted, "notes.txt")})})
	require.Equal(t, protocol.CodeNotAvailable, res.Code)
	require.Equal(t, "Tool mcp__fs__read_file is not permitted for this personality", res.Error)
	res = p.run(client.Call{Tool: "mcp__fs__read_file", PersonalityID: "other", Args: args(map[string]any{"path": filepath.Join(p.granted, "notes.txt")})})
	require.Equal(t, "Tool mcp__fs__read_file is not permitted for this personality", res.Error)

	// A personality that lists the server but does not reach what it
	// reaches (stored after start: the worker refuses such a file at start).
	kv, err := p.conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	_, err = kv.Put(ctxT(t), "narrow", []byte("id: narrow\nmcp_servers: [fs]\nfs_reach: {read: [\""+p.granted+"\"]}\n"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		res = p.run(client.Call{Tool: "mcp__fs__read_file", PersonalityID: "narrow", Args: args(map[string]any{"path": filepath.Join(p.granted, "notes.txt")})})
		return res.Error != "Unknown personality: narrow"
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, protocol.CodeNotAvailable, res.Code)
	require.Equal(t, `path "`+p.npmDir+`" is not covered by personality fs_reach.read`, res.Error)
}

// A personalities file that lists a hosted server whose declaration it does
// not cover stops the worker at start, naming the file and the problem.
func TestPersonalityNotCoveringAServerStopsTheWorker(t *testing.T) {
	t.Parallel()
	node, npmDir := npmServers(t)
	defsDir, persDir := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(defsDir, "fs.yaml"), []byte("name: fs\ncommand: ["+node+", x]\ncapabilities: {fs_reach: {read: ["+npmDir+"]}}\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(persDir, "p.yaml"), []byte("id: p\nmcp_servers: [fs]\n"), 0o600))
	url := bustest.Server(t)
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), MCPServersDir: defsDir, PersonalitiesDir: persDir,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, echo.Tool())
	require.NoError(t, err)
	err = w.Run(ctxT(t))
	require.ErrorContains(t, err, "personality file "+filepath.Join(persDir, "p.yaml")+" (id p) fails validation:\n  tool mcp__fs__*, fs_reach.read: path \""+npmDir+"\" is not covered by personality fs_reach.read")
}

// An invalid definition stops the worker before it starts, naming the file
// and every problem.
func TestInvalidDefinitionStopsTheWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("name: bad server\nurl: ftp://x\nextra: 1\n"), 0o600))
	_, err := worker.New(worker.Config{NATSURL: "nats://127.0.0.1:1", MCPServersDir: dir}, echo.Tool())
	require.ErrorIs(t, err, mcphost.ErrInvalid)
	file := filepath.Join(dir, "bad.yaml")
	require.Equal(t, "CAPSTAN_MCP_SERVERS_DIR has invalid MCP server definitions:\n  "+
		file+`: unknown key "extra"`+"\n  "+
		file+`: name: "bad server" must match ^[A-Za-z0-9-]+$`+"\n  "+
		file+`: url: "ftp://x": scheme "ftp" is not allowed (only http and https)`, err.Error())
}

// A definition that uses secrets on a worker without a secrets backend
// stops it at New: the server could never start.
func TestDefinitionWithSecretsNeedsABackend(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "gh.yaml")
	require.NoError(t, os.WriteFile(file, []byte("name: gh\ncommand: [gh-mcp]\nsecret_env: {GH_TOKEN: gh/token}\ncapabilities: {secrets: [gh/token]}\n"), 0o600))
	_, err := worker.New(worker.Config{NATSURL: "nats://127.0.0.1:1", MCPServersDir: dir, SecretsBackend: worker.SecretsNone}, echo.Tool())
	require.EqualError(t, err, "MCP server gh ("+file+") uses secrets, but no secrets backend is configured (CAPSTAN_SECRETS_BACKEND=none)")
}

const everythingPersonality = `id: tester
mcp_servers: [everything, fs]
fs_reach:
  read: ["%GRANTED%", "%NPM%"]
`

// The worker hosts @modelcontextprotocol/server-everything: progress
// notifications arrive as progress events, a long-running tool is
// cancelled, a tool error is execution_failed, structured content survives
// the budget trim.
func TestEverythingServer(t *testing.T) {
	t.Parallel()
	p := startPool(t, map[string]string{"tester": everythingPersonality})
	// Progress, cancels and results live under the calls' personality.
	tc, err := p.c.WithPersonality("tester")
	require.NoError(t, err)

	t.Run("progress", func(t *testing.T) {
		var mu sync.Mutex
		var events []client.Progress
		stop, err := tc.Progress(ctxT(t), protocol.AudienceUser, "progress-batch", true, func(ev client.Progress) {
			mu.Lock()
			events = append(events, ev)
			mu.Unlock()
		})
		require.NoError(t, err)
		defer stop()
		res := p.c.ExecuteParallel(ctxT(t), client.Turn{BatchID: "progress-batch"}, []client.Call{{
			Tool: "mcp__everything__trigger-long-running-operation", PersonalityID: "tester", SessionID: "s",
			Args: args(map[string]any{"duration": 2, "steps": 4}),
		}})[0]
		require.True(t, res.OK, "%+v", res)
		require.Contains(t, res.Value, "Long running operation completed. Duration: 2 seconds, Steps: 4.")
		// The last notification may race the result; the earlier ones are events.
		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(events) >= 3 }, 10*time.Second, 10*time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, "1/4", events[0].Message)
		require.Equal(t, 25.0, *events[0].Percent)
		require.Equal(t, protocol.AudienceUser, events[0].Audience)
		require.Equal(t, "mcp__everything__trigger-long-running-operation", events[0].ToolName)
	})

	t.Run("cancel", func(t *testing.T) {
		started := make(chan struct{}, 1)
		stop, err := tc.Progress(ctxT(t), "", "cancel-batch", true, func(client.Progress) {
			select {
			case started <- struct{}{}:
			default:
			}
		})
		require.NoError(t, err)
		defer stop()
		call := client.Call{Tool: "mcp__everything__trigger-long-running-operation", PersonalityID: "tester", SessionID: "s",
			BatchID: "cancel-batch", Args: args(map[string]any{"duration": 60, "steps": 60})}
		require.NoError(t, p.c.Submit(ctxT(t), &call))
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("the long-running operation never reported progress")
		}
		begun := time.Now()
		require.NoError(t, tc.Cancel(ctxT(t), call.CallID, "the user gave up"))
		res, err := tc.Await(ctxT(t), "cancel-batch", call.CallID)
		require.NoError(t, err)
		require.Equal(t, protocol.CodeExecutionFailed, res.Code)
		require.Equal(t, "cancelled: the user gave up", res.Error)
		require.Less(t, time.Since(begun), 20*time.Second)
		require.Equal(t, mcphost.StateUp, p.status("everything").State, "cancelling a call leaves the server up")
	})

	t.Run("tool error", func(t *testing.T) {
		res := p.run(client.Call{Tool: "mcp__everything__gzip-file-as-resource", PersonalityID: "tester", Args: args(map[string]any{"data": "ftp://example.invalid/x"})})
		require.False(t, res.OK)
		require.Equal(t, protocol.CodeExecutionFailed, res.Code)
		require.Contains(t, res.Error, "Unsupported URL protocol for ftp://example.invalid/x")
	})

	t.Run("structured content within the budget", func(t *testing.T) {
		res := p.run(client.Call{Tool: "mcp__everything__get-structured-content", PersonalityID: "tester", ResultBudgetChars: 20,
			Args: args(map[string]any{"location": "Chicago"})})
		require.True(t, res.OK, "%+v", res)
		require.True(t, res.Truncated, "the value is cut to the budget")
		require.JSONEq(t, `{"temperature":36,"conditions":"Light rain / drizzle","humidity":82}`, string(res.Structured))
	})

	t.Run("arguments are validated against the server's schema", func(t *testing.T) {
		res := p.run(client.Call{Tool: "mcp__everything__get-sum", PersonalityID: "tester", Args: args(map[string]any{"a": 1})})
		require.Equal(t, protocol.CodeInputInvalid, res.Code)
		require.Contains(t, res.Error, "args.b is required")
	})

	t.Run("dry run", func(t *testing.T) {
		res := p.run(client.Call{Tool: "mcp__everything__get-sum", PersonalityID: "tester", DryRun: true, Args: args(map[string]any{"a": 1, "b": 2})})
		require.True(t, res.OK)
		require.Equal(t, `[dry-run] mcp__everything__get-sum would be called with: {"a":1,"b":2}`, res.Value)
	})
}

// A server killed (kill -9 of its child) in the middle of a call: the call
// is handed back, runs again once the server is restarted, and is answered
// exactly once; the worker stays ready and its other server keeps serving.
func TestServerKilledMidCall(t *testing.T) {
	t.Parallel()
	p := startPool(t, map[string]string{"tester": everythingPersonality})
	// Progress, cancels and results live under the calls' personality.
	tc, err := p.c.WithPersonality("tester")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(p.granted, "still.txt"), []byte("still here"), 0o600))
	before := p.status("everything")

	started := make(chan struct{}, 1)
	stop, err := tc.Progress(ctxT(t), "", "kill-batch", true, func(client.Progress) {
		select {
		case started <- struct{}{}:
		default:
		}
	})
	require.NoError(t, err)
	defer stop()
	call := client.Call{Tool: "mcp__everything__trigger-long-running-operation", PersonalityID: "tester", SessionID: "s",
		BatchID: "kill-batch", Args: args(map[string]any{"duration": 2, "steps": 4})}
	require.NoError(t, p.c.Submit(ctxT(t), &call))
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the call never reached the server")
	}
	// The MCP server's child, started by this test's worker and still running.
	require.NotZero(t, before.PID, "never signal pid 0: that is our own process group")
	require.Equal(t, before.PID, p.status("everything").PID)
	require.NoError(t, syscall.Kill(before.PID, syscall.SIGKILL))

	res, err := tc.Await(ctxT(t), "kill-batch", call.CallID)
	require.NoError(t, err)
	require.True(t, res.OK, "the call ran again after the restart: %+v\nlog:\n%s", res, p.logs.String())
	require.Contains(t, res.Value, "Long running operation completed")
	require.Equal(t, 2, res.Deliveries, "handed back once, run again once")
	after := p.status("everything")
	require.Equal(t, mcphost.StateUp, after.State)
	require.NotEqual(t, before.PID, after.PID)
	require.Equal(t, 1, after.Restarts)
	require.Contains(t, p.logs.String(), "exited with status 137")

	require.Equal(t, "ready", p.w.Readiness(ctxT(t)).Status)
	other := p.run(client.Call{Tool: "mcp__fs__read_text_file", PersonalityID: "tester", Args: args(map[string]any{"path": filepath.Join(p.granted, "still.txt")})})
	require.True(t, other.OK, "%+v", other)
	require.Contains(t, other.Value, "still here")
	require.Equal(t, 1, p.resultsOf(call.CallID), "exactly one result")
}

// A server that is down leaves the worker ready: /readyz details name it
// with the reason, calls for its tools answer not_available saying why, the
// worker's other tools run, and the server is hosted again once it starts.
func TestServerDownLeavesTheWorkerReady(t *testing.T) {
	t.Parallel()
	var env sync.Map
	env.Store("CAPSTAN_SECRET_PROVIDERS_X_TOKEN", "token-value-1")
	getenv := func(k string) string { v, _ := env.Load(k); s, _ := v.(string); return s }
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rogue.yaml"), []byte("name: rogue\ncommand: ["+mcphost.Rogue(t)+"]\n"+
		"secret_env: {X_TOKEN: providers/x/token}\ncapabilities: {secrets: [providers/x/token]}\n"), 0o600))
	url := bustest.Server(t)
	conn := bustest.Conn(t, url, "")
	kv, err := conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	_, err = kv.Put(ctxT(t), "default", []byte("id: default\nmcp_servers: [rogue]\n"))
	require.NoError(t, err)
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), MCPServersDir: dir, ShutdownGrace: time.Second,
		Getenv: getenv, SecretCacheTTL: time.Nanosecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, echo.Tool())
	require.NoError(t, err)
	workertest.Run(t, w, nil)
	c, err := client.New(ctxT(t), client.Config{NATSURL: url, NATSCreds: bustest.Creds(url)})
	require.NoError(t, err)
	defer c.Close()
	call := func(tool string, a map[string]any) client.Result {
		return c.ExecuteParallel(ctxT(t), client.Turn{}, []client.Call{{Tool: tool, SessionID: "s", Args: args(a)}})[0]
	}
	servers := func() map[string]mcphost.Status {
		return w.Readiness(ctxT(t)).Details["mcp_servers"].(map[string]mcphost.Status)
	}
	res := call("mcp__rogue__env", map[string]any{"name": "X_TOKEN"})
	require.Equal(t, "<untrusted source=\"unknown\" tool=\"mcp__rogue__env\">\nX_TOKEN=[REDACTED]\n</untrusted>", res.Value)

	// The secret goes away and the server dies: it cannot start again.
	env.Delete("CAPSTAN_SECRET_PROVIDERS_X_TOKEN")
	st := servers()["rogue"]
	require.Equal(t, mcphost.StateUp, st.State)
	require.NotZero(t, st.PID, "never signal pid 0: that is our own process group")
	require.NoError(t, syscall.Kill(st.PID, syscall.SIGKILL))
	require.Eventually(t, func() bool { return servers()["rogue"].State == mcphost.StateDown }, 30*time.Second, 10*time.Millisecond)
	rd := w.Readiness(ctxT(t))
	require.Equal(t, "ready", rd.Status)
	require.Equal(t, "secret_env.X_TOKEN: secret not found", servers()["rogue"].Reason)
	// The /readyz body names the server that is down, and why.
	rr := httptest.NewRecorder()
	w.Handler().ServeHTTP(rr, httptest.NewRequestWithContext(ctxT(t), http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusOK, rr.Code, "a down server never makes the worker unready: %s", rr.Body)
	var body struct {
		Details struct {
			MCPServers map[string]map[string]any `json:"mcp_servers"`
		} `json:"details"`
	}
	require.NoError(t, json.Unmarshal(rr.Body.Bytes(), &body))
	require.Equal(t, "down", body.Details.MCPServers["rogue"]["state"], "%s", rr.Body)
	require.Equal(t, "secret_env.X_TOKEN: secret not found", body.Details.MCPServers["rogue"]["reason"])
	require.NotEmpty(t, body.Details.MCPServers["rogue"]["next_start"])
	require.NotContains(t, rr.Body.String(), "token-value-1")
	res = call("mcp__rogue__env", map[string]any{"name": "X_TOKEN"})
	require.Equal(t, protocol.CodeNotAvailable, res.Code)
	require.Equal(t, "MCP server rogue is not available: secret_env.X_TOKEN: secret not found", res.Error)
	res = call("echo", map[string]any{"text": "hi"})
	require.True(t, res.OK, "the worker's other tools still run: %+v", res)

	env.Store("CAPSTAN_SECRET_PROVIDERS_X_TOKEN", "token-value-2")
	require.Eventually(t, func() bool { return servers()["rogue"].State == mcphost.StateUp }, 30*time.Second, 10*time.Millisecond)
	res = call("mcp__rogue__env", map[string]any{"name": "X_TOKEN"})
	require.True(t, res.OK, "%+v", res)
	require.Contains(t, res.Value, "X_TOKEN=[REDACTED]")
}

// A server whose tool list changes (notifications/tools/list_changed) has
// its new tools hosted and in the catalog, and its removed tools withdrawn.
func TestToolListChanges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rogue.yaml"), []byte("name: rogue\ncommand: ["+mcphost.Rogue(t)+"]\n"), 0o600))
	url := bustest.Server(t)
	conn := bustest.Conn(t, url, "")
	kv, err := conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	_, err = kv.Put(ctxT(t), "default", []byte("id: default\nmcp_servers: [rogue]\n"))
	require.NoError(t, err)
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), WorkerID: "lister", MCPServersDir: dir, ShutdownGrace: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, echo.Tool())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	<-w.Ready()
	c, err := client.New(ctxT(t), client.Config{NATSURL: url, NATSCreds: bustest.Creds(url)})
	require.NoError(t, err)
	defer c.Close()
	call := func(tool string, a map[string]any) client.Result {
		return c.ExecuteParallel(ctxT(t), client.Turn{}, []client.Call{{Tool: tool, SessionID: "s", Args: args(a)}})[0]
	}
	hostedBy := func(name string) []string {
		tools, err := c.Tools(ctxT(t))
		require.NoError(t, err)
		for _, e := range tools {
			if e.Name == name {
				return e.Workers
			}
		}
		return nil
	}

	res := call("mcp__rogue__add_tool", map[string]any{"name": "one"})
	require.True(t, res.OK, "%+v", res)
	require.Eventually(t, func() bool { return slices.Contains(hostedBy("mcp__rogue__extra_one"), "lister") }, 10*time.Second, 20*time.Millisecond)
	res = call("mcp__rogue__extra_one", map[string]any{})
	require.True(t, res.OK, "%+v", res)
	require.Contains(t, res.Value, "extra one")

	res = call("mcp__rogue__remove_tool", map[string]any{"name": "extra_one"})
	require.True(t, res.OK, "%+v", res)
	require.Eventually(t, func() bool { return !slices.Contains(hostedBy("mcp__rogue__extra_one"), "lister") }, 10*time.Second, 20*time.Millisecond)
	res = call("mcp__rogue__extra_one", map[string]any{})
	require.Equal(t, "Unknown tool: mcp__rogue__extra_one", res.Error)
	require.Contains(t, hostedBy("mcp__rogue__env"), "lister", "the other tools stay")
}
