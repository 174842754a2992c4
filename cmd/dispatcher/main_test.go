package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

func TestHelpListsEveryCommandAndVariable(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"help", "-h", "--help"} {
		code, stdout, stderr := runT(t, nil, "", arg)
		require.Equal(t, exitOK, code)
		require.Empty(t, stderr)
		for _, c := range []string{"call", "batch", "tools", "queue", "explain", "mcp", "result", "cancel", "progress", "dlq", "console", "help"} {
			require.Regexp(t, `\n  `+c+`( |\n)`, stdout, "command %s", c)
		}
		for _, v := range configVars() {
			require.Contains(t, stdout, v.name)
		}
		for _, v := range consoleVars {
			require.Contains(t, stdout, v[0])
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "Usage: dispatcher <command>"},
		{"unknown command", []string{"frobnicate"}, `capstan: unknown command "frobnicate"`},
		{"call without tool", []string{"call"}, "capstan: call: expected one tool name, got 0 arguments"},
		{"call with two tools", []string{"call", "a", "b"}, "expected one tool name, got 2 arguments"},
		{"call args not JSON", []string{"call", "echo", "--args", "{"}, "capstan: call: --args must be a JSON object, got invalid JSON"},
		{"call args an array", []string{"call", "echo", "--args", "[1]"}, "capstan: call: --args must be a JSON object, got an array"},
		{"call bad timeout", []string{"call", "echo", "--timeout", "5"}, `invalid value "5" for flag -timeout`},
		{"call zero timeout", []string{"call", "echo", "--timeout", "0s"}, "--timeout must be at least 1ms"},
		{"call unknown flag", []string{"call", "echo", "--nope"}, "flag provided but not defined: -nope"},
		{"batch without file", []string{"batch"}, "capstan: batch: expected one calls file (- for stdin), got 0 arguments"},
		{"batch missing file", []string{"batch", "/nonexistent/calls.jsonl"}, "capstan: batch: open /nonexistent/calls.jsonl: no such file or directory"},
		{"tools extra argument", []string{"tools", "x"}, `capstan: tools: unexpected argument "x"`},
		{"explain two tools", []string{"explain", "a", "b"}, "capstan: explain: expected at most one tool name, got 2 arguments"},
		{"explain unknown flag", []string{"explain", "--tool", "a"}, "flag provided but not defined: -tool"},
		{"result without id", []string{"result"}, "capstan: result: expected one call_id"},
		{"cancel bad id", []string{"cancel", "a.b"}, `capstan: cancel: call_id "a.b" must match`},
		{"progress bad audience", []string{"progress", "--audience", "everyone"}, "--audience must be internal, user or dashboard"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runT(t, nil, "", tc.args...)
			require.Equal(t, exitUsage, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
		})
	}
}

func TestCommandHelpExits0(t *testing.T) {
	t.Parallel()
	code, _, stderr := runT(t, nil, "", "call", "-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, stderr, "Usage: dispatcher call <tool>")
	require.Contains(t, stderr, "-follow")
}

func TestUnreachableServerExits2(t *testing.T) {
	t.Parallel()
	code, _, stderr := runT(t, map[string]string{"CAPSTAN_NATS_URL": "nats://127.0.0.1:1"}, "", "call", "echo")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "capstan: client: bus: connect to nats://127.0.0.1:1")
	require.Equal(t, 1, strings.Count(stderr, "\n"), "one message")
}

