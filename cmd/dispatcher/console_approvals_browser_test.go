package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
)

// Tokens of the approvals browser test: oncall approves, dash views.
const (
	browserApprover = "approver-token-for-the-browser"
	browserDash     = "dashboard-token-for-the-browser"
)

// TestConsoleApprovalsInABrowser drives the Approvals page with a real
// Chromium against "dispatcher console", a real embedded NATS server and a
// real worker: a viewer sees a held call and its summary without buttons; an
// approver sees a call held after the page opened appear live, approves one
// (its result arrives), is shown the refusal of a denial without a reason,
// then denies the other, whose reason typed before the page re-rendered is
// kept. The page is screenshotted.
func TestConsoleApprovalsInABrowser(t *testing.T) {
	t.Parallel()
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium found (chromium, chromium-browser, google-chrome or CAPSTAN_CHROMIUM): the browser test of the console is skipped; .ci/run installs it")
	}
	shots := screenshotDir(t)

	url := bustest.Server(t)
	dir := workertest.Personalities(t, map[string]string{
		"ops": "id: ops\ntoolset: [echo, read_file]\nfs_reach: {workdir: /srv/ledger, read: [\"${WORKDIR}\"]}\n" +
			"approval:\n  require:\n    - tool: echo\n      when: {text: [pay, refund]}\n    - tool: read_file\n  timeout: 2h\n  approvers: [oncall]\n",
	})
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), WorkerID: "approvals-worker", PersonalitiesDir: dir,
		Concurrency: 2, ShutdownGrace: time.Millisecond, SecretsBackend: worker.SecretsNone,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, builtin.All()...)
	require.NoError(t, err)
	workertest.Run(t, w, nil)

	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(tokens, []byte("tokens:\n  - {token: "+browserApprover+", role: approver, name: oncall}\n  - {token: "+browserDash+", role: viewer, name: dash}\n"), 0o600))
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}
	addr := fmt.Sprintf("127.0.0.1:%d", bustest.FreePort(t))
	base := "http://" + addr
	cctx, stopConsole := context.WithCancel(context.Background())
	done := make(chan string, 1)
	go func() {
		code, _, stderr := runApp(t, cctx, nil, env, "", "console", "--addr", addr, "--tokens", tokens)
		done <- fmt.Sprintf("exit %d: %s", code, stderr)
	}()
	t.Cleanup(func() {
		stopConsole()
		out := <-done
		require.True(t, strings.HasPrefix(out, "exit 0:"), out)
		require.Contains(t, out, `"action":"approve","target":"`, "the approval is in the console's log")
		require.Contains(t, out, `"by":"oncall","role":"approver","outcome":"approved"`)
		require.Contains(t, out, `"outcome":"refused: reason: is required to deny"`)
		require.NotContains(t, out, browserApprover, "no token in the console's output")
	})
	waitHTTP(t, base+"/login")

	c, err := client.New(ctxT(t), client.Config{NATSURL: url, NATSCreds: bustest.Creds(url), Name: "approvals-browser-test", Personality: "ops"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	hold := func(tool, args string) string {
		t.Helper()
		call := client.Call{CallID: client.NewID(), Tool: tool, SessionID: "s", Args: json.RawMessage(args)}
		require.NoError(t, c.Submit(ctxT(t), &call))
		require.Eventually(t, func() bool {
			_, found, err := c.FindHold(ctxT(t), call.CallID)
			return err == nil && found
		}, 30*time.Second, 20*time.Millisecond, "call %s is never held", call.CallID)
		return call.CallID
	}
	pay := hold("echo", `{"text":"pay"}`)
	// A call that stays held, whose summary names the paths it reads.
	ledger := hold("read_file", `{"path":"/srv/ledger/2026-11.csv"}`)

	ctx := openBrowser(t, browser, base+"/login")
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	shot := func(name string) chromedp.Action[chromedp.Void] { return screenshot(shots, name) }
	signIn := func(token string) chromedp.Action[chromedp.Void] {
		return chromedp.Steps(
			signInSteps(base, token),
			chromedp.Navigate(base+"/approvals"),
			chromedp.WaitReady(css(`[sse-connect][data-sse="open"]`)),
		)
	}
	// text reads an element's text in one evaluation in the page: the
	// live lists are swapped in over server-sent events at any moment, so a
	// node looked up first and read later may be gone by then.
	text := func(sel string) string {
		t.Helper()
		return pageText(ctx, t, sel)
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+jsString(sel)+`).length`))
		require.NoError(t, err, sel)
		return n
	}
	article := func(id string) string { return `article.hold[data-call="` + id + `"]` }

	// A viewer sees the held call and what it would do, without buttons.
	require.NoError(t, chromedp.Do(ctx, signIn(browserDash), chromedp.WaitVisible(css(article(pay)))))
	require.Contains(t, text(article(pay)+" pre.args"), `"text": "pay"`)
	require.Zero(t, count("form.decide"), "a viewer gets no approve or deny buttons")
	require.Zero(t, count("button.approve"))
	_, err = chromedp.Run(ctx, chromedp.Evaluate[any](`fetch("/logout", {method: "POST"})`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)

	// The approver: a call held after the page opened shows up live.
	require.NoError(t, chromedp.Do(ctx, signIn(browserApprover), chromedp.WaitVisible(css(article(pay)+" button.approve"))))
	refund := hold("echo", `{"text":"refund"}`)
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(css(article(refund)+" button.deny")), shot("approvals-pending.png")))

	// Denying without a reason is refused, and the page says so.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(css(article(refund)+" button.deny")),
		chromedp.WaitVisible(css(`#action-status .error`))))
	require.Equal(t, "deny "+refund+": reason: is required to deny", text("#action-status"))

	// A reason typed for one call survives the re-render that approving
	// the other brings; the approved call runs.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(css("#reason-"+refund), "not this week"),
		chromedp.Click(css(article(pay)+" button.approve")),
		chromedp.WaitVisible(css(`#action-status .flash`)),
		chromedp.WaitVisible(css(`#history tr[data-call="`+pay+`"][data-decision="approved"]`)),
		chromedp.WaitNotPresent(css(article(pay)))))
	require.Contains(t, text("#action-status"), "Approved call "+pay+" as oncall")
	r, err := c.Await(ctxT(t), "", pay)
	require.NoError(t, err)
	require.True(t, r.OK, r.Error)
	require.Equal(t, "pay", r.Value)
	reason, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(`+jsString("#reason-"+refund)+`).value`))
	require.NoError(t, err)
	require.Equal(t, "not this week", reason)

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(css(article(refund)+" button.deny")),
		chromedp.WaitVisible(css(`#history tr[data-call="`+refund+`"][data-decision="denied"]`)),
		chromedp.WaitNotPresent(css(article(refund))),
		shot("approvals.png")))
	require.Equal(t, "1", text("#pending-count"), "the read_file call still waits")
	require.Contains(t, text(article(ledger)), "/srv/ledger")
	require.Contains(t, text(`#history tr[data-call="`+refund+`"]`), "not this week")
	r, err = c.Await(ctxT(t), "", refund)
	require.NoError(t, err)
	require.False(t, r.OK)
	require.Equal(t, "APPROVAL_DENIED: not this week", r.Error)
}

// pageText returns the text of the element sel in one evaluation in the
// page, waiting (at most 10 s) until there is one, as chromedp.Text waits
// for its node: a node looked up first and read later may have been
// swapped out by a live update in between.
func pageText(ctx context.Context, t *testing.T, sel string) string {
	t.Helper()
	js := `(() => { const e = document.querySelector(` + jsString(sel) + `); return e ? [e.innerText] : []; })()`
	var got []string
	require.Eventually(t, func() bool {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](js))
		got = v
		return err == nil && len(v) == 1
	}, 10*time.Second, 20*time.Millisecond, "no element %s in the page", sel)
	return got[0]
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
