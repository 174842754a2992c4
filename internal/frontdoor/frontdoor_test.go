package frontdoor_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/frontdoor"
	"github.com/capstanhq/capstan/internal/frontdoor/frontdoortest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
)

// TestToolsListIsWhatToolsForShows checks that a session lists exactly the
// tools client.ToolsFor (dispatcher tools --personality) gives its
// personality, with their descriptions and input schemas, over stdio and
// over HTTP.
func TestToolsListIsWhatToolsForShows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	endpoint := e.httpFront()
	sessions := map[string]map[string]*mcp.ClientSession{
		"stdio": {frontdoortest.Alpha: e.stdio(frontdoortest.Alpha, nil), frontdoortest.Beta: e.stdio(frontdoortest.Beta, nil)},
		"http": {frontdoortest.Alpha: e.httpSession(endpoint, alphaToken, nil),
			frontdoortest.Beta: e.httpSession(endpoint, betaToken, nil)},
	}
	for transport, byPersonality := range sessions {
		for id, cs := range byPersonality {
			want, err := e.c.ToolsFor(ctxT(t), id)
			require.NoError(t, err)
			res, err := cs.ListTools(ctxT(t), nil)
			require.NoError(t, err)
			require.Len(t, res.Tools, len(want), "%s %s", transport, id)
			for i, tl := range res.Tools {
				require.Equal(t, want[i].Name, tl.Name)
				require.Equal(t, want[i].Description, tl.Description)
				schema, err := json.Marshal(tl.InputSchema)
				require.NoError(t, err)
				require.JSONEq(t, string(want[i].Schema), string(schema), "%s %s %s", transport, id, tl.Name)
			}
		}
	}
	require.Equal(t, []string{"echo", frontdoortest.WhoAmI}, toolNames(t, sessions["http"][frontdoortest.Alpha]))
	require.Equal(t, []string{frontdoortest.BetaOnly, "echo"}, toolNames(t, sessions["http"][frontdoortest.Beta]))
}

// TestCallAnswersFromTheResultsStream checks the three shapes of a result:
// ok text, ok with structured content, and a failure as isError.
func TestCallAnswersFromTheResultsStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	cs := e.stdio(frontdoortest.Alpha, nil)

	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	require.Equal(t, "hello", text(t, res))
	require.Nil(t, res.StructuredContent)
	callID, _ := res.Meta[frontdoor.MetaCallID].(string)
	stored, found, err := mustView(t, e.c, frontdoortest.Alpha).Result(ctxT(t), callID)
	require.NoError(t, err)
	require.True(t, found, "the result is in the results stream under the session's personality")
	require.Equal(t, "hello", stored.Value)

	res, err = cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: frontdoortest.WhoAmI})
	require.NoError(t, err)
	require.False(t, res.IsError)
	require.Equal(t, frontdoortest.WhoAmI, text(t, res))
	structured, ok := res.StructuredContent.(map[string]any)
	require.True(t, ok, "structuredContent: %#v", res.StructuredContent)
	require.Equal(t, "mcp", structured["platform"])
	require.Equal(t, frontdoortest.Alpha, structured["personality_id"])

	res, err = cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"wrong": 1}})
	require.NoError(t, err, "a failed call is a result, not a protocol error")
	require.True(t, res.IsError)
	require.True(t, strings.HasPrefix(text(t, res), "input_invalid: "), text(t, res))
	require.Equal(t, "input_invalid", res.Meta[frontdoor.MetaCode])
}

