package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/frontdoor"
	"github.com/capstanhq/capstan/internal/frontdoor/frontdoortest"
	"github.com/capstanhq/capstan/internal/protocol"
)

// runDispatcherEnv makes the test binary run the dispatcher (run) instead of
// the tests: MCP clients started by the tests spawn it as `dispatcher mcp`.
const runDispatcherEnv = "CAPSTAN_TEST_RUN_DISPATCHER"

func TestMain(m *testing.M) {
	if os.Getenv(runDispatcherEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// nodeDir holds the pinned npm packages of these tests (package.json,
// package-lock.json; .ci/run installs them with npm ci) and the client
// script.
const nodeDir = "testdata/mcp-frontdoor"

// Tokens of writeTokens.
const (
	alphaToken       = "alpha-token-0123456789abcdef"
	betaToken        = "beta-token-0123456789abcdef"
	conformanceToken = "conformance-token-0123456789abcdef"
)

func TestMCPUsageErrors(t *testing.T) {
	t.Parallel()
	tokens := writeTokens(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"http without tokens", []string{"mcp", "--http", "127.0.0.1:0"}, "capstan: mcp: --http needs --tokens <file>"},
		{"tokens without http", []string{"mcp", "--tokens", tokens}, "capstan: mcp: --tokens applies to --http only"},
		{"personality with http", []string{"mcp", "--http", "127.0.0.1:0", "--tokens", tokens, "--personality", "a"}, "--personality applies to stdio"},
		{"negative timeout", []string{"mcp", "--timeout", "-1s"}, "capstan: mcp: --timeout must be at least 1ms"},
		{"extra argument", []string{"mcp", "serve"}, `capstan: mcp: unexpected argument "serve"`},
		{"missing tokens file", []string{"mcp", "--http", "127.0.0.1:0", "--tokens", "/nonexistent/tokens.yaml"},
			"capstan: mcp: tokens file /nonexistent/tokens.yaml: open /nonexistent/tokens.yaml: no such file or directory"},
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

func TestMCPHelp(t *testing.T) {
	t.Parallel()
	code, _, stderr := runT(t, nil, "", "mcp", "-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, stderr, "Usage: dispatcher mcp [--personality id] | --http <addr> --tokens <file> [--timeout d]")
	for _, flag := range []string{"-personality", "-http", "-tokens", "-timeout"} {
		require.Contains(t, stderr, flag)
	}
}

func TestMCPTokensFileProblemsNameTheFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tokens.yaml")
	secret := "a-secret-that-is-long-enough"
	require.NoError(t, os.WriteFile(file, []byte("tokens:\n"+
		"  - {token: "+secret+", personality: alpha, name: one}\n"+
		"  - {token: "+secret+", personality: beta, name: two}\n"+
		"  - {token: '', personality: alpha}\n"+
		"  - {token: short, personality: 'no spaces'}\n"), 0o600))
	code, _, stderr := runT(t, nil, "", "mcp", "--http", "127.0.0.1:0", "--tokens", file)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "capstan: mcp: tokens file "+file+": ")
	for _, want := range []string{
		"tokens[1].token: the same token as tokens[0]",
		"tokens[2].token: must not be empty",
		"tokens[3].token: too short (5 characters)",
		`tokens[3].personality "no spaces" must match`,
	} {
		require.Contains(t, stderr, want)
	}
	require.NotContains(t, stderr, secret, "token values never appear in errors")
	require.Equal(t, 1, strings.Count(stderr, "\n"), "one message")

	require.NoError(t, os.WriteFile(file, []byte("tokens: [{token: 0123456789abcdef, personality: alpha, role: admin}]\n"), 0o600))
	code, _, stderr = runT(t, nil, "", "mcp", "--http", "127.0.0.1:0", "--tokens", file)
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `unknown field "role"`, "strict decoding")
}

func TestMCPWarnsAboutAReadableTokensFile(t *testing.T) {
	t.Parallel()
	file := writeTokens(t)
	require.NoError(t, os.Chmod(file, 0o644))
	code, _, stderr := runT(t, map[string]string{"CAPSTAN_NATS_URL": "nats://127.0.0.1:1"}, "", "mcp", "--http", "127.0.0.1:0", "--tokens", file)
	require.Equal(t, exitUsage, code, "no server")
	require.Contains(t, stderr, "capstan: mcp: warning: tokens file "+file+" may be read by other users (mode 0644); chmod 600 it")
}

// TestMCPStdioCommandServesTheGoSDKClient runs `dispatcher mcp` in-process
// over pipes against the Go SDK client.
func TestMCPStdioCommandServesTheGoSDKClient(t *testing.T) {
	t.Parallel()
	pool := frontdoortest.Start(t)
	env := map[string]string{"CAPSTAN_NATS_URL": pool.URL, "CAPSTAN_NATS_CREDS": pool.Creds, "CAPSTAN_DEFAULT_PERSONALITY": frontdoortest.Beta}
	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	var stderr syncBuffer
	a := newApp(getenvFrom(env), serverIn, serverOut, &stderr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- a.main(ctx, []string{"mcp"}) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "1"}, nil).
		Connect(ctxT(t), &mcp.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	require.NoError(t, err, stderr.String())
	res, err := cs.ListTools(ctxT(t), nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	require.Equal(t, []string{frontdoortest.BetaOnly, "echo"}, names, "without --personality: CAPSTAN_DEFAULT_PERSONALITY")
	call, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: frontdoortest.BetaOnly})
	require.NoError(t, err)
	require.Equal(t, frontdoortest.BetaSecret, call.Content[0].(*mcp.TextContent).Text)
	require.NoError(t, cs.Close())
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("dispatcher mcp did not end when stdin closed")
	}
	cancel()
	require.Empty(t, stderr.String())
}

