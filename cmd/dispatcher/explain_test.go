package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/explain"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
)

// explainCatalog is the catalog of TestExplainCommand, as workers would
// register it.
var explainCatalog = []protocol.CatalogEntry{
	{Name: "echo", Pool: "default", Toolset: "debug", Capabilities: json.RawMessage(`{}`)},
	{Name: "gh", Pool: "default", Toolset: "web", MaxResultChars: 20000,
		Capabilities: json.RawMessage(`{"network":{"allowed_hosts":["*"]},"secrets":["providers/*","http/openai"],"secrets_raw":["providers/github/app/key"]}`)},
	{Name: "memo", Pool: "default", Toolset: "memory", Capabilities: json.RawMessage(`{"storage":{"scope":"session","kind":"kv"}}`)},
	{Name: "runner", Pool: "default", Toolset: "shell",
		Capabilities: json.RawMessage(`{"fs_reach":{"read":"from-personality","write":"from-personality"},"process":{"allowed_binaries":["*"]}}`)},
	{Name: "terminal", Pool: "default", Toolset: "shell", Capabilities: json.RawMessage(`{"process":{"allowed_binaries":["bash"]}}`)},
	{Name: "weather", Pool: "default", Toolset: "web", Capabilities: json.RawMessage(`{}`), Permissions: []string{"weather:write"}},
}

const explainDoc = `id: researcher
toolset: [echo, gh, memo, runner, weather]
permissions: ["weather:read"]
fs_reach:
  workdir: /srv/agents/researcher
  read: ["${WORKDIR}", /srv/shared]
  write: ["${WORKDIR}/out"]
safety:
  network:
    allow: ["*.github.com", "api.openai.com"]
    deny: [gist.github.com]
secrets:
  allow: ["providers/github/*", "http/*"]
  send_to:
    "providers/github/*": [api.github.com]
    "http/openai": [api.openai.com]
process:
  allow: [git, ls]
  limits: {memory: 512MiB, pids: 64, cpu: 1.5}
scheduling: {priority: 1, weight: 10, max_concurrency: 4}
approval:
  require: [{tool: gh, when: {method: [POST, DELETE]}}, {tool: runner}]
  approvers: [oncall]
rate_limits:
  gh: {requests: 100, window: 1h}
budget: {result_chars: 50000, blobs: false}
`

// explainWant is the human output of explain for researcher.
const explainWant = `personality researcher may call 4 of 6 tools

echo: allowed
  reach          nothing external (no capabilities declared)
  scheduling     priority 1, weight 10, max_concurrency 4
  result budget  50000 chars (personality 50000)
  blobs          forbidden by the personality (budget.blobs: false)

gh: allowed
  network        *.github.com, api.openai.com
  network deny   gist.github.com
  secrets        providers/github/*, http/openai
  raw secrets    providers/github/app/key
  send_to        http/openai -> api.openai.com
                 providers/github/* -> api.github.com
  rate limit     100 calls per 1h (fleet-wide)
  approval       required when method is POST or DELETE (timeout 1h, approvers oncall)
  scheduling     priority 1, weight 10, max_concurrency 4
  result budget  20000 chars (personality 50000, tool at most 20000)
  blobs          forbidden by the personality (budget.blobs: false)

memo: allowed
  storage        kv scope session (session:<session_id>)
  scheduling     priority 1, weight 10, max_concurrency 4
  result budget  50000 chars (personality 50000)
  blobs          forbidden by the personality (budget.blobs: false)

runner: allowed
  files read      /srv/agents/researcher, /srv/shared
  files write     /srv/agents/researcher/out
  working dir     /srv/agents/researcher
  binaries        git, ls
  process limits  memory 512MiB, pids 64, cpu 1.5, tmp 256MiB
  approval        required (timeout 1h, approvers oncall)
  scheduling      priority 1, weight 10, max_concurrency 4
  result budget   50000 chars (personality 50000)
  blobs           forbidden by the personality (budget.blobs: false)

terminal: refused by gate toolset
  Tool terminal is not permitted for this personality

weather: refused by gate permission
  Tool weather requires permission weather:write
`