// TestACutResultNamesItsBlob: a value longer than the budget reaches the
// MCP client cut, with a last line naming the blob that holds it whole
// (envelope.Text), and the blob holds it whole.
func TestACutResultNamesItsBlob(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	cs := e.stdio(frontdoortest.Alpha, nil)
	long := strings.Repeat("0123456789", 20_000) // the budget is 80,000 characters

	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": long}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	callID, _ := res.Meta[frontdoor.MetaCallID].(string)
	got := text(t, res)
	body, note, ok := strings.Cut(got, "\n[truncated — 200000 chars total]\n")
	require.True(t, ok, "a cut value: %q", got[max(len(got)-300, 0):])
	require.True(t, strings.HasPrefix(long, body))
	require.Equal(t, "[full output (200000 bytes) stored as blob capstan_blobs/alpha/"+callID+"]", note)

	stored, found, err := mustView(t, e.c, frontdoortest.Alpha).Result(ctxT(t), callID)
	require.NoError(t, err)
	require.True(t, found)
	rd, err := mustView(t, e.c, frontdoortest.Alpha).Blob(ctxT(t), stored)
	require.NoError(t, err)
	whole, err := io.ReadAll(rd)
	require.NoError(t, err)
	require.NoError(t, rd.Close())
	require.True(t, string(whole) == long, "the blob holds the whole value")
}

// TestCallCarriesSessionRequestIDAndTraceContext checks the fields of the
// published call and its traceparent header.
func TestCallCarriesSessionRequestIDAndTraceContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{CallTimeout: 7 * time.Second})
	rec := e.recordCalls()
	endpoint := e.httpFront()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	// A fresh map per call: the SDK client adds its own keys to the map it is given.
	meta := func() mcp.Meta {
		return mcp.Meta{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01", "tracestate": "vendor=x"}
	}

	for _, tc := range []struct {
		name      string
		cs        *mcp.ClientSession
		keyPrefix string
		agent     string
	}{
		{"stdio", e.stdio(frontdoortest.Alpha, nil), "mcp:stdio:", ""},
		{"http", e.httpSession(endpoint, alphaToken, nil), "mcp:agent-a:", "agent-a"},
	} {
		res, err := tc.cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: frontdoortest.WhoAmI, Meta: meta()})
		require.NoError(t, err, tc.name)
		require.False(t, res.IsError, tc.name)
		callID := res.Meta[frontdoor.MetaCallID].(string)
		var pub publishedCall
		require.Eventually(t, func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, m := range rec.msgs {
				if m.call.CallID == callID {
					pub = m
					return true
				}
			}
			return false
		}, 10*time.Second, 10*time.Millisecond)
		c := pub.call
		require.Equal(t, frontdoortest.Alpha, c.PersonalityID, tc.name)
		require.Equal(t, frontdoor.Platform, c.Platform, tc.name)
		require.Equal(t, int64(7000), c.TimeoutMS, tc.name)
		require.Equal(t, tc.agent, c.AgentID, tc.name)
		if tc.name == "http" {
			require.Equal(t, tc.cs.ID(), c.SessionID, "session_id is the MCP session id")
		} else {
			require.True(t, strings.HasPrefix(c.SessionID, "stdio-"), c.SessionID)
		}
		require.Regexp(t, `^`+tc.keyPrefix+`[0-9]+$`, c.SessionKey, "session_key records the JSON-RPC id")
		sc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), pub.header))
		require.True(t, sc.IsValid(), "%s: traceparent header %v", tc.name, pub.header)
		require.Equal(t, traceID, sc.TraceID().String(), "the call continues the MCP client's trace")
		require.Equal(t, "vendor=x", sc.TraceState().String())
	}
	// Two calls of one stdio session share its session id.
	cs := e.stdio(frontdoortest.Beta, nil)
	for range 2 {
		_, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
		require.NoError(t, err)
	}
	var ids []string
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		ids = ids[:0]
		for _, m := range rec.msgs {
			if m.call.PersonalityID == frontdoortest.Beta {
				ids = append(ids, m.call.SessionID)
			}
		}
		return len(ids) == 2
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, ids[0], ids[1])
}