func TestMCPUnknownPersonalityExits2(t *testing.T) {
	t.Parallel()
	pool := frontdoortest.Start(t)
	env := map[string]string{"CAPSTAN_NATS_URL": pool.URL, "CAPSTAN_NATS_CREDS": pool.Creds}
	code, stdout, stderr := runT(t, env, "", "mcp", "--personality", "nobody")
	require.Equal(t, exitUsage, code)
	require.Empty(t, stdout, "stdout is the protocol stream: nothing else is written there")
	require.Contains(t, stderr, "capstan: mcp: frontdoor: personality nobody: Unknown personality: nobody")
}

// TestMCPAgainstTheTypeScriptSDK drives `dispatcher mcp` with the official
// TypeScript SDK client over stdio (the test binary spawned as the
// dispatcher) and over streamable HTTP: list, call, structured content,
// errors, progress, cancellation, and a personality that never sees or
// calls another's tool.
func TestMCPAgainstTheTypeScriptSDK(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	pool := frontdoortest.Start(t)
	rec := recordCalls(t, pool)
	env := map[string]string{"CAPSTAN_NATS_URL": pool.URL, "CAPSTAN_NATS_CREDS": pool.Creds}
	endpoint := startMCPHTTP(t, env, writeTokens(t))
	exe, err := os.Executable()
	require.NoError(t, err)
	stdio := func(personality string) map[string]any {
		return map[string]any{"transport": "stdio", "command": exe, "args": []string{"mcp", "--personality", personality},
			"env": map[string]string{runDispatcherEnv: "1", "CAPSTAN_NATS_URL": pool.URL, "CAPSTAN_NATS_CREDS": pool.Creds}}
	}
	httpPlan := func(token string) map[string]any {
		return map[string]any{"transport": "http", "url": endpoint, "token": token}
	}
	progressArgs := func(text string, sleep int) map[string]any {
		return map[string]any{"text": text, "sleep_ms": sleep, "progress": []any{
			map[string]any{"message": "working", "audience": "user", "percent": 10},
			map[string]any{"message": "internal detail"},
		}}
	}
	steps := func(tag string) []any {
		return []any{
			map[string]any{"op": "list"},
			map[string]any{"op": "call", "name": "echo", "arguments": map[string]any{"text": "hello " + tag}},
			map[string]any{"op": "call", "name": frontdoortest.WhoAmI},
			map[string]any{"op": "call", "name": "echo", "arguments": map[string]any{"nope": true}},
			map[string]any{"op": "call", "name": "echo", "arguments": progressArgs("with progress "+tag, 300), "progress": true},
			map[string]any{"op": "cancel", "name": "echo", "arguments": progressArgs("cancel me "+tag, 60000)},
			map[string]any{"op": "call", "name": frontdoortest.BetaOnly},
		}
	}

	for tag, plan := range map[string]map[string]any{"stdio": stdio(frontdoortest.Alpha), "http": httpPlan(alphaToken)} {
		t.Run(tag, func(t *testing.T) {
			t.Parallel()
			plan["steps"] = steps(tag)
			out := runNodeClient(t, node, plan)
			require.Len(t, out, 8, "connect and seven steps")
			require.Empty(t, out[0].Error, "connect")

			require.Equal(t, []string{"echo", frontdoortest.WhoAmI}, toolNamesOf(t, out[1]), "alpha lists only its tools")

			ok := callResult(t, out[2])
			require.False(t, ok.IsError)
			require.Equal(t, "hello "+tag, ok.text(t))
			require.NotEmpty(t, ok.Meta[frontdoor.MetaCallID])

			who := callResult(t, out[3])
			require.Equal(t, frontdoortest.WhoAmI, who.text(t))
			require.Equal(t, "mcp", who.StructuredContent["platform"])
			require.Equal(t, frontdoortest.Alpha, who.StructuredContent["personality_id"])
			require.Regexp(t, `^mcp:(stdio|agent-a):[0-9]+$`, who.StructuredContent["session_key"])

			bad := callResult(t, out[4])
			require.True(t, bad.IsError)
			require.True(t, strings.HasPrefix(bad.text(t), "input_invalid: "), bad.text(t))

			prog := callResult(t, out[5])
			require.Equal(t, "with progress "+tag, prog.text(t))
			require.Len(t, out[5].Progress, 1, "one user event; the internal one stays inside")
			require.Equal(t, "working", out[5].Progress[0].Message)
			require.Equal(t, float64(10), out[5].Progress[0].Progress, "the percentage, of 100")
			require.Equal(t, float64(100), out[5].Progress[0].Total)

			require.NotEmpty(t, out[6].Error, "the cancelled call rejects")
			require.Len(t, out[6].Progress, 1)
			r := rec.result(t, pool, "cancel me "+tag)
			require.False(t, r.OK)
			require.Equal(t, "cancelled: "+frontdoor.CancelReason+": Error: cancelled by the test", r.Error, "the client's reason follows")

			if out[7].Error == "" {
				denied := callResult(t, out[7])
				require.True(t, denied.IsError, "alpha cannot call beta_only")
				require.NotContains(t, denied.text(t), frontdoortest.BetaSecret)
			}
			require.NotContains(t, string(out[7].Result), frontdoortest.BetaSecret)
			require.NoError(t, pool.Conn.Flush(ctxT(t)))
			require.Zero(t, rec.count(frontdoortest.BetaOnly, frontdoortest.Alpha), "alpha's attempt never reached the pool")
		})
	}

	t.Run("beta", func(t *testing.T) {
		t.Parallel()
		for _, plan := range []map[string]any{stdio(frontdoortest.Beta), httpPlan(betaToken)} {
			plan["steps"] = []any{map[string]any{"op": "list"}, map[string]any{"op": "call", "name": frontdoortest.BetaOnly}}
			out := runNodeClient(t, node, plan)
			require.Len(t, out, 3)
			require.Equal(t, []string{frontdoortest.BetaOnly, "echo"}, toolNamesOf(t, out[1]))
			require.Equal(t, frontdoortest.BetaSecret, callResult(t, out[2]).text(t))
		}
	})

	t.Run("401 without a known token", func(t *testing.T) {
		t.Parallel()
		for _, token := range []string{"", "not-a-token-of-the-tokens-file"} {
			plan := httpPlan(token)
			plan["steps"] = []any{map[string]any{"op": "list"}}
			out := runNodeClient(t, node, plan)
			require.Len(t, out, 1, "the client cannot even connect")
			require.Equal(t, "connect", out[0].Op)
			require.EqualValues(t, http.StatusUnauthorized, out[0].Code, "HTTP status: %s", out[0].Error)
			require.NotContains(t, out[0].Error, "echo")
		}
	})
}

