package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// approvalsPool is a server and a worker whose personality "pay" needs
// approval for echo calls.
func approvalsPool(t *testing.T) (env map[string]string) {
	t.Helper()
	url := bustest.Server(t)
	conn := bustest.Conn(t, url, "")
	kv, err := conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	for id, doc := range map[string]string{
		"default": "id: default\n",
		"pay":     "id: pay\napproval:\n  require: [{tool: echo}]\n  timeout: 2h\n",
	} {
		_, err = kv.Put(ctxT(t), id, []byte(doc))
		require.NoError(t, err)
	}
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), WorkerID: "approvals-w",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, echo.Tool())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	<-w.Ready()
	return map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}
}

func TestApprovalsCommands(t *testing.T) {
	t.Parallel()
	env := approvalsPool(t)

	code, stdout, stderr := runT(t, env, "", "approvals", "list")
	require.Equal(t, exitOK, code, stderr)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "capstan: approvals list: no call is held for approval")
	code, stdout, _ = runT(t, env, "", "approvals", "list", "--json")
	require.Equal(t, exitOK, code)
	require.Equal(t, "[]\n", stdout)

	// The held call: `call` says how to approve it, and waits.
	type callOut struct {
		code           int
		stdout, stderr string
	}
	called := make(chan callOut, 1)
	go func() {
		code, stdout, stderr := runT(t, env, "", "call", "echo", "--personality", "pay", "--timeout", "60s", "--args", `{"text":"refund 42"}`)
		called <- callOut{code, stdout, stderr}
	}()
	var holds []map[string]any
	require.Eventually(t, func() bool {
		code, stdout, _ := runT(t, env, "", "approvals", "list", "--json")
		holds = nil
		return code == exitOK && json.Unmarshal([]byte(stdout), &holds) == nil && len(holds) == 1
	}, 30*time.Second, 50*time.Millisecond)
	h := holds[0]
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	require.ElementsMatch(t, []string{"call_id", "batch_id", "personality_id", "tool", "args_sha256", "held_at", "expires_at", "summary"}, keys)
	require.Equal(t, "pay", h["personality_id"])
	require.Equal(t, "echo", h["tool"])
	callID, sum := h["call_id"].(string), h["args_sha256"].(string)
	require.Regexp(t, `^[0-9a-f]{64}$`, sum)
	require.Equal(t, map[string]any{"text": "refund 42"}, h["summary"].(map[string]any)["args"])

	code, stdout, stderr = runT(t, env, "", "approvals", "list", "--personality", "default")
	require.Equal(t, exitOK, code, stderr)
	require.Empty(t, stdout)
	code, stdout, stderr = runT(t, env, "", "approvals", "list")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, callID)
	require.Contains(t, stdout, sum)

	code, _, stderr = runT(t, env, "", "approvals", "approve", callID, "--sha256", strings.Repeat("a", 64))
	require.Equal(t, exitFailed, code)
	require.Equal(t, "capstan: approvals approve: approval does not match the call's arguments\n", stderr)

	env["CAPSTAN_APPROVER_NAME"] = "alice"
	code, stdout, stderr = runT(t, env, "", "approvals", "approve", callID, "--sha256", sum, "--reason", "checked the order")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, regexp.MustCompile(`^approved call `+callID+` by alice at \S+\n$`), stdout)
	out := <-called
	require.Equal(t, exitOK, out.code, out.stderr)
	require.Equal(t, "refund 42\n", out.stdout)
	require.Contains(t, out.stderr, "call "+callID+" is held for approval until ")
	require.Contains(t, out.stderr, "dispatcher approvals approve "+callID+" --sha256 "+sum+"\n")

	code, _, stderr = runT(t, env, "", "approvals", "deny", callID, "--reason", "late")
	require.Equal(t, exitFailed, code)
	require.Equal(t, "capstan: approvals deny: already approved by alice\n", stderr)
	code, _, stderr = runT(t, env, "", "approvals", "approve", "nope", "--sha256", sum)
	require.Equal(t, exitFailed, code)
	require.Equal(t, "capstan: approvals approve: no held call nope\n", stderr)

	// Denied: the call's result says why.
	c, err := client.New(ctxT(t), client.Config{NATSURL: env["CAPSTAN_NATS_URL"], NATSCreds: env["CAPSTAN_NATS_CREDS"], Personality: "pay"})
	require.NoError(t, err)
	defer c.Close()
	call := client.Call{CallID: "deny-me", Tool: "echo", Args: json.RawMessage(`{"text":"x"}`), SessionID: "s"}
	require.NoError(t, c.Submit(ctxT(t), &call))
	require.Eventually(t, func() bool {
		_, found, err := c.FindHold(ctxT(t), "deny-me")
		return err == nil && found
	}, 30*time.Second, 50*time.Millisecond)
	delete(env, "CAPSTAN_APPROVER_NAME")
	code, stdout, stderr = runT(t, env, "", "approvals", "deny", "deny-me", "--reason", "not today")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "denied call deny-me by local at ")
	r, err := c.Await(ctxT(t), "", "deny-me")
	require.NoError(t, err)
	require.Equal(t, "APPROVAL_DENIED: not today", r.Error)
}

func TestApprovalsUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no verb", []string{"approvals"}, "capstan: approvals: expected list, approve <call_id> --sha256 <hash> or deny <call_id> --reason r"},
		{"unknown verb", []string{"approvals", "ok", "c"}, `capstan: approvals: unknown subcommand "ok" (expected list, approve or deny)`},
		{"list with an argument", []string{"approvals", "list", "x"}, "capstan: approvals list: expected no arguments"},
		{"list bad personality", []string{"approvals", "list", "--personality", "a.b"}, `capstan: approvals list: --personality "a.b" must match`},
		{"approve without id", []string{"approvals", "approve", "--sha256", "ab"}, "capstan: approvals approve: expected one call_id"},
		{"approve bad id", []string{"approvals", "approve", "a*b", "--sha256", "ab"}, `capstan: approvals approve: call_id "a*b" must match`},
		{"approve without hash", []string{"approvals", "approve", "c1"}, "capstan: approvals approve: --sha256 <hash> is required (the args_sha256 of approvals list)"},
		{"deny without reason", []string{"approvals", "deny", "c1"}, "capstan: approvals deny: --reason is required"},
		{"deny with hash", []string{"approvals", "deny", "c1", "--reason", "r", "--sha256", "ab"}, "capstan: approvals deny: --sha256 is for approve only"},
		{"reason too long", []string{"approvals", "deny", "c1", "--reason", strings.Repeat("é", 501)}, "capstan: approvals deny: --reason must be at most 500 characters (it has 501)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runT(t, nil, "", tc.args...)
			require.Equal(t, exitUsage, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
		})
	}
}

func TestApproverName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, env, url, want string
	}{
		{"variable first", "carol", "nats://dave:pw@127.0.0.1:4222", "carol"},
		{"then the URL's user", "", "nats://dave:pw@127.0.0.1:4222", "dave"},
		{"else local", "", "nats://127.0.0.1:4222", "local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newApp(getenvFrom(map[string]string{"CAPSTAN_APPROVER_NAME": tc.env}), strings.NewReader(""), io.Discard, io.Discard)
			a.natsURL = tc.url
			require.Equal(t, tc.want, a.approverName())
		})
	}
}

// TestLocalModeStoryTwoTerminals is the README's story in local mode: one
// dispatcher's call is held; a second dispatcher on the same data dir joins
// the first one's server and pool, lists and approves it.
func TestLocalModeStoryTwoTerminals(t *testing.T) {
	t.Parallel()
	dataDir, personalities := t.TempDir(), t.TempDir()
	doc, err := os.ReadFile(filepath.Join("..", "..", "examples", "personalities", "payments.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(personalities, "payments.yaml"), doc, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(personalities, "default.yaml"), []byte("id: default\n"), 0o600))
	env := map[string]string{"CAPSTAN_DATA_DIR": dataDir, "CAPSTAN_CONCURRENCY": "4", "CAPSTAN_PERSONALITIES_DIR": personalities}
	noServer := func(a *app) { a.probeURL = "nats://127.0.0.1:1" }
	type out struct {
		code           int
		stdout, stderr string
	}
	first := make(chan out, 1)
	go func() {
		code, stdout, stderr := runApp(t, ctxT(t), noServer, env, "", "call", "echo", "--personality", "payments", "--timeout", "5m",
			"--args", `{"text":"refund order 1234"}`)
		first <- out{code, stdout, stderr}
	}()
	// The second terminal starts once the first one's local mode runs (a
	// second dispatcher started first would be the one that owns it).
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(dataDir, localURLFile))
		return err == nil
	}, 60*time.Second, 50*time.Millisecond)
	var holds []map[string]any
	var stderr string
	require.Eventually(t, func() bool {
		var code int
		var stdout string
		code, stdout, stderr = runApp(t, ctxT(t), noServer, env, "", "approvals", "list", "--json")
		holds = nil
		return code == exitOK && json.Unmarshal([]byte(stdout), &holds) == nil && len(holds) == 1
	}, 60*time.Second, 100*time.Millisecond)
	require.Contains(t, stderr, "capstan: local mode: joined the embedded server and pool of another dispatcher using "+dataDir)
	code, stdout, stderr := runApp(t, ctxT(t), noServer, env, "", "approvals", "approve", holds[0]["call_id"].(string),
		"--sha256", holds[0]["args_sha256"].(string))
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "approved call ")
	got := <-first
	require.Equal(t, exitOK, got.code, got.stderr)
	require.Equal(t, "refund order 1234\n", got.stdout)
	_, err = os.Stat(filepath.Join(dataDir, localURLFile))
	require.True(t, os.IsNotExist(err), "the first dispatcher removes its URL file when it stops")
}