func TestCallEndToEnd(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	putCatalog(t, url, protocol.CatalogEntry{Name: "echo", Pool: "default", Toolset: "debug", Description: "Returns text.\nMore."})
	resp := startResponder(t, url)
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}

	t.Run("ok value on stdout", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runT(t, env, "", "call", "echo", "--args", `{"text":"hello"}`)
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, "hello\n", stdout)
		require.Empty(t, stderr)
	})
	t.Run("flags before the tool and call fields", func(t *testing.T) {
		t.Parallel()
		code, stdout, _ := runT(t, env, "", "call", "--session", "s9", "--personality", "coder", "--timeout", "2s",
			"--batch", "b9", "--json", "echo", "--args", `{"text":"x"}`)
		require.Equal(t, exitOK, code)
		var r client.Result
		require.NoError(t, json.Unmarshal([]byte(stdout), &r))
		require.True(t, r.OK)
		require.Equal(t, "b9", r.BatchID)
		call := resp.all()[r.CallID]
		require.Equal(t, "s9", call.SessionID)
		require.Equal(t, "coder", call.PersonalityID)
		require.Equal(t, int64(2000), call.TimeoutMS)
		require.Equal(t, "cli", call.Platform)
	})
	t.Run("dry run and default timeout", func(t *testing.T) {
		t.Parallel()
		code, stdout, _ := runT(t, env, "", "call", "echo", "--dry-run", "--json")
		require.Equal(t, exitOK, code)
		var r client.Result
		require.NoError(t, json.Unmarshal([]byte(stdout), &r))
		require.Equal(t, "[dry-run] echo", r.Value)
		call := resp.all()[r.CallID]
		require.True(t, call.DryRun)
		require.Equal(t, int64(30000), call.TimeoutMS)
		require.Equal(t, "cli", call.SessionID)
	})
	t.Run("tool failure exits 1", func(t *testing.T) {
		t.Parallel()
		putCatalog(t, url, protocol.CatalogEntry{Name: "fail", Pool: "default"})
		code, stdout, stderr := runT(t, env, "", "call", "fail")
		require.Equal(t, exitFailed, code)
		require.Empty(t, stdout)
		require.Equal(t, "execution_failed: boom\n", stderr)
	})
	t.Run("unknown tool exits 1", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runT(t, env, "", "call", "mystery")
		require.Equal(t, exitFailed, code)
		require.Empty(t, stdout)
		require.Equal(t, "not_available: Unknown tool: mystery\n", stderr)
	})
	t.Run("follow prints progress", func(t *testing.T) {
		t.Parallel()
		putCatalog(t, url, protocol.CatalogEntry{Name: "chatty", Pool: "default"})
		code, stdout, stderr := runT(t, env, "", "call", "chatty", "--follow", "--args", `{"text":"talked"}`)
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, "talked\n", stdout)
		require.Contains(t, stderr, "progress [user]: 50% half\n")
		require.Contains(t, stderr, "progress [internal]: done\n")
	})
}

func TestCallWithoutResultReportsMissing(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	startResponder(t, url)
	start := time.Now()
	code, _, stderr := runT(t, map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}, "", "call", "never", "--timeout", "1ms")
	require.Equal(t, exitFailed, code)
	require.Equal(t, "execution_failed: Tool result missing: no result before deadline\n", stderr)
	require.GreaterOrEqual(t, time.Since(start), callWaitSlack, "waits timeout + 5s")
}