// TestMCPConformance runs the server scenarios of the official conformance
// suite (@modelcontextprotocol/conformance) that apply to a tools-only
// server whose tools are a pool's (docs/mcp.md lists them and why the
// others do not apply), as personality conformance, whose pool hosts the
// tools the tools-call scenarios call (frontdoortest.ConformanceTools). The
// suite has no option for a bearer token, so it talks to the front door
// through a loopback proxy that adds one.
func TestMCPConformance(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	pool := frontdoortest.Start(t)
	env := map[string]string{"CAPSTAN_NATS_URL": pool.URL, "CAPSTAN_NATS_CREDS": pool.Creds}
	endpoint := withBearer(t, startMCPHTTP(t, env, writeTokens(t)), conformanceToken)
	for _, scenario := range conformanceScenarios {
		t.Run(scenario, func(t *testing.T) {
			// One scenario at a time: each starts a Node.js process, and
			// on a loaded 2-core CI machine several at once made the
			// suite's own 60 s request timeout fire. A scenario that
			// fails is run once more (the first failure is logged), so
			// only a failure that repeats fails the test.
			dir, err := filepath.Abs(nodeDir)
			require.NoError(t, err)
			run := func() ([]byte, error) {
				ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, node, "--import", "file://"+filepath.Join(dir, "node20-fs-shim.mjs"),
					filepath.Join(dir, "node_modules/@modelcontextprotocol/conformance/dist/index.js"),
					"server", "--url", endpoint, "--scenario", scenario)
				cmd.Dir = t.TempDir() // the suite writes results/ into its working directory
				return cmd.CombinedOutput()
			}
			out, err := run()
			if err != nil {
				t.Logf("conformance scenario %s failed once, running it again:\n%s", scenario, out)
				out, err = run()
			}
			require.NoError(t, err, "conformance scenario %s:\n%s", scenario, out)
			require.Regexp(t, `Passed: ([1-9][0-9]*)/([1-9][0-9]*), 0 failed, 0 warnings`, string(out), "every check of %s passes:\n%s", scenario, out)
		})
	}
}

