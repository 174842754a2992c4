package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/worker"
)

// mcpSendToValue is the token of the hosted url server of these tests,
// providers/remote/token in the env backend.
const mcpSendToValue = "mcp-s3nd-to-4d2a9e71"

// recordingMCP is a streamable HTTP MCP server of the test's own on
// loopback, whose tool whoami echoes the Authorization header it was sent.
// It records the Authorization header of every HTTP request and how many
// requests carried a tools/call.
type recordingMCP struct {
	url, port string

	mu    sync.Mutex
	auth  []string
	calls int
}

func startRecordingMCP(t *testing.T) *recordingMCP {
	t.Helper()
	rm := &recordingMCP{}
	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "Says which token it was sent."},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "you sent " + req.Extra.Header.Get("Authorization")}}}, nil, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rm.mu.Lock()
		rm.auth = append(rm.auth, r.Header.Get("Authorization"))
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			rm.calls++
		}
		rm.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	rm.url = ts.URL + "/mcp"
	_, port, err := net.SplitHostPort(ts.Listener.Addr().String())
	require.NoError(t, err)
	rm.port = port
	return rm
}

// seen returns the Authorization headers received so far and the number
// of tools/call requests.
func (rm *recordingMCP) seen() ([]string, int) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	return append([]string(nil), rm.auth...), rm.calls
}

// mcpSendToPersonality may call the tools of server remote; its send_to
// binds providers/remote/* to sendTo (no send_to when sendTo is "").
func mcpSendToPersonality(id, sendTo string) string {
	doc := fmt.Sprintf(`id: %s
mcp_servers: [remote]
safety:
  network:
    allow: ["127.0.0.1:*"]
    allow_private_urls: true
secrets:
  allow: ["providers/*"]
`, id)
	if sendTo != "" {
		doc += fmt.Sprintf("  send_to:\n    \"providers/remote/*\": [%q]\n", sendTo)
	}
	return doc
}

// TestHostedSecretHeadersFollowSendTo: a hosted url server's
// secret_headers are sent only for a personality whose secrets.send_to
// binds them to the server's host (security.md section 4). The bound
// personality's call reaches the server with the header, and the value
// does not come back; a personality without the binding, or with one to
// another port of the same address, is refused with SECRET_DESTINATION
// before any tools/call reaches the server.
func TestHostedSecretHeadersFollowSendTo(t *testing.T) {
	t.Parallel()
	rm := startRecordingMCP(t)
	dir := t.TempDir()
	def := fmt.Sprintf(`name: remote
url: %s
secret_headers:
  Authorization: "Bearer {{providers/remote/token}}"
capabilities:
  network: ['127.0.0.1:%s']
  secrets: ['providers/remote/token']
`, rm.url, rm.port)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "remote.yaml"), []byte(def), 0o600))

	e := newEnv(t)
	e.putPersonality("bound", mcpSendToPersonality("bound", "127.0.0.1:"+rm.port))
	e.putPersonality("unbound", mcpSendToPersonality("unbound", ""))
	e.putPersonality("other-port", mcpSendToPersonality("other-port", "127.0.0.1:1"))
	env := map[string]string{"CAPSTAN_SECRET_PROVIDERS_REMOTE_TOKEN": mcpSendToValue}
	e.start(worker.WithPrivateMCPURLs(worker.Config{MCPServersDir: dir, Getenv: func(k string) string { return env[k] }}))

	const toolName = "mcp__remote__whoami"
	run := func(id, personality string) protocol.Result {
		t.Helper()
		e.call(protocol.Call{CallID: id, Tool: toolName, PersonalityID: personality})
		r := e.result(id, id)
		_, rec := auditOf(t, e, toolName, id)
		require.NotContains(t, rec, mcpSendToValue, "no secret in the audit record")
		require.NotContains(t, r.Value+r.Error+string(r.Structured), mcpSendToValue, "no secret in the result")
		return r
	}

	// Bound: the server gets the header, the echo is redacted.
	r := run("bound", "bound")
	require.True(t, r.OK, r.Error)
	require.Contains(t, r.Value, "you sent Bearer [REDACTED]")
	auth, calls := rm.seen()
	require.Equal(t, 1, calls)
	require.NotEmpty(t, auth)
	for _, a := range auth {
		require.Equal(t, "Bearer "+mcpSendToValue, a, "every request of the connection carries the header")
	}

	// Not bound (no send_to, or send_to to another port): refused before
	// the call is sent.
	for _, p := range []string{"unbound", "other-port"} {
		r = run("refused-"+p, p)
		require.False(t, r.OK, p)
		require.Equal(t, protocol.CodeExecutionFailed, r.Code, p)
		require.Equal(t, "SECRET_DESTINATION: this secret may not be sent to 127.0.0.1:"+rm.port, r.Error, p)
		rec, _ := auditOf(t, e, toolName, "refused-"+p)
		require.Equal(t, []string{"SECRET_DESTINATION"}, rec.Denials, "the denial is audited by code")
		_, calls = rm.seen()
		require.Equal(t, 1, calls, "%s: no tools/call reached the server", p)
	}
}
