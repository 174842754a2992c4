package console

import (
	"bufio"
	"context"
	"encoding/json"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/explain"
	"github.com/capstanhq/capstan/internal/protocol"
)

var testTokens = []Token{
	{Token: operatorToken, Role: RoleOperator, Name: "alice"},
	{Token: viewerToken, Role: RoleViewer, Name: "bob"},
}

func TestPoolViewShowsTheWorkerAndItsSlots(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, testTokens)
	code, body := do(t, "GET", srv.URL+"/", viewerToken)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `data-worker="console-worker"`)
	require.Contains(t, body, `data-slots-free="3">3 of 3`)
	require.Contains(t, body, `<summary class="ok">ready</summary>`)
	require.Contains(t, body, `data-pool="default"`)
	require.Contains(t, body, "Signed in as <strong>bob</strong> (viewer)")
}

func TestAccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, testTokens)
	for _, tc := range []struct {
		name, method, path, token string
		want                      int
		body                      string
	}{
		{"no token", "GET", "/", "", http.StatusUnauthorized, "a token is required"},
		{"unknown token", "GET", "/calls", "not-a-known-token-at-all", http.StatusUnauthorized, "unknown token"},
		{"viewer reads", "GET", "/dlq", viewerToken, http.StatusOK, "Dead letters"},
		{"viewer may not redrive", "POST", "/dlq/c1/redrive", viewerToken, http.StatusForbidden, "redrive needs the operator role; token bob has role viewer"},
		{"viewer may not purge", "POST", "/dlq/c1/purge", viewerToken, http.StatusForbidden, "purge needs the operator role"},
		{"viewer may not cancel", "POST", "/calls/c1/cancel", viewerToken, http.StatusForbidden, "cancel needs the operator role"},
		{"unknown token may not redrive", "POST", "/dlq/c1/redrive", "not-a-known-token-at-all", http.StatusUnauthorized, "unknown token"},
		{"operator redrives nothing", "POST", "/dlq/nothing-here/redrive", operatorToken, http.StatusNotFound, "no dead letter for call nothing-here"},
		{"operator purges nothing", "POST", "/dlq/nothing-here/purge", operatorToken, http.StatusNotFound, "no dead letter for call nothing-here"},
		{"bad call id", "GET", "/calls/a.b", viewerToken, http.StatusBadRequest, `call_id "a.b" must match`},
		{"bad call id to cancel", "POST", "/calls/a.b/cancel", operatorToken, http.StatusBadRequest, `call_id "a.b" must match`},
		{"bad call id to redrive", "POST", "/dlq/a.b/redrive", operatorToken, http.StatusBadRequest, `call_id "a.b" must match`},
		{"unknown page", "GET", "/nowhere", viewerToken, http.StatusNotFound, "404"},
		{"static files need no token", "GET", "/static/htmx.min.js", "", http.StatusOK, "htmx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, body := do(t, tc.method, srv.URL+tc.path, tc.token)
			require.Equal(t, tc.want, code, body)
			require.Contains(t, body, tc.body)
		})
	}
}

func TestMalformedAuthorizationIs401(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, testTokens)
	req, err := http.NewRequestWithContext(ctxT(t), "GET", srv.URL+"/", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Basic abc")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestCookieLoginAndCrossSitePost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, testTokens)
	resp, err := noRedirect.PostForm(srv.URL+"/login", map[string][]string{"token": {"wrong-token-0123456789"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, err = noRedirect.PostForm(srv.URL+"/login", map[string][]string{"token": {operatorToken}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	cookies := resp.Cookies()
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite)

	post := func(origin string) int {
		req, err := http.NewRequestWithContext(ctxT(t), "POST", srv.URL+"/dlq/nothing/redrive", nil)
		require.NoError(t, err)
		req.AddCookie(cookies[0])
		req.Header.Set("Origin", origin)
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusForbidden, post("http://evil.example"), "a form posted from another site")
	require.Equal(t, http.StatusNotFound, post(srv.URL), "same origin: the redrive runs (and finds no dead letter)")
}

func TestConsoleWithoutTokensAnswersLoopbackOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	con, _ := e.serve(t, nil)
	for _, tc := range []struct {
		remote string
		want   int
	}{
		{"127.0.0.1:5555", http.StatusOK},
		{"[::1]:5555", http.StatusOK},
		{"192.0.2.10:5555", http.StatusForbidden},
	} {
		req := httptest.NewRequestWithContext(ctxT(t), "GET", "/dlq", nil)
		req.RemoteAddr = tc.remote
		req.Host = "localhost:8480"
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8480}))
		rec := httptest.NewRecorder()
		con.ServeHTTP(rec, req)
		require.Equal(t, tc.want, rec.Code, tc.remote)
		if tc.want == http.StatusForbidden {
			require.Contains(t, rec.Body.String(), "no tokens configured and answers loopback clients only")
		}
	}
}

