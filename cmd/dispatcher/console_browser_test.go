package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/explain"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
)

// Tokens of the browser test.
const (
	browserOperator = "operator-token-for-the-browser"
	browserViewer   = "viewer-token-for-the-browser"
)

// chromium finds a Chromium or Chrome binary: CAPSTAN_CHROMIUM, else the
// usual names on PATH.
func chromium() string {
	if p := os.Getenv("CAPSTAN_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// screenshotDir is where the browser test writes its screenshots:
// CAPSTAN_CONSOLE_SCREENSHOTS, else a test temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("CAPSTAN_CONSOLE_SCREENSHOTS"); d != "" {
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

// progressTool emits a dashboard and an internal progress event, a moment
// apart, then answers "done".
func progressTool() tool.Tool {
	return tool.Tool{Name: "steps", Description: "Emits progress events, then answers done.", Toolset: "debug",
		Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			half := 50.0
			if err := tc.Emit(tool.Progress{Message: "halfway there", Percent: &half, Audience: tool.AudienceDashboard}); err != nil {
				return tool.Result{}, err
			}
			if err := tc.Emit(tool.Progress{Message: "internal detail"}); err != nil {
				return tool.Result{}, err
			}
			return tool.Result{OK: true, Value: "done"}, nil
		}}
}

// TestConsoleInABrowser drives the console with a real Chromium against a
// real embedded NATS server and a real worker: the pool view shows the
// worker and its slots, a call made during the test appears in the live
// tail and its page shows its progress events and result, the explain page
// for two personalities matches "dispatcher explain --json", a viewer gets
// 403 on redrive and an operator redrives. Each page is screenshotted.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (chromium, chromium-browser, google-chrome or CAPSTAN_CHROMIUM): the browser test of the console is skipped; .ci/run installs it")
	}
	shots := screenshotDir(t)

	url := bustest.Server(t)
	dir := workertest.Personalities(t, map[string]string{
		"default": "id: default\ntoolset: [echo, steps, read_file]\nfs_reach: {workdir: /srv/work, read: [\"${WORKDIR}\"]}\n",
		"reader":  "id: reader\ntoolset: [read_file, search_files]\nfs_reach: {workdir: /srv/docs, read: [\"${WORKDIR}\"]}\nrate_limits:\n  read_file: {requests: 100, window: 1m}\n",
	})
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), WorkerID: "browser-worker", PersonalitiesDir: dir,
		Concurrency: 3, ShutdownGrace: time.Millisecond, SecretsBackend: worker.SecretsNone,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, append(builtin.All(), progressTool())...)
	require.NoError(t, err)
	workertest.Run(t, w, nil)

	// dispatcher console, as a user runs it.
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url),
		envConsoleToken: browserOperator, envConsoleViewerToken: browserViewer, envTraceURL: "http://jaeger.test/trace/{trace_id}"}
	addr := fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
	base := "http://" + addr
	cctx, stopConsole := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		// The worker runs in this process, as local mode's pool does: the
		// console is told of it as local mode tells it of its pool, so it
		// shows the worker's free slots and readiness (a remote worker's
		// record in the workers bucket has neither).
		inProcess := func(a *app) { a.local = &localPool{w: w, slots: 3} }
		code, _, stderr := runApp(t, cctx, inProcess, env, "", "console", "--addr", addr)
		done <- fmt.Sprintf("exit %d: %s", code, stderr)
	}()
	t.Cleanup(func() {
		stopConsole()
		out := <-done
		require.True(t, strings.HasPrefix(out, "exit 0:"), out)
		require.Contains(t, out, "capstan: console: serving http://"+addr+" (2 token(s); every request needs one)")
		require.NotContains(t, out, browserOperator, "no token in the console's output")
	})
	waitHTTP(t, base+"/login")

	c, err := client.New(ctxT(t), client.Config{NATSURL: url, NATSCreds: bustest.Creds(url), Name: "browser-test"})
	require.NoError(t, err)
	t.Cleanup(c.Close)

	ctx := openBrowser(t, browser, base+"/")
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	shot := func(name string) chromedp.Action[chromedp.Void] { return screenshot(shots, name) }
	signIn := func(token string) chromedp.Action[chromedp.Void] { return signInSteps(base, token) }
	// text reads an element's text in one evaluation in the page: live
	// fragments are swapped in over server-sent events at any moment, so a
	// node looked up first and read later may be gone by then.
	text := func(sel string) string {
		t.Helper()
		return pageText(ctx, t, sel)
	}
	post := func(path string) int {
		t.Helper()
		status, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("`+path+`", {method: "POST"}).then(r => r.status)`, chromedp.EvalAwaitPromise))
		require.NoError(t, err)
		return status
	}

	// An unknown visitor is asked for a token.
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(css("#token")), shot("login.png")))
	title, err := chromedp.Run(ctx, chromedp.Title())
	require.NoError(t, err)
	require.Equal(t, "Sign in · Capstan console", title)

	// Pool view: the worker and its slots.
	require.NoError(t, chromedp.Do(ctx, signIn(browserViewer), chromedp.WaitVisible(css(`tr[data-worker="browser-worker"]`)),
		chromedp.WaitReady(css(`[sse-connect][data-sse="open"]`))))
	require.Equal(t, "Live: connected.", text("[data-live-status]"))
	workerRow := text(`tr[data-worker="browser-worker"]`)
	require.Contains(t, workerRow, "3 of 3")
	require.Contains(t, workerRow, "ready")

	// Calls made while the pool view is open show up in it live.
	for range 3 {
		call := client.Call{CallID: client.NewID(), Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"hi"}`)}
		require.NoError(t, c.Submit(ctxT(t), &call))
	}
	bad := client.Call{CallID: client.NewID(), Tool: "read_file", SessionID: "s", Args: json.RawMessage(`{"path":"/etc/shadow"}`)}
	require.NoError(t, c.Submit(ctxT(t), &bad))
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(css(`tr[data-tool="echo"]`)), chromedp.WaitVisible(css(`svg.bars`)), shot("pool.png")))

	// The live tail: a call made after the page opened appears in it.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/calls?tool=steps"),
		chromedp.WaitReady(css(`[sse-connect][data-sse="open"]`)))) // the event stream is open
	call := client.Call{CallID: client.NewID(), BatchID: "browser-batch", Tool: "steps", SessionID: "s", Args: json.RawMessage(`{}`)}
	require.NoError(t, c.Submit(ctxT(t), &call))
	row := `tr[data-call="` + call.CallID + `"]`
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(css(row)), shot("calls.png")))

	// The call's page: progress events (dashboard first), result, trace.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(css(row+` a[href^="/calls/"]`)), chromedp.WaitVisible(css("#result-value")), shot("call.png")))
	require.Contains(t, text("#dashboard-events"), "halfway there")
	require.Equal(t, "done", text("#result-value"))
	timeline := text("#timeline")
	require.Contains(t, timeline, "internal detail")
	require.Contains(t, timeline, "dashboard")

	// Explain, side by side, against "dispatcher explain --json".
	type cell struct {
		Personality string `json:"personality"`
		Explanation string `json:"explanation"`
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/explain"),
		chromedp.WaitVisible(css("#pb")),
		chromedp.SetValue(css("#pa"), "default"),
		chromedp.SetValue(css("#pb"), "reader"),
		chromedp.Submit(css("#pb")),
		chromedp.WaitVisible(css(`td.verdict[data-personality="reader"]`)),
		shot("explain.png")))
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]cell](
		`[...document.querySelectorAll("td.verdict")].map(td => ({personality: td.dataset.personality, explanation: td.dataset.explanation}))`))
	require.NoError(t, err)
	for _, id := range []string{"default", "reader"} {
		code, stdout, stderr := runT(t, env, "", "explain", "--json", "--personality", id)
		require.Equal(t, exitOK, code, stderr)
		var want []explain.Explanation
		require.NoError(t, json.Unmarshal([]byte(stdout), &want))
		var got []explain.Explanation
		for _, c := range cells {
			if c.Personality == id {
				var e explain.Explanation
				require.NoError(t, json.Unmarshal([]byte(c.Explanation), &e))
				got = append(got, e)
			}
		}
		require.Equal(t, want, got, "the explain page of %s", id)
	}

	// Dead letters: a viewer may not redrive (403), an operator does.
	admin := bustest.Conn(t, url, "")
	publishDeadLetter(t, admin, "dead-1")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/dlq"), chromedp.WaitVisible(css(`tr[data-call="dead-1"]`)), shot("dlq.png")))
	require.Equal(t, http.StatusForbidden, post("/dlq/dead-1/redrive"), "a viewer's redrive")
	post("/logout")
	require.NoError(t, chromedp.Do(ctx,
		signIn(browserOperator),
		chromedp.Navigate(base+"/dlq"),
		chromedp.WaitVisible(css(`tr[data-call="dead-1"] button`)),
		chromedp.Click(css(`tr[data-call="dead-1"] form[hx-post$="/redrive"] button`)),
		chromedp.WaitVisible(css(`#action-status .flash`))))
	require.Contains(t, text("#action-status"), "Redriven call dead-1 to capstan.call.default.default.echo")
	r, err := c.Await(ctxT(t), "", "dead-1")
	require.NoError(t, err)
	require.True(t, r.OK, r.Error)
}