// TestAPersonalityNeverSeesOrCallsAnothersTool checks that a session of
// alpha neither lists nor calls beta_only, over stdio and HTTP, and that no
// such call reaches the pool.
func TestAPersonalityNeverSeesOrCallsAnothersTool(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	rec := e.recordCalls()
	endpoint := e.httpFront()
	for name, cs := range map[string]*mcp.ClientSession{
		"stdio": e.stdio(frontdoortest.Alpha, nil),
		"http":  e.httpSession(endpoint, alphaToken, nil),
	} {
		require.NotContains(t, toolNames(t, cs), frontdoortest.BetaOnly, name)
		res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: frontdoortest.BetaOnly})
		if err == nil {
			require.True(t, res.IsError, name)
			require.NotContains(t, text(t, res), frontdoortest.BetaSecret)
		}
	}
	// beta's token does call it.
	res, err := e.httpSession(endpoint, betaToken, nil).CallTool(ctxT(t), &mcp.CallToolParams{Name: frontdoortest.BetaOnly})
	require.NoError(t, err)
	require.Equal(t, frontdoortest.BetaSecret, text(t, res))
	require.Equal(t, frontdoortest.Beta, rec.wait(t, frontdoortest.BetaOnly).call.PersonalityID)
	require.Equal(t, 1, rec.count(frontdoortest.BetaOnly), "alpha's attempts never reached the pool")
}

// TestHTTPWithoutAKnownTokenIs401 checks that a request without a bearer
// token, or with an unknown one, is refused before any MCP code runs.
func TestHTTPWithoutAKnownTokenIs401(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	endpoint := e.httpFront()
	for _, auth := range []string{"", "Bearer nope-nope-nope-nope-nope", "Bearer " + alphaToken + "x", "Basic " + alphaToken} {
		for _, body := range []string{
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
			`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`,
		} {
			req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, endpoint, strings.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "auth %q", auth)
			require.NotContains(t, string(b), "echo")
			require.Empty(t, resp.Header.Get("Mcp-Session-Id"))
		}
	}
	// The Go SDK client without a token cannot connect at all.
	_, err := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "1"}, nil).
		Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	require.Error(t, err)
}

// TestASessionIsBoundToItsToken checks that beta's token cannot use a
// session alpha's token opened.
func TestASessionIsBoundToItsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	endpoint := e.httpFront()
	alpha := e.httpSession(endpoint, alphaToken, nil)
	body := `{"jsonrpc":"2.0","id":99,"method":"tools/list","params":{}}`
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodPost, endpoint, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", alpha.ID())
	req.Header.Set("Mcp-Protocol-Version", alpha.InitializeResult().ProtocolVersion)
	req.Header.Set("Authorization", "Bearer "+betaToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, string(b))
	require.NotContains(t, string(b), frontdoortest.WhoAmI)
}

// TestUserProgressBecomesProgressNotifications checks that user-audience
// events reach a client that sent a progressToken, in order, and internal
// ones never do.
func TestUserProgressBecomesProgressNotifications(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	endpoint := e.httpFront()
	var mu sync.Mutex
	got := map[string][]*mcp.ProgressNotificationParams{}
	opts := func(name string) *mcp.ClientOptions {
		return &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			got[name] = append(got[name], req.Params)
			mu.Unlock()
		}}
	}
	args := map[string]any{"text": "done", "sleep_ms": 300, "progress": []any{
		map[string]any{"message": "first", "audience": "user"},
		map[string]any{"message": "internal only"},
		map[string]any{"message": "second", "audience": "user", "percent": 50},
	}}
	for name, cs := range map[string]*mcp.ClientSession{
		"stdio": e.stdio(frontdoortest.Alpha, opts("stdio")),
		"http":  e.httpSession(endpoint, alphaToken, opts("http")),
	} {
		res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: args, Meta: mcp.Meta{"progressToken": "tok-" + name}})
		require.NoError(t, err)
		require.Equal(t, "done", text(t, res))
		mu.Lock()
		ps := got[name]
		mu.Unlock()
		require.Len(t, ps, 2, name)
		require.Equal(t, "first", ps[0].Message)
		require.Equal(t, "second", ps[1].Message)
		require.Equal(t, "tok-"+name, ps[0].ProgressToken)
		require.Equal(t, float64(1), ps[0].Progress, "without a percentage: the event's seq")
		require.Zero(t, ps[0].Total)
		require.Equal(t, float64(50), ps[1].Progress, "with a percentage: percent of 100")
		require.Equal(t, float64(100), ps[1].Total)
	}
	// Without a progressToken nothing is sent.
	cs := e.stdio(frontdoortest.Alpha, opts("none"))
	_, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: args})
	require.NoError(t, err)
	mu.Lock()
	require.Empty(t, got["none"])
	mu.Unlock()
}