func TestBatchEndToEnd(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	resp := startResponder(t, url)
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}
	dir := t.TempDir()
	in := filepath.Join(dir, "calls.jsonl")
	require.NoError(t, os.WriteFile(in, []byte(strings.Join([]string{
		`{"tool":"echo","args":{"text":"one"}}`,
		``,
		`{"tool":"echo","args":{"text":"two"},"call_id":"fixed","batch_id":"mine","session_id":"s1"}`,
		`not json`,
		`[1,2]`,
		`{"tool":"echo","args":"text"}`,
		`{"tool":"fail"}`,
		`   {"tool":"echo","args":{"text":"last"}}   `,
	}, "\n")), 0o600))
	out := filepath.Join(dir, "results.jsonl")

	code, stdout, stderr := runT(t, env, "", "batch", in, "-o", out)
	require.Equal(t, exitFailed, code, stderr)
	require.Empty(t, stdout)
	require.Empty(t, stderr, "no progress bar when stderr is not a terminal")
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	results := decodeLines(t, string(data))
	require.Len(t, results, 7)

	require.True(t, results[0].OK)
	require.Equal(t, "one", results[0].Value)
	require.Equal(t, client.Result{CallID: "fixed", BatchID: "mine", Tool: "echo", OK: true, Value: "two", WorkerID: "responder"}, results[1])
	require.Equal(t, protocol.CodeInputInvalid, results[2].Code)
	require.True(t, strings.HasPrefix(results[2].Error, "line 4: not a JSON object: "), results[2].Error)
	require.NotEmpty(t, results[2].CallID)
	require.True(t, strings.HasPrefix(results[3].Error, "line 5: not a JSON object: "), results[3].Error)
	require.Equal(t, `line 6: invalid call: field "args" must be a JSON object`, results[4].Error)
	require.Equal(t, "echo", results[4].Tool)
	require.Equal(t, "execution_failed", string(results[5].Code))
	require.Equal(t, "last", results[6].Value)

	calls := resp.all()
	first := calls[results[0].CallID]
	require.Equal(t, "batch", first.SessionID, "lines without session_id get session batch")
	require.Equal(t, first.BatchID, calls[results[6].CallID].BatchID, "lines without batch_id share the run's batch")
	require.NotEqual(t, first.CallID, first.BatchID)
	require.Zero(t, first.ResultBudgetChars, "batch lines are independent calls: no budget split")
	require.Equal(t, "s1", calls["fixed"].SessionID)
}

func TestBatchFromStdinAllOK(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	startResponder(t, url)
	var in strings.Builder
	for i := range 50 {
		in.WriteString(`{"tool":"echo","args":{"text":"n` + string(rune('a'+i%26)) + `"}}` + "\n")
	}
	code, stdout, stderr := runT(t, map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}, in.String(), "batch", "-")
	require.Equal(t, exitOK, code, stderr)
	results := decodeLines(t, stdout)
	require.Len(t, results, 50)
	for i, r := range results {
		require.Equal(t, "n"+string(rune('a'+i%26)), r.Value)
	}
}

func TestToolsCommand(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}
	code, stdout, stderr := runT(t, env, "", "tools")
	require.Equal(t, exitOK, code)
	require.Equal(t, "NAME  POOL  TOOLSET  SIDE EFFECTS  DESCRIPTION\n", stdout)
	require.Contains(t, stderr, "the catalog is empty")

	putCatalog(t, url,
		protocol.CatalogEntry{Name: "zeta", Pool: "gpu", Toolset: "render", Description: "Draws."},
		protocol.CatalogEntry{Name: "echo", Pool: "default", Toolset: "debug", SideEffects: "none", Description: "Returns text.\nMore detail."})
	code, stdout, _ = runT(t, env, "", "tools")
	require.Equal(t, exitOK, code)
	require.Equal(t, "NAME  POOL     TOOLSET  SIDE EFFECTS  DESCRIPTION\n"+
		"echo  default  debug    none          Returns text.\n"+
		"zeta  gpu      render   exclusive     Draws.\n", stdout)

	code, stdout, _ = runT(t, env, "", "tools", "--json")
	require.Equal(t, exitOK, code)
	var entries []client.CatalogEntry
	require.NoError(t, json.Unmarshal([]byte(stdout), &entries))
	require.Len(t, entries, 2)
	require.Equal(t, "echo", entries[0].Name)
}