// publishDeadLetter stores a dead letter of callID as a worker writes one.
func publishDeadLetter(t *testing.T, conn *bus.Conn, callID string) {
	t.Helper()
	h := bus.Header{
		protocol.HeaderProtocol:        {protocol.Version},
		protocol.HeaderTraceparent:     {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		protocol.HeaderDeadReason:      {"secrets backend unavailable"},
		protocol.HeaderDeliveries:      {"5"},
		protocol.HeaderOriginalSubject: {"capstan.call.default.default.echo"},
		protocol.HeaderDeadAt:          {"2026-11-23T10:00:00Z"},
		protocol.HeaderMsgID:           {callID},
	}
	body := `{"call_id":"` + callID + `","tool":"echo","args":{"text":"again"},"session_id":"s","personality_id":"default"}`
	_, err := conn.Publish(ctxT(t), "capstan.dlq.echo", []byte(body), h, "")
	require.NoError(t, err)
}

// waitHTTP waits until url answers.
func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openBrowser starts the browser at path browser on page first and returns
// the context every later step runs under (two minutes); the browser
// stops when the test ends. The first run starts the browser: it has no
// timeout of its own (that would stop the browser).
func openBrowser(t *testing.T, browser, first string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate(first)))
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// screenshot writes a full-page screenshot to dir/name.
func screenshot(dir, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		png, err := chromedp.FullScreenshot(100)(ctx, tg)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, name), png, 0o644)
	})
}

// signInSteps signs in to the console at base with token and waits for its
// first page.
func signInSteps(base, token string) chromedp.Action[chromedp.Void] {
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	return chromedp.Steps(
		chromedp.Navigate(base+"/login"),
		chromedp.WaitVisible(css("#token")),
		chromedp.SendKeys(css("#token"), token),
		chromedp.Submit(css("#token")),
		chromedp.WaitVisible(css("#workers")),
	)
}