// TestMCPCancellationCancelsTheCall checks that a client cancelling its
// tools/call cancels the Capstan call.
func TestMCPCancellationCancelsTheCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	rec := e.recordCalls()
	endpoint := e.httpFront()
	started := map[string]chan struct{}{"stdio": make(chan struct{}, 1), "http": make(chan struct{}, 1)}
	opts := func(name string) *mcp.ClientOptions {
		return &mcp.ClientOptions{ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			started[name] <- struct{}{}
		}}
	}
	for name, cs := range map[string]*mcp.ClientSession{
		"stdio": e.stdio(frontdoortest.Alpha, opts("stdio")),
		"http":  e.httpSession(endpoint, alphaToken, opts("http")),
	} {
		text := "cancel me " + name
		ctx, cancel := context.WithCancel(ctxT(t))
		errc := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Meta: mcp.Meta{"progressToken": name},
				Arguments: map[string]any{"text": text, "sleep_ms": 60000, "progress": []any{map[string]any{"message": "started", "audience": "user"}}}})
			errc <- err
		}()
		select {
		case <-started[name]: // the worker runs the call
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the call did not start", name)
		}
		cancel()
		require.ErrorIs(t, <-errc, context.Canceled)
		var callID string
		require.Eventually(t, func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, m := range rec.msgs {
				if strings.Contains(string(m.call.Args), text) {
					callID = m.call.CallID
				}
			}
			return callID != ""
		}, 10*time.Second, 10*time.Millisecond)
		r, err := mustView(t, e.c, frontdoortest.Alpha).Await(ctxT(t), "", callID)
		require.NoError(t, err)
		require.False(t, r.OK, name)
		require.Equal(t, protocol.CodeExecutionFailed, r.Code)
		require.True(t, strings.HasPrefix(r.Error, "cancelled: "+frontdoor.CancelReason), r.Error)
	}
}

// TestACallOutlivesADroppedHTTPConnection checks that cutting the HTTP
// connection of a running tools/call does not cancel the Capstan call: its
// result is stored.
func TestACallOutlivesADroppedHTTPConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	rec := e.recordCalls()
	endpoint := e.httpFront()
	var mu sync.Mutex
	var conns []net.Conn
	hc := &http.Client{Transport: bearer{token: alphaToken, next: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
			return c, err
		},
	}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "1"}, nil).
		Connect(ctxT(t), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}, nil)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "survivor", "sleep_ms": 1500}})
		errc <- err
	}()
	callID := rec.wait(t, "echo").call.CallID
	mu.Lock()
	for _, c := range conns {
		_ = c.Close()
	}
	mu.Unlock()
	_ = cs.Close()
	<-errc
	r, err := mustView(t, e.c, frontdoortest.Alpha).Await(ctxT(t), "", callID)
	require.NoError(t, err)
	require.True(t, r.OK, "%s: %s", r.Code, r.Error)
	require.Equal(t, "survivor", r.Value)
}

