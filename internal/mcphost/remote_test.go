package mcphost

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"

	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/internal/telemetry/telemetrytest"
	"github.com/capstanhq/capstan/tool"
)

// remoteServer is an MCP server of the Go SDK served over streamable HTTP on
// loopback, recording what each call brought.
type remoteServer struct {
	url string

	mu          sync.Mutex
	auth        []string
	traceparent []any
}

func startRemote(t *testing.T) *remoteServer {
	t.Helper()
	rs := &remoteServer{}
	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "Says which token it was sent."},
		func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			rs.mu.Lock()
			defer rs.mu.Unlock()
			auth := req.Extra.Header.Get("Authorization")
			rs.auth = append(rs.auth, auth)
			rs.traceparent = append(rs.traceparent, req.Params.Meta["traceparent"])
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "you sent " + auth}}}, map[string]any{"n": len(rs.auth)}, nil
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(ts.Close)
	rs.url = ts.URL + "/mcp"
	return rs
}

func remoteDef(name, url string) *Definition {
	host := url[len("http://"):]
	host = host[:len(host)-len("/mcp")]
	return &Definition{Name: name, URL: url, Network: []string{host}, Untrusted: true, ProgressAudience: tool.AudienceUser, Timeout: time.Minute}
}

// A url server is reached through the scoped dialer: its loopback address is
// refused like any fetch of a private address, and the server is down with
// the reason.
func TestRemoteServerGetsTheSSRFProtection(t *testing.T) {
	t.Parallel()
	rs := startRemote(t)
	d := remoteDef("remote", rs.url)
	th := startHost(t, Config{}, d)
	st := th.waitState("remote", StateDown)
	_, port, _ := net.SplitHostPort(d.Network[0])
	require.Contains(t, st.Reason, "HOST_NOT_ALLOWED: 127.0.0.1:"+port+" resolves to a private or reserved address")
	require.Equal(t, "http", st.Transport)

	// A name that resolves to loopback is refused after resolution.
	d2 := &Definition{Name: "named", URL: "http://mcp.example.test:" + port + "/mcp", Network: []string{"mcp.example.test:" + port}, Timeout: time.Minute}
	th2 := startHost(t, Config{LookupIP: func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}}, d2)
	st = th2.waitState("named", StateDown)
	require.Contains(t, st.Reason, "HOST_NOT_ALLOWED: mcp.example.test:"+port+" resolves to a private or reserved address")
}

// Over streamable HTTP (private addresses allowed for the test): the secret
// header reaches the server, its value never comes back, the trace context
// travels in params._meta, and the client span follows the MCP conventions.
func TestRemoteServerCall(t *testing.T) {
	t.Parallel()
	rs := startRemote(t)
	const token = "tok-0123456789abcdef"
	d := remoteDef("remote", rs.url)
	d.SecretHeaders = map[string]string{"Authorization": "Bearer {{providers/remote/token}}"}
	d.Secrets = []string{"providers/remote/token"}
	tp, rec := telemetrytest.Tracing(t)
	th := startHost(t, Config{
		AllowPrivateURLs: true, TracerProvider: tp,
		Secrets: secrets.NewEnv("", func(k string) string {
			if k == "CAPSTAN_SECRET_PROVIDERS_REMOTE_TOKEN" {
				return token
			}
			return ""
		}),
	}, d)
	th.waitState("remote", StateUp)

	ctx, parent := tp.Tracer("test").Start(ctxT(t), "execute_tool mcp__remote__whoami")
	res, _, err := th.call(ctx, "mcp__remote__whoami", `{}`)
	parent.End()
	require.NoError(t, err)
	require.True(t, res.OK, "%+v", res)
	require.Equal(t, "you sent Bearer [REDACTED]", res.Value)
	require.Equal(t, map[string]any{"n": float64(1)}, res.Structured)
	rs.mu.Lock()
	require.Equal(t, []string{"Bearer " + token}, rs.auth)
	tpHeader := rs.traceparent[0]
	rs.mu.Unlock()
	require.Equal(t, fmt.Sprintf("00-%s-", parent.SpanContext().TraceID()), tpHeader.(string)[:36], "the call's trace continues in the server")

	var call []attribute.KeyValue
	for _, s := range rec.Ended() {
		if s.Name() == "tools/call whoami" {
			call = s.Attributes()
			require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID())
			require.Equal(t, fmt.Sprintf("00-%s-%s-01", s.SpanContext().TraceID(), s.SpanContext().SpanID()), tpHeader)
		}
	}
	require.NotNil(t, call, "a tools/call span")
	attrs := attribute.NewSet(call...)
	for k, want := range map[attribute.Key]string{
		"mcp.method.name": "tools/call", "gen_ai.tool.name": "whoami", "gen_ai.operation.name": "execute_tool",
		"network.transport": "tcp",
	} {
		v, ok := attrs.Value(k)
		require.True(t, ok, "attribute %s", k)
		require.Equal(t, want, v.AsString(), "attribute %s", k)
	}
	for _, k := range []attribute.Key{"mcp.protocol.version", "mcp.session.id"} {
		v, ok := attrs.Value(k)
		require.True(t, ok && v.AsString() != "", "attribute %s", k)
	}
}

// A url server's secret_headers go to the host of its URL only: when the
// server answers a tools/call with a redirect to another host (another
// port of the same address: the send_to matcher binds host and port), the
// hop never carries the header; the redirect is not followed at all, and
// the call fails without the value.
func TestRemoteSecretHeaderNeverFollowsARedirect(t *testing.T) {
	t.Parallel()
	var other struct {
		sync.Mutex
		auth []string
	}
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.Lock()
		other.auth = append(other.auth, r.Header.Get("Authorization"))
		other.Unlock()
	}))
	t.Cleanup(elsewhere.Close)

	s := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "not redirected"}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	var mu sync.Mutex
	var auth []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			http.Redirect(w, r, elsewhere.URL+"/mcp", http.StatusTemporaryRedirect)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)

	const token = "tok-redirected-5be0c1"
	d := remoteDef("remote", ts.URL+"/mcp")
	d.Network = append(d.Network, elsewhere.Listener.Addr().String()) // the network would allow the hop
	d.SecretHeaders = map[string]string{"Authorization": "Bearer {{providers/remote/token}}"}
	d.Secrets = []string{"providers/remote/token"}
	th := startHost(t, Config{AllowPrivateURLs: true, Secrets: secrets.NewEnv("", func(k string) string {
		if k == "CAPSTAN_SECRET_PROVIDERS_REMOTE_TOKEN" {
			return token
		}
		return ""
	})}, d)
	th.waitState("remote", StateUp)

	res, _, err := th.call(ctxT(t), "mcp__remote__whoami", `{}`)
	if err == nil {
		require.False(t, res.OK, "the redirected call cannot succeed: %+v", res)
		require.NotContains(t, res.Error+res.Value, token)
	} else {
		require.NotContains(t, err.Error(), token)
	}
	other.Lock()
	require.Empty(t, other.auth, "no request reached the other host, so no header")
	other.Unlock()
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, auth)
	for _, a := range auth {
		require.Equal(t, "Bearer "+token, a, "the server's own host gets the header on every request")
	}
	require.NotContains(t, th.logs.String(), token, "no value logged")
}