// TestExplainCommand runs explain against a NATS server holding a catalog
// and a stored personality: the human form, --json, one tool, and the
// exit codes.
func TestExplainCommand(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}
	putCatalog(t, url, explainCatalog...)
	doc := filepath.Join(t.TempDir(), "researcher.yaml")
	require.NoError(t, os.WriteFile(doc, []byte(explainDoc), 0o600))
	code, _, stderr := runT(t, env, "", "personality", "put", doc)
	require.Equal(t, exitOK, code, stderr)

	t.Run("human", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runT(t, env, "", "explain", "--personality", "researcher")
		require.Equal(t, exitOK, code, stderr)
		require.Empty(t, stderr)
		require.Equal(t, explainWant, stdout)
	})
	t.Run("one tool", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runT(t, env, "", "explain", "terminal", "--personality", "researcher")
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, "terminal: refused by gate toolset\n  Tool terminal is not permitted for this personality\n", stdout)
	})
	t.Run("json", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runT(t, env, "", "explain", "--json", "--personality", "researcher")
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, `"session:<session_id>"`, "< and > as they are")
		var got []explain.Explanation
		require.NoError(t, json.Unmarshal([]byte(stdout), &got))
		require.Len(t, got, len(explainCatalog))
		p := parsePersonality(t, explainDoc)
		for i, e := range explainCatalog {
			require.Equal(t, e.Name, got[i].Tool)
			tl, err := client.CatalogTool(e)
			require.NoError(t, err)
			// explain.Tool's own tests check its grants against the worker's resolution.
			require.Equal(t, explain.Tool(tl, e.Name, p), got[i], "tool %s", e.Name)
		}
		require.Equal(t, "permission", got[5].Gate)
		require.Equal(t, "Tool weather requires permission weather:write", got[5].Message)
		require.Nil(t, got[5].Grant)
	})
	t.Run("json shape", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runT(t, env, "", "explain", "memo", "--json", "--personality", "researcher")
		require.Equal(t, exitOK, code, stderr)
		require.JSONEq(t, `[{"tool": "memo", "allowed": true, "gate": "", "grant": {
			"network": null, "fs_reach": null, "secrets": null, "process": null,
			"storage": {"kind": "kv", "scope": "session", "scope_id": "session:<session_id>", "ttl_seconds_default": 0},
			"rate_limit": null,
			"approval": null,
			"scheduling": {"priority": 1, "weight": 10, "max_concurrency": 4},
			"budget": {"result_chars": 50000, "personality_result_chars": 50000, "tool_max_result_chars": 0, "blobs_allowed": false}}}]`, stdout)
		code, stdout, stderr = runT(t, env, "", "explain", "gh", "--json", "--personality", "researcher")
		require.Equal(t, exitOK, code, stderr)
		var gh []struct {
			Grant struct {
				Approval json.RawMessage `json:"approval"`
			} `json:"grant"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &gh))
		require.Len(t, gh, 1)
		require.JSONEq(t, `{"required": "when", "when": [{"method": ["POST", "DELETE"]}], "timeout": "1h", "approvers": ["oncall"], "self": false}`,
			string(gh[0].Grant.Approval))
		code, stdout, _ = runT(t, env, "", "explain", "weather", "--json", "--personality", "researcher")
		require.Equal(t, exitOK, code)
		require.JSONEq(t, `[{"tool": "weather", "allowed": false, "gate": "permission",
			"message": "Tool weather requires permission weather:write", "grant": null}]`, stdout)
	})
	t.Run("unknown personality exits 1", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runT(t, env, "", "explain", "--personality", "nobody")
		require.Equal(t, exitFailed, code)
		require.Empty(t, stdout)
		require.Equal(t, "capstan: explain: Unknown personality: nobody\n", stderr)
		// Without --personality: CAPSTAN_DEFAULT_PERSONALITY, here none stored.
		code, _, stderr = runT(t, env, "", "explain")
		require.Equal(t, exitFailed, code)
		require.Equal(t, "capstan: explain: Unknown personality: default\n", stderr)
	})
	t.Run("unknown tool exits 1", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runT(t, env, "", "explain", "mystery", "--personality", "researcher")
		require.Equal(t, exitFailed, code)
		require.Empty(t, stdout)
		require.Equal(t, "capstan: explain: Unknown tool: mystery (no worker has registered it in the catalog)\n", stderr)
	})
	t.Run("invalid stored personality exits 1", func(t *testing.T) {
		t.Parallel()
		kv, err := bustest.Conn(t, url, "").KV(ctxT(t), bus.Personalities)
		require.NoError(t, err)
		_, err = kv.Put(ctxT(t), "broken", []byte("id: other\n"))
		require.NoError(t, err)
		code, stdout, stderr := runT(t, env, "", "explain", "--personality", "broken")
		require.Equal(t, exitFailed, code)
		require.Empty(t, stdout)
		require.Equal(t, `capstan: explain: Personality broken is invalid: document id "other" does not match its key "broken"`+"\n", stderr)
	})
}

// TestExplainLocalMode explains the built-in tools of a real in-process
// pool (local mode) and checks the answer against the pool itself: the
// grant of every allowed tool is what capability.Resolve gives for the
// tool's own declaration, and a call of a refused tool is refused by the
// worker with explain's message.
func TestExplainLocalMode(t *testing.T) {
	t.Parallel()
	dataDir, personalities, work := t.TempDir(), t.TempDir(), t.TempDir()
	doc := fmt.Sprintf(`id: default
toolset: [echo, read_file, fetch_url, http_request, run_process, kv_get]
fs_reach:
  workdir: %q
  read: ["${WORKDIR}"]
  write: ["${WORKDIR}/out"]
safety:
  network:
    allow: ["*.github.com"]
secrets:
  allow: ["http/github/*"]
  send_to: {"http/github/*": [api.github.com]}
process:
  allow: [git]
  limits: {memory: 256MiB, pids: 32}
rate_limits:
  fetch_url: {requests: 10, window: 1m}
`, work)
	require.NoError(t, os.WriteFile(filepath.Join(personalities, "default.yaml"), []byte(doc), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(work, "notes.txt"), []byte("hello\n"), 0o600))
	env := map[string]string{"CAPSTAN_DATA_DIR": dataDir, "CAPSTAN_CONCURRENCY": "2", "CAPSTAN_PERSONALITIES_DIR": personalities}
	noServer := func(a *app) { a.probeURL = "nats://127.0.0.1:1" } // keep the test off a real local server

	code, stdout, stderr := runApp(t, ctxT(t), noServer, env, "", "explain", "--json")
	require.Equal(t, exitOK, code, stderr)
	var got []explain.Explanation
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	p := parsePersonality(t, doc)
	byName := map[string]explain.Explanation{}
	for _, e := range got {
		byName[e.Tool] = e
	}
	for _, bt := range builtin.All() {
		e, ok := byName[bt.Name]
		require.True(t, ok, "built-in tool %s explained", bt.Name)
		// The worker's own declaration, not the catalog's copy of it.
		// (explain's TestBuiltinGrants checks these grants against the worker's resolution.)
		require.Equal(t, explain.Tool(&bt, bt.Name, p), e, "tool %s", bt.Name)
	}
	require.Len(t, got, len(builtin.All()))
	allowed := []string{}
	for _, e := range got {
		if e.Allowed {
			allowed = append(allowed, e.Tool)
		}
	}
	require.Equal(t, []string{"echo", "fetch_url", "http_request", "kv_get", "read_file", "run_process"}, allowed)
	require.Equal(t, []string{"http/github/*"}, byName["http_request"].Grant.Secrets.Refs)
	require.Equal(t, map[string][]string{"http/github/*": {"api.github.com"}}, byName["http_request"].Grant.Secrets.SendTo)
	require.Equal(t, []string{"git"}, byName["run_process"].Grant.Process.Binaries)
	require.Equal(t, explain.ProcessLimitsView{Memory: "256MiB", MemoryBytes: 256 << 20, Pids: 32, Tmp: "256MiB", TmpBytes: 256 << 20}, byName["run_process"].Grant.Process.Limits)
	require.Equal(t, &explain.RateLimitView{Requests: 10, Window: "1m", WindowSeconds: 60}, byName["fetch_url"].Grant.RateLimit)
	require.Equal(t, "session:<session_id>", byName["kv_get"].Grant.Storage.ScopeID)

	// The pool agrees: a refused tool is refused with explain's message, an
	// allowed one runs inside the roots explain shows.
	terminal := byName["terminal"]
	require.Equal(t, protocol.DecisionToolset, terminal.Gate)
	code, stdout, stderr = runApp(t, ctxT(t), noServer, env, "", "call", "terminal", "--args", `{"command":"true"}`)
	require.Equal(t, exitFailed, code, stdout)
	require.Contains(t, stderr, "not_available: "+terminal.Message+"\n")
	code, stdout, stderr = runApp(t, ctxT(t), noServer, env, "", "call", "read_file", "--args", `{"path":"notes.txt"}`)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, filepath.Join(byName["read_file"].Grant.FSReach.WorkingDir, "notes.txt"))
}

// TestExplainAsATenant runs explain as a tenant's least-privilege NATS user
// of deploy/nats, against a real worker: the tenant explains its own
// personality (a direct get of its own document and the catalog are all it
// reads), and gets no other tenant's. Not parallel: the deployment
// configuration takes its users' passwords from the environment.
func TestExplainAsATenant(t *testing.T) {
	users := []string{"worker", "operator", "backend", "approver", "tenant-researcher", "tenant-support"}
	for _, u := range users {
		t.Setenv("CAPSTAN_NATS_"+strings.ToUpper(strings.ReplaceAll(u, "-", "_"))+"_PASSWORD", u+"-test-password")
	}
	url := bustest.ConfigServer(t, filepath.Join("..", "..", "deploy", "nats", "nats-1.conf"))
	as := func(user string) map[string]string {
		env := map[string]string{"CAPSTAN_NATS_URL": bustest.UserURL(url, user, user+"-test-password")}
		if name, ok := strings.CutPrefix(user, "tenant-"); ok {
			env["CAPSTAN_DEFAULT_PERSONALITY"] = name
			env["CAPSTAN_NATS_INBOX_PREFIX"] = "_INBOX_" + name
		}
		return env
	}
	dir := t.TempDir()
	for id, doc := range map[string]string{
		"researcher": "id: researcher\ntoolset: [echo, fetch_url]\nsafety: {network: {allow: [\"*.github.com\"]}}\n",
		"support":    "id: support\ntoolset: [echo]\n",
	} {
		file := filepath.Join(dir, id+".yaml")
		require.NoError(t, os.WriteFile(file, []byte(doc), 0o600))
		code, _, stderr := runT(t, as("operator"), "", "personality", "put", file)
		require.Equal(t, exitOK, code, stderr)
	}
	w, err := worker.New(worker.Config{NATSURL: bustest.UserURL(url, "worker", "worker-test-password"), WorkerID: "explain-tenant",
		Concurrency: 2, ShutdownGrace: time.Millisecond, SecretsBackend: worker.SecretsNone,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, builtin.All()...)
	require.NoError(t, err)
	workertest.Run(t, w, nil)

	code, stdout, stderr := runT(t, as("tenant-researcher"), "", "explain", "fetch_url")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, `fetch_url: allowed
  network        *.github.com
  scheduling     priority 3, weight 1, no concurrency cap
  result budget  80000 chars (personality 80000, tool at most 100000)
  blobs          allowed
`, stdout)
	code, stdout, stderr = runT(t, as("tenant-researcher"), "", "explain", "--json")
	require.Equal(t, exitOK, code, stderr)
	var got []explain.Explanation
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Len(t, got, len(builtin.All()))

	code, stdout, stderr = runT(t, as("tenant-researcher"), "", "explain", "--personality", "support")
	require.Equal(t, exitUsage, code, "the server's refusal, not an answer")
	require.Empty(t, stdout)
	require.True(t, strings.HasPrefix(stderr, "capstan: explain: bus: get capstan_personalities/support: "), stderr)
	require.Contains(t, stderr, "Permissions Violation")
	require.True(t, strings.HasSuffix(stderr, `(this NATS user may not read personality support; a tenant's user reads only its own: docs/operations.md, "NATS users")`+"\n"), stderr)
}

func parsePersonality(t *testing.T, doc string) *capability.Personality {
	t.Helper()
	p, err := capability.Parse([]byte(doc), capability.Env{Home: "/home/agent"})
	require.NoError(t, err)
	return p
}