// TestConsoleWithoutTokensRefusesARebindingPage: a web page the operator
// visits rebinds its own name to 127.0.0.1 and posts to a console without
// tokens from the operator's browser, with its own name in Host and a
// matching Origin (security.md section 2). It gets 403 and nothing is
// stored; only a Host of localhost or a loopback address with the
// console's port is served.
func TestConsoleWithoutTokensRefusesARebindingPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, nil)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	before, err := e.client.Personality(ctxT(t), "default")
	require.NoError(t, err)

	post := func(host string) (int, string) {
		doc := "id: default\nfs_reach: {read: [\"/\"]}\nprocess: {allow: [\"*\"]}\n"
		req, err := http.NewRequestWithContext(ctxT(t), "POST", srv.URL+"/personalities", strings.NewReader(url.Values{"document": {doc}}.Encode()))
		require.NoError(t, err)
		req.Host = host
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, host := range []string{"evil.example:" + port, "127.0.0.1.evil.example:" + port, "localhost.evil.example:" + port,
		"localhost:1", "127.0.0.1", "evil.example"} {
		code, body := post(host)
		require.Equal(t, http.StatusForbidden, code, host)
		require.Contains(t, body, "answers only a Host of localhost or a loopback address with its port", host)
	}
	after, err := e.client.Personality(ctxT(t), "default")
	require.NoError(t, err)
	require.Equal(t, string(before), string(after), "the rebinding page changed the personality")

	// The console's own names still work, in any case of "localhost".
	for _, host := range []string{"localhost:" + port, "LocalHost:" + port, "127.0.0.1:" + port, "127.1.2.3:" + port, "[::1]:" + port} {
		req, err := http.NewRequestWithContext(ctxT(t), "GET", srv.URL+"/personalities/default", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, host)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no client", Config{Conn: e.conn}, "Config.Client is required"},
		{"no conn", Config{Client: e.client}, "Config.Conn is required"},
		{"short token", Config{Client: e.client, Conn: e.conn, Tokens: []Token{{Token: "short", Role: RoleViewer}}}, "Config.Tokens[0]: token must be at least 16 characters"},
		{"bad role", Config{Client: e.client, Conn: e.conn, Tokens: []Token{{Token: operatorToken, Role: "admin"}}}, `role must be viewer, operator or approver, got "admin"`},
		{"trace url", Config{Client: e.client, Conn: e.conn, TraceURL: "http://jaeger/trace/"}, "must hold {trace_id}"},
	} {
		_, err := New(tc.cfg)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
}

func TestLoadTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"ok", "tokens:\n- {token: " + operatorToken + ", role: operator, name: alice}\n- {token: " + viewerToken + ", role: viewer}\n", ""},
		{"empty", "tokens: []\n", "no tokens"},
		{"unknown key", "tokens:\n- {token: " + operatorToken + ", role: operator, rights: all}\n", "unknown field"},
		{"duplicate", "tokens:\n- {token: " + operatorToken + ", role: operator}\n- {token: " + operatorToken + ", role: viewer}\n", "tokens[1]: same token as tokens[0]"},
		{"every problem", "tokens:\n- {token: short, role: operator}\n- {token: " + viewerToken + ", role: boss}\n", `tokens[0]: token must be at least 16 characters; tokens[1]: role must be viewer, operator or approver, got "boss"`},
		{"spaces", "tokens:\n- {token: 'has spaces in the token', role: viewer}\n", "must not hold spaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "tokens.yaml")
			require.NoError(t, os.WriteFile(file, []byte(tc.doc), 0o600))
			tokens, err := LoadTokens(file)
			if tc.want == "" {
				require.NoError(t, err)
				require.Equal(t, []Token{{Token: operatorToken, Role: RoleOperator, Name: "alice"}, {Token: viewerToken, Role: RoleViewer, Name: "tokens[1]"}}, tokens)
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, file, "the error names the file")
			require.NotContains(t, err.Error(), operatorToken, "no token in the error")
		})
	}
	_, err := LoadTokens(filepath.Join(t.TempDir(), "missing.yaml"))
	require.ErrorContains(t, err, "console tokens file")
}

func TestCallAppearsInTheTailAndOnItsPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	con, srv := e.serve(t, testTokens)

	// A live tail, filtered on the tool, before the call is made.
	req, err := http.NewRequestWithContext(ctxT(t), "GET", srv.URL+"/events/calls?tool=steps", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	call := client.Call{CallID: client.NewID(), BatchID: "batch-1", Tool: "steps", SessionID: "s", Args: json.RawMessage(`{}`)}
	require.NoError(t, e.client.Submit(ctxT(t), &call))
	other := client.Call{CallID: client.NewID(), Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"x"}`)}
	require.NoError(t, e.client.Submit(ctxT(t), &other))
	r, err := e.client.Await(ctxT(t), call.BatchID, call.CallID)
	require.NoError(t, err)
	require.True(t, r.OK, r.Error)

	sc := bufio.NewScanner(resp.Body)
	var event []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" && len(event) > 0 {
			break
		}
		event = append(event, line)
	}
	require.Equal(t, "event: result", event[0])
	require.Contains(t, strings.Join(event, "\n"), `data-call="`+call.CallID+`"`, "the filtered tail sends the steps call")
	require.NotContains(t, strings.Join(event, "\n"), other.CallID)

	eventually(t, 10*time.Second, "the feed to see both results", func() bool { return con.feed.count() >= 2 })
	code, body := do(t, "GET", srv.URL+"/calls?tool=steps", viewerToken)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `data-call="`+call.CallID+`"`)
	require.NotContains(t, body, `data-call="`+other.CallID+`"`, "filtered on the tool")
	code, body = do(t, "GET", srv.URL+"/calls?batch=batch-1&code=ok", viewerToken)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `data-call="`+call.CallID+`"`)

	eventually(t, 10*time.Second, "the audit record", func() bool { _, ok := con.feed.audit(call.CallID); return ok })
	code, body = do(t, "GET", srv.URL+"/calls/"+call.CallID, viewerToken)
	require.Equal(t, http.StatusOK, code, body)
	dash := body[strings.Index(body, `id="dashboard-events"`):]
	require.Contains(t, dash[:strings.Index(dash, "</ol>")], "halfway there", "dashboard events shown apart")
	require.Contains(t, body, `data-audience="internal"`)
	require.Contains(t, body, "internal detail")
	require.Contains(t, body, `<pre id="result-value">done</pre>`)
	require.Regexp(t, `id="args-hash">[0-9a-f]{64}<`, body)
	require.Contains(t, body, "decision <strong>allowed</strong> by console-worker")

	// Search by call id and by batch id.
	code, body = do(t, "GET", srv.URL+"/search?q="+call.CallID, viewerToken)
	require.Equal(t, http.StatusSeeOther, code, body)
	code, body = do(t, "GET", srv.URL+"/search?q=batch-1", viewerToken)
	require.Equal(t, http.StatusSeeOther, code, body)
	code, body = do(t, "GET", srv.URL+"/batches/batch-1", viewerToken)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Batch batch-1")
	require.Contains(t, body, `data-call="`+call.CallID+`"`)
	code, _ = do(t, "GET", srv.URL+"/search?q=a.b", viewerToken)
	require.Equal(t, http.StatusBadRequest, code)

	// The pool view counts it.
	code, body = do(t, "GET", srv.URL+"/", viewerToken)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `data-tool="steps"`)
	require.Contains(t, body, `aria-label="steps calls per second, last 60 seconds"`)
}

var explanationRE = regexp.MustCompile(`data-personality="([^"]+)" data-tool="([^"]+)" data-explanation="([^"]+)"`)