func TestResultCancelAndProgressCommands(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	startResponder(t, url)
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}

	code, stdout, _ := runT(t, env, "", "call", "chatty", "--json", "--batch", "pb", "--args", `{"text":"done"}`)
	require.Equal(t, exitOK, code)
	var r client.Result
	require.NoError(t, json.Unmarshal([]byte(stdout), &r))

	code, stdout, _ = runT(t, env, "", "result", r.CallID)
	require.Equal(t, exitOK, code)
	require.Equal(t, "done\n", stdout)
	code, _, stderr := runT(t, env, "", "result", "unknown-call")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "capstan: result: no result for call unknown-call")
	// The result is under personality "default": another personality's
	// subjects do not hold it, and a bad token is a usage error.
	code, _, stderr = runT(t, env, "", "result", r.CallID, "--personality", "researcher")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "capstan: result: no result for call "+r.CallID)
	code, _, stderr = runT(t, env, "", "result", r.CallID, "--personality", "a.b")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `capstan: result: --personality: client: personality "a.b" must match ^[A-Za-z0-9_-]{1,128}$`)

	admin := bustest.Conn(t, url, "")
	var mu sync.Mutex
	var cancels []string
	sub, err := admin.Subscribe("capstan.cancel.>", "", func(subject string, _ bus.Header, data []byte) {
		mu.Lock()
		cancels = append(cancels, subject+" "+string(data))
		mu.Unlock()
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Stop() })
	require.NoError(t, admin.Flush(ctxT(t)))
	code, _, stderr = runT(t, env, "", "cancel", "c42", "--reason", "too slow")
	require.Equal(t, exitOK, code, stderr)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(cancels) == 1 && cancels[0] == `capstan.cancel.default.c42 {"reason":"too slow"}`
	}, 10*time.Second, 10*time.Millisecond)
	code, _, stderr = runT(t, env, "", "cancel", "c43", "--personality", "researcher")
	require.Equal(t, exitOK, code, stderr)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(cancels) == 2 && cancels[1] == `capstan.cancel.researcher.c43 `
	}, 10*time.Second, 10*time.Millisecond)

	// progress tails until its context ends.
	ctx, cancel := context.WithCancel(ctxT(t))
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		a := newApp(getenvFrom(env), strings.NewReader(""), &out, &errOut)
		done <- a.main(ctx, []string{"progress", "--from-start", "--audience", "user", "--batch", "pb"})
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), `"message":"half"`) }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.Equal(t, exitOK, <-done)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 1, "only the user event of the batch")
	var p client.Progress
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &p))
	require.Equal(t, protocol.AudienceUser, p.Audience)
	require.Equal(t, r.CallID, p.CallID)
}

// TestLocalModeBatch runs examples/calls.jsonl with no NATS URL: an embedded
// server and the real in-process worker pool.
func TestLocalModeBatch(t *testing.T) {
	t.Parallel()
	dataDir, personalities := t.TempDir(), t.TempDir()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	doc := fmt.Sprintf("id: default\ntoolset: [echo, read_file, search_files]\nfs_reach:\n  workdir: %q\n  read: [\"${WORKDIR}\"]\n", repo)
	require.NoError(t, os.WriteFile(filepath.Join(personalities, "default.yaml"), []byte(doc), 0o600))
	env := map[string]string{"CAPSTAN_DATA_DIR": dataDir, "CAPSTAN_CONCURRENCY": "8", "CAPSTAN_PERSONALITIES_DIR": personalities}
	noServer := func(a *app) { a.probeURL = "nats://127.0.0.1:1" } // keep the test off a real local server
	code, stdout, stderr := runApp(t, ctxT(t), noServer, env, "", "batch", filepath.Join("..", "..", "examples", "calls.jsonl"))
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "capstan: local mode: no NATS server at nats://127.0.0.1:1; started an embedded JetStream server (store: "+
		dataDir+") and an in-process worker pool (8 slots; its logs: "+filepath.Join(dataDir, "local-pool.log")+"; --pool-logs shows them here)\n", stderr)
	results := decodeLines(t, stdout)
	require.Len(t, results, 7)
	require.Equal(t, "hello", results[0].Value)
	require.Contains(t, results[5].Value, "lines 1–3 of", "read_file with a range")
	require.Contains(t, results[6].Value, "func main()", "search_files")
	for _, r := range results {
		require.True(t, r.OK, "%s: %s", r.Code, r.Error)
	}

	code, _, stderr = runApp(t, ctxT(t), noServer, env, "", "call", "no_such_tool")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "not_available: Unknown tool: no_such_tool\n")
}

