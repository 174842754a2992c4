package frontdoor_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/frontdoor"
	"github.com/capstanhq/capstan/internal/frontdoor/frontdoortest"
	"github.com/capstanhq/capstan/internal/protocol"
)

// Tokens of the tokens file of httpFront.
const (
	alphaToken         = "alpha-token-0123456789abcdef"
	betaToken          = "beta-token-0123456789abcdef"
	selfApprovalToken  = "self-approval-token-0123456789abcdef"
	othersApproveToken = "others-approve-token-0123456789abcdef"
)

// Names of the tokens of httpFront for the approval personalities.
const (
	selfApprovalName  = "agent-s"
	othersApproveName = "agent-o"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// env is a pool, a Capstan client and a front door on it.
type env struct {
	t     *testing.T
	pool  *frontdoortest.Pool
	c     *client.Client
	front *frontdoor.Server
}

func newEnv(t *testing.T, cfg frontdoor.Config) *env {
	t.Helper()
	pool := frontdoortest.Start(t)
	c, err := client.New(ctxT(t), client.Config{NATSURL: pool.URL, NATSCreds: pool.Creds, Name: t.Name()})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cfg.Client = c
	front, err := frontdoor.New(cfg)
	require.NoError(t, err)
	t.Cleanup(front.Close)
	return &env{t: t, pool: pool, c: c, front: front}
}

// stdio connects a Go SDK client to a stdio session of personality over
// pipes; the session ends when the test does.
func (e *env) stdio(personality string, opts *mcp.ClientOptions) *mcp.ClientSession {
	e.t.Helper()
	cs, _ := e.stdioWithPipes(personality, opts)
	return cs
}

// stdioWithPipes is stdio, also returning a function that cuts the pipes
// under the session, as a client process that dies would.
func (e *env) stdioWithPipes(personality string, opts *mcp.ClientOptions) (*mcp.ClientSession, func()) {
	e.t.Helper()
	clientIn, serverOut := io.Pipe()
	serverIn, clientOut := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.front.ServeStdio(ctx, personality, serverIn, serverOut) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "1"}, opts).
		Connect(ctxT(e.t), &mcp.IOTransport{Reader: clientIn, Writer: clientOut}, nil)
	require.NoError(e.t, err)
	e.t.Cleanup(func() {
		_ = cs.Close()
		cancel()
		<-done
	})
	return cs, func() {
		_ = clientOut.Close()
		_ = serverOut.Close()
	}
}

// httpFront serves the front door over HTTP with a tokens file giving
// alphaToken to alpha, betaToken to beta, selfApprovalToken to
// self-approval and othersApproveToken to others-approve; it returns the
// MCP endpoint.
func (e *env) httpFront() string {
	e.t.Helper()
	file := filepath.Join(e.t.TempDir(), "tokens.yaml")
	require.NoError(e.t, os.WriteFile(file, []byte("tokens:\n"+
		"  - {token: "+alphaToken+", personality: alpha, name: agent-a}\n"+
		"  - {token: "+betaToken+", personality: beta, name: agent-b}\n"+
		"  - {token: "+selfApprovalToken+", personality: "+frontdoortest.SelfApproval+", name: "+selfApprovalName+"}\n"+
		"  - {token: "+othersApproveToken+", personality: "+frontdoortest.OthersApprove+", name: "+othersApproveName+"}\n"), 0o600))
	tokens, err := frontdoor.LoadTokens(file)
	require.NoError(e.t, err)
	h, err := e.front.Handler(ctxT(e.t), tokens)
	require.NoError(e.t, err)
	srv := httptest.NewServer(h)
	e.t.Cleanup(srv.Close)
	return srv.URL + frontdoor.Path
}

// httpSession connects a Go SDK client to endpoint with a bearer token.
func (e *env) httpSession(endpoint, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	e.t.Helper()
	return e.httpSessionWith(endpoint, &http.Client{Transport: bearer{token: token, next: http.DefaultTransport}}, opts)
}

func (e *env) httpSessionWith(endpoint string, hc *http.Client, opts *mcp.ClientOptions) *mcp.ClientSession {
	e.t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "go-test", Version: "1"}, opts).
		Connect(ctxT(e.t), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// bearer adds an Authorization header to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// toolNames lists the tools of a session.
func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(ctxT(t), nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// text returns the text of a result's one content block.
func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	require.Len(t, res.Content, 1)
	tc, ok := res.Content[0].(*mcp.TextContent)
	require.True(t, ok, "text content, got %T", res.Content[0])
	return tc.Text
}

// calls records every call published to the pool (a core subscription next
// to the workers' consumer), with its headers.
type calls struct {
	mu   sync.Mutex
	msgs []publishedCall
}

type publishedCall struct {
	call   protocol.Call
	header bus.Header
}

func (e *env) recordCalls() *calls {
	e.t.Helper()
	rec := &calls{}
	sub, err := e.pool.Conn.Subscribe("capstan.call.>", "", func(_ string, hdr bus.Header, data []byte) {
		var c protocol.Call
		if json.Unmarshal(data, &c) == nil {
			rec.mu.Lock()
			rec.msgs = append(rec.msgs, publishedCall{call: c, header: hdr})
			rec.mu.Unlock()
		}
	})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = sub.Stop() })
	require.NoError(e.t, e.pool.Conn.Flush(ctxT(e.t)))
	return rec
}

// wait returns the first recorded call of tool, waiting up to 10s.
func (r *calls) wait(t *testing.T, tool string) publishedCall {
	t.Helper()
	var got publishedCall
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, m := range r.msgs {
			if m.call.Tool == tool {
				got = m
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "no call of %s published", tool)
	return got
}

// count returns how many calls of tool were recorded.
func (r *calls) count(tool string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if m.call.Tool == tool {
			n++
		}
	}
	return n
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