func TestExplainPageMatchesExplain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, testTokens)
	code, body := do(t, "GET", srv.URL+"/explain?a=default&b=reader", viewerToken)
	require.Equal(t, http.StatusOK, code, body)
	got := map[string]map[string]explain.Explanation{}
	for _, m := range explanationRE.FindAllStringSubmatch(body, -1) {
		var ex explain.Explanation
		require.NoError(t, json.Unmarshal([]byte(html.UnescapeString(m[3])), &ex))
		require.Equal(t, m[2], ex.Tool)
		if got[m[1]] == nil {
			got[m[1]] = map[string]explain.Explanation{}
		}
		got[m[1]][m[2]] = ex
	}
	entries, err := e.client.Tools(ctxT(t))
	require.NoError(t, err)
	for _, id := range []string{"default", "reader"} {
		doc, err := e.client.Personality(ctxT(t), id)
		require.NoError(t, err)
		p, err := explain.Parse(doc, id)
		require.NoError(t, err)
		require.Len(t, got[id], len(entries), "personality %s: one verdict per tool", id)
		for _, en := range entries {
			tl, err := client.CatalogTool(en)
			require.NoError(t, err)
			require.Equal(t, explain.Tool(tl, en.Name, p), got[id][en.Name], "%s / %s", id, en.Name)
		}
	}
	require.True(t, got["default"]["echo"].Allowed)
	require.False(t, got["reader"]["echo"].Allowed)
	require.Equal(t, protocol.DecisionToolset, got["reader"]["echo"].Gate)

	code, body = do(t, "GET", srv.URL+"/explain?a=nobody", viewerToken)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "nobody:")
}

// deadLetter stores a dead letter of callID as a worker writes one.
func deadLetter(t *testing.T, conn *bus.Conn, callID string) {
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

func TestDeadLettersRedriveAndPurge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, testTokens)
	deadLetter(t, e.conn, "dl-1")
	deadLetter(t, e.conn, "dl-2")

	code, body := do(t, "GET", srv.URL+"/dlq", viewerToken)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<tr data-call="dl-1">`)
	require.Contains(t, body, "secrets backend unavailable")
	code, body = do(t, "GET", srv.URL+"/dlq/dl-1", viewerToken)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Capstan-Dead-Reason")
	require.Contains(t, body, "&#34;text&#34;: &#34;again&#34;")
	code, body = do(t, "GET", srv.URL+"/calls/dl-1", viewerToken)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<a id="trace" href="http://jaeger.test/trace/0af7651916cd43dd8448eb211c80319c"`)

	code, body = do(t, "POST", srv.URL+"/dlq/dl-1/redrive", viewerToken)
	require.Equal(t, http.StatusForbidden, code, body)
	code, body = do(t, "POST", srv.URL+"/dlq/dl-1/redrive", operatorToken)
	require.Equal(t, http.StatusSeeOther, code, body) // a plain form post is sent back
	r, err := e.client.Await(ctxT(t), "", "dl-1")
	require.NoError(t, err)
	require.True(t, r.OK, "the redriven call ran again: %s", r.Error)
	require.Equal(t, "again", r.Value)

	code, _ = do(t, "POST", srv.URL+"/dlq/dl-2/purge", viewerToken)
	require.Equal(t, http.StatusForbidden, code)
	req, err := http.NewRequestWithContext(ctxT(t), "POST", srv.URL+"/dlq/dl-2/purge", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	req.Header.Set("HX-Request", "true")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	letters, err := e.client.DeadLetters(ctxT(t))
	require.NoError(t, err)
	require.Empty(t, letters, "redriven and purged")
}