func decodeLines(t *testing.T, s string) []client.Result {
	t.Helper()
	var out []client.Result
	for line := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		var r client.Result
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		out = append(out, r)
	}
	return out
}

func putCatalog(t *testing.T, url string, entries ...protocol.CatalogEntry) {
	t.Helper()
	kv, err := bustest.Conn(t, url, "").KV(ctxT(t), bus.Tools)
	require.NoError(t, err)
	for _, e := range entries {
		data, err := json.Marshal(e)
		require.NoError(t, err)
		_, err = kv.Put(ctxT(t), e.Name, data)
		require.NoError(t, err)
	}
}

func TestLocalModeStoresADefaultPersonality(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	cwd, err := os.Getwd()
	require.NoError(t, err)
	env := map[string]string{"CAPSTAN_DATA_DIR": dataDir, "CAPSTAN_CONCURRENCY": "4"}
	noServer := func(a *app) { a.probeURL = "nats://127.0.0.1:1" }
	code, stdout, stderr := runApp(t, ctxT(t), noServer, env, "", "call", "echo", "--args", `{"text":"hi"}`)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "hi\n", stdout)
	require.Contains(t, stderr, `capstan: local mode: no personality "default" existed; stored the local default (every built-in tool; no network, secrets or processes; files only under `+cwd+")\n")

	// The second run finds it and says nothing more.
	code, stdout, stderr = runApp(t, ctxT(t), noServer, env, "", "personality", "get", "default")
	require.Equal(t, exitOK, code, stderr)
	require.NotContains(t, stderr, "stored the local default")
	require.Contains(t, stdout, "id: default\n")
	require.Contains(t, stdout, "process: {allow: []}\n")
}

func TestPersonalityCommands(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}
	caps := json.RawMessage(`{"network":{"allowed_hosts":["api.github.com","evil.example"]}}`)
	putCatalog(t, url,
		protocol.CatalogEntry{Name: "echo", Pool: "default", Toolset: "debug", Capabilities: json.RawMessage(`{}`)},
		protocol.CatalogEntry{Name: "gh", Pool: "default", Toolset: "web", Capabilities: caps},
		protocol.CatalogEntry{Name: "weather", Pool: "default", Toolset: "web", Capabilities: json.RawMessage(`{}`), Permissions: []string{"weather:read"}})
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(doc), 0o600))
		return p
	}
	bad := write("bad.yaml", "id: researcher\nsafety:\n  network:\n    allow: [\"*.github.com\"]\n")
	code, _, stderr := runT(t, env, "", "personality", "validate", bad)
	require.Equal(t, exitFailed, code)
	require.Equal(t, bad+`: tool gh, network: host "evil.example" is not in personality network allow list`+"\n", stderr)

	code, _, stderr = runT(t, env, "", "personality", "put", bad)
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, `host "evil.example" is not in personality network allow list`)
	require.Contains(t, stderr, "capstan: personality put: "+bad+" not stored\n")

	unknownKey := write("typo.yaml", "id: x\ntoolsett: [echo]\nbudget: {result_chars: 0}\n")
	code, _, stderr = runT(t, env, "", "personality", "validate", unknownKey)
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "toolsett")
	require.Contains(t, stderr, "result_chars")
	require.Equal(t, 2, strings.Count(stderr, unknownKey+": "), "every problem is printed: %s", stderr)

	good := write("good.yaml", "id: researcher\ntoolset: [echo, gh]\nsafety:\n  network:\n    allow: [\"*.github.com\", evil.example]\n")
	code, stdout, stderr := runT(t, env, "", "personality", "validate", good)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "personality researcher is valid\n", stdout)
	code, stdout, _ = runT(t, env, "", "personality", "put", good)
	require.Equal(t, exitOK, code)
	require.Equal(t, "stored personality researcher\n", stdout)
	code, stdout, _ = runT(t, env, "", "personality", "list")
	require.Equal(t, exitOK, code)
	require.Equal(t, "researcher\n", stdout)
	code, stdout, _ = runT(t, env, "", "personality", "get", "researcher")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "toolset: [echo, gh]")

	// tools --personality: exactly the tools that personality's LLM may call.
	code, stdout, _ = runT(t, env, "", "tools", "--personality", "researcher")
	require.Equal(t, exitOK, code)
	require.Equal(t, "NAME  POOL     TOOLSET  SIDE EFFECTS  DESCRIPTION\necho  default  debug    exclusive     \ngh    default  web      exclusive     \n", stdout)
	code, _, stderr = runT(t, env, "", "tools", "--personality", "nobody")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "Unknown personality: nobody")

	code, stdout, _ = runT(t, env, "", "personality", "delete", "researcher")
	require.Equal(t, exitOK, code)
	require.Equal(t, "deleted personality researcher\n", stdout)
	code, _, stderr = runT(t, env, "", "personality", "get", "researcher")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "Unknown personality: researcher")

	code, _, _ = runT(t, env, "", "personality", "frobnicate")
	require.Equal(t, exitUsage, code)
	code, _, _ = runT(t, env, "", "personality", "put")
	require.Equal(t, exitUsage, code)
}