// conformanceScenarios are the suite's server scenarios that apply to the
// front door (docs/mcp.md, "Conformance").
var conformanceScenarios = []string{
	"server-initialize",
	"ping",
	"tools-list",
	"tools-call-simple-text",
	"tools-call-error",
	"tools-call-with-progress",
	"json-schema-2020-12",
	"dns-rebinding-protection",
	"server-sse-multiple-streams",
}

// requireNode returns the path of node, skipping the test when Node.js or
// the pinned packages are missing.
func requireNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the MCP front door tests against the official TypeScript SDK and conformance suite need Node.js")
	}
	for _, pkg := range []string{"sdk", "conformance"} {
		if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "@modelcontextprotocol", pkg, "package.json")); err != nil {
			t.Skipf("@modelcontextprotocol/%s is not installed: run `npm ci` in cmd/dispatcher/%s (.ci/run does)", pkg, nodeDir)
		}
	}
	return node
}

// writeTokens writes a tokens file: alphaToken for alpha (name agent-a),
// betaToken for beta (name agent-b), conformanceToken for conformance.
func writeTokens(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(file, []byte("tokens:\n"+
		"  - {token: "+alphaToken+", personality: alpha, name: agent-a}\n"+
		"  - {token: "+betaToken+", personality: beta, name: agent-b}\n"+
		"  - {token: "+conformanceToken+", personality: conformance, name: conformance-suite}\n"), 0o600))
	return file
}

var servingRE = regexp.MustCompile(`serving streamable HTTP at (http://\S+)`)

// startMCPHTTP runs `dispatcher mcp --http 127.0.0.1:0 --tokens <file>`
// in-process until the test ends and returns its MCP endpoint.
func startMCPHTTP(t *testing.T, env map[string]string, tokens string) string {
	t.Helper()
	var stderr syncBuffer
	a := newApp(getenvFrom(env), strings.NewReader(""), io.Discard, &stderr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- a.main(ctx, []string{"mcp", "--http", "127.0.0.1:0", "--tokens", tokens}) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("dispatcher mcp --http exited %d: %s", code, stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("dispatcher mcp --http did not stop in 30s")
		}
	})
	var endpoint string
	require.Eventually(t, func() bool {
		m := servingRE.FindStringSubmatch(stderr.String())
		if m != nil {
			endpoint = m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("dispatcher mcp --http exited %d: %s", code, stderr.String())
		default:
		}
		return m != nil
	}, 30*time.Second, 10*time.Millisecond)
	return endpoint
}

// withBearer serves a loopback proxy to endpoint that adds a bearer token
// and returns the proxy's endpoint.
func withBearer(t *testing.T, endpoint, token string) string {
	t.Helper()
	srv := newBearerProxy(t, endpoint, token)
	return srv + frontdoor.Path
}