func TestCancelAsOperator(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, testTokens)
	cancelled := make(chan struct{})
	sub, err := e.conn.Subscribe("capstan.cancel.default.c-9", "", func(string, bus.Header, []byte) { close(cancelled) })
	require.NoError(t, err)
	defer func() { _ = sub.Stop() }()
	// The server knows of the subscription before the cancel is posted.
	require.NoError(t, e.conn.Flush(ctxT(t)))
	code, body := do(t, "POST", srv.URL+"/calls/c-9/cancel", operatorToken)
	require.Equal(t, http.StatusSeeOther, code, body)
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("no cancel request published")
	}

	req, err := http.NewRequestWithContext(ctxT(t), "POST", srv.URL+"/calls/c-9/cancel", strings.NewReader("personality=a.b"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(b), "cancel c-9: personality: ")
}

func TestPoolEventsStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, testTokens)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events/pool", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	require.True(t, sc.Scan())
	require.Equal(t, "event: pool", sc.Text())
	var data strings.Builder
	for sc.Scan() && sc.Text() != "" {
		data.WriteString(strings.TrimPrefix(sc.Text(), "data: "))
	}
	require.Contains(t, data.String(), `data-worker="console-worker"`)
}

func TestCallPageFollowsARunningCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, testTokens)
	id := client.NewID()
	code, body := do(t, "GET", srv.URL+"/calls/"+id, viewerToken)
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, `sse-connect="/events/calls/`+id+`"`, "a call without a result is followed live")

	req, err := http.NewRequestWithContext(ctxT(t), "GET", srv.URL+"/events/calls/"+id, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	call := client.Call{CallID: id, Tool: "steps", SessionID: "s", Args: json.RawMessage(`{}`)}
	require.NoError(t, e.client.Submit(ctxT(t), &call))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `<pre id="result-value">done</pre>`) {
			return
		}
	}
	t.Fatalf("the call's result never came over the event stream: %v", sc.Err())
}

func TestPersonalityPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, testTokens)
	code, body := do(t, "GET", srv.URL+"/personalities/reader", viewerToken)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<pre id="document">id: reader`)
	require.Contains(t, body, "Only operators change personalities.")
	code, body = do(t, "GET", srv.URL+"/personalities/reader", operatorToken)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<textarea id="document" name="document"`)
	code, _ = do(t, "GET", srv.URL+"/personalities/nobody", viewerToken)
	require.Equal(t, http.StatusNotFound, code)

	put := func(token, doc string) (int, string) {
		req, err := http.NewRequestWithContext(ctxT(t), "POST", srv.URL+"/personalities", strings.NewReader(url.Values{"document": {doc}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("HX-Request", "true")
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, token, doc string
		want             int
		body             string
	}{
		{"viewer", viewerToken, "id: writer\ntoolset: [echo]\n", http.StatusForbidden, "put personality needs the operator role"},
		{"yes read as a boolean", operatorToken, "id: writer\nprocess: {allow: [yes]}\n", http.StatusUnprocessableEntity,
			"process.allow[0]: must be a string, got the boolean true: YAML 1.1 reads yes, no, on and off"},
		{"not a document", operatorToken, "- a\n", http.StatusUnprocessableEntity, "document must be a mapping of keys"},
		{"stored", operatorToken, "id: writer\ntoolset: [echo]\n", http.StatusOK, "Stored personality writer."},
	} {
		code, body := put(tc.token, tc.doc)
		require.Equal(t, tc.want, code, "%s: %s", tc.name, body)
		require.Contains(t, body, tc.body, tc.name)
	}
	doc, err := e.client.Personality(ctxT(t), "writer")
	require.NoError(t, err)
	require.Equal(t, "id: writer\ntoolset: [echo]\n", string(doc))
}