func TestPersonalityPutSeveralFilesAndDirectories(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}
	putCatalog(t, url, protocol.CatalogEntry{Name: "gh", Pool: "default", Toolset: "web",
		Capabilities: json.RawMessage(`{"network":{"allowed_hosts":["api.github.com"]}}`)})
	dir := t.TempDir()
	write := func(name, doc string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte(doc), 0o600))
		return p
	}
	// A directory: its .yaml, .yml and .json files, in name order, as the
	// worker reads CAPSTAN_PERSONALITIES_DIR; other files and directories
	// are skipped.
	ok := filepath.Join(dir, "ok")
	write("ok/b.yml", "id: b\ntoolset: [echo]\n")
	write("ok/a.YAML", "id: a\ntoolset: [echo]\n")
	write("ok/c.json", `{"id":"c","toolset":["echo"]}`)
	write("ok/notes.txt", "not a personality")
	write("ok/sub/d.yaml", "id: d\n")
	code, stdout, stderr := runT(t, env, "", "personality", "put", ok)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "stored personality a\nstored personality b\nstored personality c\n", stdout)

	// Several arguments: all are stored, or none when one has a problem.
	good := write("good.yaml", "id: good\ntoolset: [echo]\n")
	bad := write("bad.yaml", "id: bad\ntoolset: [gh]\n")
	code, stdout, stderr = runT(t, env, "", "personality", "put", good, bad)
	require.Equal(t, exitFailed, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, bad+`: tool gh, network: host "api.github.com" is not in personality network allow list`)
	require.Contains(t, stderr, "capstan: personality put: nothing stored: "+bad+" not valid\n")
	dup := write("dup.yaml", "id: a\ntoolset: [echo]\n")
	code, _, stderr = runT(t, env, "", "personality", "put", ok, dup)
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, dup+`: id "a" is also defined in `+filepath.Join(ok, "a.YAML"))
	code, stdout, _ = runT(t, env, "", "personality", "list")
	require.Equal(t, exitOK, code)
	require.Equal(t, "a\nb\nc\n", stdout, "nothing of the refused puts was stored")

	code, stdout, stderr = runT(t, env, "", "personality", "put", good, filepath.Join(ok, "b.yml"))
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "stored personality good\nstored personality b\n", stdout)

	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o700))
	code, _, stderr = runT(t, env, "", "personality", "put", empty)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "capstan: personality put: "+empty+" holds no .yaml, .yml or .json file\n")
}

func TestOTELConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"call", "echo", "--args", "{}"},
		func(k string) string { return map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}[k] }, strings.NewReader(""), &out, &errb)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errb.String(), `capstan: invalid configuration: telemetry: OTEL_TRACES_EXPORTER "jaeger" must be otlp or none`)
}