// nodeLine is one line printed by client.mjs.
type nodeLine struct {
	Op       string          `json:"op"`
	Result   json.RawMessage `json:"result"`
	Error    string          `json:"error"`
	Code     any             `json:"code"`
	Progress []struct {
		Progress float64 `json:"progress"`
		Total    float64 `json:"total"`
		Message  string  `json:"message"`
	} `json:"progress"`
}

// runNodeClient runs client.mjs with plan and returns its lines.
func runNodeClient(t *testing.T, node string, plan map[string]any) []nodeLine {
	t.Helper()
	data, err := json.Marshal(plan)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs", string(data))
	cmd.Dir = nodeDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "client.mjs: %s", stderr.String())
	var lines []nodeLine
	for line := range strings.Lines(string(out)) {
		var l nodeLine
		require.NoError(t, json.Unmarshal([]byte(line), &l), "line %q (stderr: %s)", line, stderr.String())
		lines = append(lines, l)
	}
	return lines
}

func toolNamesOf(t *testing.T, l nodeLine) []string {
	t.Helper()
	require.Empty(t, l.Error, "%s", l.Op)
	var tools []struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		InputSchema map[string]any `json:"inputSchema"`
	}
	require.NoError(t, json.Unmarshal(l.Result, &tools))
	var names []string
	for _, tl := range tools {
		require.NotEmpty(t, tl.Description, tl.Name)
		require.Equal(t, "object", tl.InputSchema["type"], tl.Name)
		names = append(names, tl.Name)
	}
	return names
}

// toolResult is a tools/call result as the TypeScript client returns it.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent map[string]any `json:"structuredContent"`
	IsError           bool           `json:"isError"`
	Meta              map[string]any `json:"_meta"`
}

func (r toolResult) text(t *testing.T) string {
	t.Helper()
	require.Len(t, r.Content, 1)
	require.Equal(t, "text", r.Content[0].Type)
	return r.Content[0].Text
}

func callResult(t *testing.T, l nodeLine) toolResult {
	t.Helper()
	require.Empty(t, l.Error, "%s", l.Op)
	var r toolResult
	require.NoError(t, json.Unmarshal(l.Result, &r))
	return r
}

// callRecorder records the calls published to a pool (a core subscription
// next to the workers' consumer, which deletes them once answered).
type callRecorder struct {
	mu    sync.Mutex
	calls []protocol.Call
}

func recordCalls(t *testing.T, pool *frontdoortest.Pool) *callRecorder {
	t.Helper()
	rec := &callRecorder{}
	sub, err := pool.Conn.Subscribe("capstan.call.>", "", func(_ string, _ bus.Header, data []byte) {
		var c protocol.Call
		if json.Unmarshal(data, &c) == nil {
			rec.mu.Lock()
			rec.calls = append(rec.calls, c)
			rec.mu.Unlock()
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Stop() })
	require.NoError(t, pool.Conn.Flush(ctxT(t)))
	return rec
}

// count returns how many recorded calls are of tool under personality.
func (r *callRecorder) count(tool, personality string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.Tool == tool && c.PersonalityID == personality {
			n++
		}
	}
	return n
}

// result returns the result of the one recorded call whose arguments
// contain marker, waiting for both up to 30s.
func (r *callRecorder) result(t *testing.T, pool *frontdoortest.Pool, marker string) protocol.Result {
	t.Helper()
	var call protocol.Call
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.calls {
			if strings.Contains(string(c.Args), marker) {
				call = c
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "no call with %q", marker)
	c, err := client.New(ctxT(t), client.Config{NATSURL: pool.URL, NATSCreds: pool.Creds, Personality: call.PersonalityID})
	require.NoError(t, err)
	defer c.Close()
	res, err := c.Await(ctxT(t), "", call.CallID)
	require.NoError(t, err)
	return res
}

// newBearerProxy serves a loopback reverse proxy to endpoint's server that
// adds "Authorization: Bearer <token>" to every request; it returns the
// proxy's base URL.
func newBearerProxy(t *testing.T, endpoint, token string) string {
	t.Helper()
	target, err := url.Parse(endpoint)
	require.NoError(t, err)
	target.Path = ""
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host // the front door's DNS-rebinding check sees the client's Host
			r.Out.Header.Set("Authorization", "Bearer "+token)
		},
		FlushInterval: -1, // event streams pass through at once
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL
}