// TestACallOutlivesADroppedStdioClient checks the same for a stdio client
// whose pipes are cut (a client process that died), and for the front
// door's own shutdown.
func TestACallOutlivesADroppedStdioClientAndShutdown(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	rec := e.recordCalls()
	cs, cut := e.stdioWithPipes(frontdoortest.Alpha, nil)
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "dropped", "sleep_ms": 1000}})
		errc <- err
	}()
	dropped := rec.wait(t, "echo").call.CallID
	cut()
	require.Error(t, <-errc)

	cs = e.stdio(frontdoortest.Beta, nil)
	go func() {
		_, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: frontdoortest.BetaOnly})
		errc <- err
	}()
	require.NoError(t, <-errc)
	go func() {
		_, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "shut down", "sleep_ms": 1000}})
		errc <- err
	}()
	var shutDown string
	require.Eventually(t, func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, m := range rec.msgs {
			if strings.Contains(string(m.call.Args), "shut down") {
				shutDown = m.call.CallID
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	e.front.Close()
	require.Error(t, <-errc)

	for id, personality := range map[string]string{dropped: frontdoortest.Alpha, shutDown: frontdoortest.Beta} {
		r, err := mustView(t, e.c, personality).Await(ctxT(t), "", id)
		require.NoError(t, err)
		require.True(t, r.OK, "%s: %s", r.Code, r.Error)
	}
}

// TestToolListFollowsTheCatalog checks that a tool appearing in and
// leaving the catalog is listed and unlisted, with tools/list_changed, over
// stdio and over HTTP (where the notification travels on the session's GET
// stream).
func TestToolListFollowsTheCatalog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	endpoint := e.httpFront()
	changed := map[string]chan struct{}{"stdio": make(chan struct{}, 16), "http": make(chan struct{}, 16)}
	opts := func(name string) *mcp.ClientOptions {
		return &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			changed[name] <- struct{}{}
		}}
	}
	sessions := map[string]*mcp.ClientSession{
		"stdio": e.stdio(frontdoortest.Beta, opts("stdio")),
		"http":  e.httpSession(endpoint, betaToken, opts("http")),
	}
	for _, cs := range sessions {
		require.NotContains(t, toolNames(t, cs), "late")
	}
	// Beta's toolset does not name "late": store a personality that does.
	kv, err := e.pool.Conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	_, err = kv.Put(ctxT(t), frontdoortest.Beta, []byte("id: beta\ntoolset: [echo, beta_only, late]\n"))
	require.NoError(t, err)
	tools, err := e.pool.Conn.KV(ctxT(t), bus.Tools)
	require.NoError(t, err)
	entry, err := json.Marshal(client.CatalogEntry{Name: "late", Description: "A late tool.", Pool: "default", Toolset: "test",
		Schema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)})
	require.NoError(t, err)
	_, err = tools.Put(ctxT(t), "late", entry)
	require.NoError(t, err)
	for name, cs := range sessions {
		waitChanged(t, changed[name])
		require.Contains(t, toolNames(t, cs), "late", name)
	}

	require.NoError(t, tools.Delete(ctxT(t), "late"))
	for name, cs := range sessions {
		waitChanged(t, changed[name])
		require.NotContains(t, toolNames(t, cs), "late", name)
	}
}

func waitChanged(t *testing.T, changed <-chan struct{}) {
	t.Helper()
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed in 10s")
	}
}

// TestUnknownPersonalityIsRefusedAtStart checks both transports.
func TestUnknownPersonalityIsRefusedAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	err := e.front.ServeStdio(ctxT(t), "nobody", nil, nil)
	require.ErrorIs(t, err, client.ErrUnknownPersonality)
	tokens, problems := frontdoor.ParseTokens([]byte("tokens: [{token: 0123456789abcdef, personality: nobody}]"))
	require.Empty(t, problems)
	_, err = e.front.Handler(ctxT(t), tokens)
	require.ErrorIs(t, err, client.ErrUnknownPersonality)
	require.Contains(t, err.Error(), "nobody")
}

// TestNoResultBeforeTheWaitEndsIsAnError checks the answer of a call whose
// result does not come in time.
func TestNoResultBeforeTheWaitEndsIsAnError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{Wait: 300 * time.Millisecond})
	cs := e.stdio(frontdoortest.Alpha, nil)
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "slow", "sleep_ms": 3000}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Equal(t, "execution_failed: "+client.ResultMissing, text(t, res))
	require.NotEmpty(t, res.Meta[frontdoor.MetaCallID], "the call id lets the caller fetch the result later")
}

func mustView(t *testing.T, c *client.Client, id string) *client.Client {
	t.Helper()
	v, err := c.WithPersonality(id)
	require.NoError(t, err)
	return v
}
