package worker_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry/telemetrytest"
	"github.com/capstanhq/capstan/internal/tools/web"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
)

// sendToValue is the secret of these tests, http/api/token in the env
// backend.
const sendToValue = "s3nd-to-value-9c41e"

var sendToEnv = map[string]string{"CAPSTAN_SECRET_HTTP_API_TOKEN": sendToValue}

// authServer is a loopback server that records the Authorization header of
// every request: /echo echoes it, /to?u=URL redirects (302) to URL.
type authServer struct {
	*httptest.Server
	port string
	mu   sync.Mutex
	auth []string // one entry per request, "" when it had none
}

func newAuthServer(t *testing.T) *authServer {
	t.Helper()
	s := &authServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		if r.URL.Path == "/to" {
			http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "you sent: "+r.Header.Get("Authorization"))
	}))
	t.Cleanup(s.Close)
	_, port, err := net.SplitHostPort(s.Listener.Addr().String())
	require.NoError(t, err)
	s.port = port
	return s
}

func (s *authServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// sendToPersonality lets calls reach every loopback port and binds refs
// below http/api/ to the bound server's port only (no send_to when
// boundPort is "").
func sendToPersonality(id, boundPort string) string {
	doc := fmt.Sprintf(`id: %s
safety:
  network:
    allow: ["127.0.0.1:*"]
    allow_private_urls: true
secrets:
  allow: ["http/*"]
`, id)
	if boundPort != "" {
		doc += fmt.Sprintf("  send_to:\n    \"http/api/*\": [\"127.0.0.1:%s\"]\n", boundPort)
	}
	return doc
}

// TestSecretGoesOnlyWhereBound runs http_request with auth_secret through a
// real worker (security.md section 4): the secret reaches the host
// secrets.send_to binds it to, never another host the network policy
// allows (that server sees no request at all), never a redirect hop to
// another host, and never a host of a personality without send_to.
func TestSecretGoesOnlyWhereBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bound, unbound := newAuthServer(t), newAuthServer(t)
	e.putPersonality("sender", sendToPersonality("sender", bound.port))
	e.putPersonality("unbound", sendToPersonality("unbound", ""))
	e.start(worker.Config{Getenv: func(k string) string { return sendToEnv[k] }}, web.HTTPRequest())
	run := func(id, personality, u string) protocol.Result {
		t.Helper()
		a, err := json.Marshal(map[string]string{"method": "GET", "url": u, "auth_secret": "http/api/token"})
		require.NoError(t, err)
		e.call(protocol.Call{CallID: id, Tool: web.HTTPRequestName, PersonalityID: personality, Args: a})
		r := e.result(id, id)
		_, rec := auditOf(t, e, web.HTTPRequestName, id)
		require.NotContains(t, rec, sendToValue, "no secret in the audit record")
		require.NotContains(t, r.Value+r.Error+string(r.Structured), sendToValue, "no secret in the result")
		return r
	}

	// To the bound host: sent, and the echo is redacted.
	r := run("bound", "sender", bound.URL+"/echo")
	require.True(t, r.OK, r.Error)
	require.Contains(t, r.Value, "you sent: Bearer [REDACTED]")
	require.Equal(t, []string{"Bearer " + sendToValue}, bound.seen())

	// To a host the network allows but the secret is not bound to: refused
	// before anything is sent.
	r = run("unbound-host", "sender", unbound.URL+"/echo")
	require.False(t, r.OK)
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Equal(t, "SECRET_DESTINATION: this secret may not be sent to 127.0.0.1:"+unbound.port, r.Error)
	require.Empty(t, unbound.seen(), "the unbound server saw no request")
	rec, _ := auditOf(t, e, web.HTTPRequestName, "unbound-host")
	require.Equal(t, []string{"SECRET_DESTINATION"}, rec.Denials, "the denial is audited by code")

	// A redirect from the bound host to the unbound one: followed, without
	// the secret.
	r = run("redirect", "sender", bound.URL+"/to?u="+url.QueryEscape(unbound.URL+"/echo"))
	require.True(t, r.OK, r.Error)
	require.Contains(t, r.Value, "you sent: \n", "the final hop got no Authorization")
	require.Equal(t, []string{"Bearer " + sendToValue, "Bearer " + sendToValue}, bound.seen())
	require.Equal(t, []string{""}, unbound.seen(), "the redirect hop carried no secret")

	// A personality without send_to sends no secret anywhere (fail closed).
	r = run("no-send-to", "unbound", bound.URL+"/echo")
	require.Equal(t, "SECRET_DESTINATION: this secret may not be sent to 127.0.0.1:"+bound.port, r.Error)
	require.Len(t, bound.seen(), 2, "nothing more reached the bound server")
}

// TestToolNeverHoldsAnInjectedSecret: a tool that declares a secret under
// secrets only can have the fetcher send it, but cannot read it, not even
// from a response that echoes it.
func TestToolNeverHoldsAnInjectedSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := newAuthServer(t)
	e.putPersonality("sender", sendToPersonality("sender", srv.port))
	wtp, spans := telemetrytest.Tracing(t)
	probe := tool.Tool{
		Name: "probe",
		Capabilities: tool.Capabilities{
			Network: &tool.Network{AllowedHosts: []string{"*"}},
			Secrets: []string{"http/api/*"},
		},
		Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			resp, err := tc.Fetch.Fetch(ctx, tool.Request{URL: srv.URL + "/echo",
				SecretHeaders: map[string]string{"Authorization": "token {{http/api/token}}"}})
			if err != nil {
				return tool.Result{}, err
			}
			_, rawErr := tc.Secrets.Secret(ctx, "http/api/token")
			return tool.Result{OK: true, Value: string(resp.Body), Structured: map[string]any{
				"body_holds_value": strings.Contains(string(resp.Body), sendToValue),
				"raw_error":        fmt.Sprint(rawErr),
			}}, nil
		},
	}
	e.start(worker.Config{Getenv: func(k string) string { return sendToEnv[k] }, TracerProvider: wtp}, probe)
	e.call(protocol.Call{CallID: "p1", Tool: "probe", PersonalityID: "sender"})
	r := e.result("p1", "p1")
	require.True(t, r.OK, r.Error)
	require.Equal(t, []string{"token " + sendToValue}, srv.seen(), "the fetcher sent the value")
	require.Equal(t, "you sent: token [REDACTED]", r.Value)
	var got struct {
		BodyHoldsValue bool   `json:"body_holds_value"`
		RawError       string `json:"raw_error"`
	}
	require.NoError(t, json.Unmarshal(r.Structured, &got))
	require.False(t, got.BodyHoldsValue, "the response the tool got was already redacted")
	require.Equal(t, "SECRET_NOT_DECLARED: requested secret may only be sent by the fetch accessor; "+
		"the tool must declare it under secrets_raw to read its value", got.RawError)

	// The injected resolution has its span, under the tool's, and no span
	// holds the value.
	var exec sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, s := range spans.Ended() {
			if s.Name() == "execute_tool probe" {
				exec = s
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond)
	var resolutions []string // error.type of each "resolve secret" child, "" when it succeeded
	for _, s := range spans.Ended() {
		if s.Name() == "resolve secret" && s.Parent().SpanID() == exec.SpanContext().SpanID() {
			resolutions = append(resolutions, attr(s, "error.type"))
		}
	}
	require.ElementsMatch(t, []string{"", "SECRET_NOT_DECLARED"}, resolutions, "the injection and the refused raw read")
	requireClean(t, spans.Ended(), sendToValue)
}

// TestSecretsRawInCatalogAndPipeline: a tool that declares secrets_raw
// reads the value (redacted on the way out), and the catalog shows which
// refs a tool may hold, for a reviewer.
func TestSecretsRawInCatalogAndPipeline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := newAuthServer(t)
	e.putPersonality("sender", sendToPersonality("sender", ""))
	signer := tool.Tool{
		Name: "signer",
		Capabilities: tool.Capabilities{Secrets: []string{"http/*"}, SecretsRaw: []string{"http/api/token"},
			Network: &tool.Network{AllowedHosts: []string{"*"}}},
		Execute: func(ctx context.Context, raw json.RawMessage, tc *tool.Context) (tool.Result, error) {
			var a struct{ URL string }
			_ = json.Unmarshal(raw, &a)
			v, err := tc.Secrets.Secret(ctx, "http/api/token")
			if err != nil {
				return tool.Result{}, err
			}
			if a.URL != "" { // send the raw value itself
				if _, err := tc.Fetch.Fetch(ctx, tool.Request{URL: a.URL, Header: map[string][]string{"Authorization": {v}}}); err != nil {
					return tool.Result{}, err
				}
			}
			_, otherErr := tc.Secrets.Secret(ctx, "http/other")
			return tool.OK(fmt.Sprintf("signed with %s (%d bytes); other: %v", v, len(v), otherErr)), nil
		},
	}
	e.start(worker.Config{Getenv: func(k string) string { return sendToEnv[k] }}, signer, web.HTTPRequest())

	kv, err := e.conn.KV(ctxT(t), bus.Tools)
	require.NoError(t, err)
	for name, want := range map[string]string{
		"signer":            `{"network":{"allowed_hosts":["*"]},"secrets":["http/*"],"secrets_raw":["http/api/token"]}`,
		web.HTTPRequestName: `{"network":{"allowed_hosts":["*"]},"secrets":["http/*"]}`,
	} {
		entry, found, err := kv.Get(ctxT(t), name)
		require.NoError(t, err)
		require.True(t, found, name)
		var ce protocol.CatalogEntry
		require.NoError(t, json.Unmarshal(entry.Value, &ce))
		require.JSONEq(t, want, string(ce.Capabilities), name)
	}

	e.call(protocol.Call{CallID: "sig", Tool: "signer", PersonalityID: "sender"})
	r := e.result("sig", "sig")
	require.True(t, r.OK, r.Error)
	require.Equal(t, fmt.Sprintf("signed with [REDACTED] (%d bytes); other: SECRET_NOT_DECLARED: requested secret may only be sent "+
		"by the fetch accessor; the tool must declare it under secrets_raw to read its value", len(sendToValue)), r.Value)

	// A raw value is held to the same bindings when the tool sends it
	// itself: this personality binds it nowhere.
	e.call(protocol.Call{CallID: "sig2", Tool: "signer", PersonalityID: "sender", Args: json.RawMessage(fmt.Sprintf(`{"url":%q}`, srv.URL))})
	r = e.result("sig2", "sig2")
	require.Equal(t, "SECRET_DESTINATION: this secret may not be sent to 127.0.0.1:"+srv.port, r.Error)
	require.Empty(t, srv.seen(), "the server saw no request")
}

// TestInjectedSecretEchoedInEncodingsIsRedacted is the third attack of
// issue 19 end to end: http_request sends a secret by auth_secret to a
// bound server that echoes the Authorization header back in base64, hex,
// reversed, letter-spaced and URL-encoded. Before the fix only the literal
// value came back redacted; now no form of the secret leaves the worker, in
// the result, the audit record or a span.
func TestInjectedSecretEchoedInEncodingsIsRedacted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		rev := []byte(h)
		slices.Reverse(rev)
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "b64 %s | hex %s | rev %s | spaced %s | url %s",
			base64.StdEncoding.EncodeToString([]byte(h)), hex.EncodeToString([]byte(h)), rev,
			strings.Join(strings.Split(h, ""), " "), url.QueryEscape(h))
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	e.putPersonality("sender", sendToPersonality("sender", port))
	wtp, spans := telemetrytest.Tracing(t)
	e.start(worker.Config{Getenv: func(k string) string { return sendToEnv[k] }, TracerProvider: wtp}, web.HTTPRequest())

	a, err := json.Marshal(map[string]string{"method": "GET", "url": srv.URL + "/echo", "auth_secret": "http/api/token"})
	require.NoError(t, err)
	e.call(protocol.Call{CallID: "enc", Tool: web.HTTPRequestName, PersonalityID: "sender", Args: a})
	r := e.result("enc", "enc")
	require.True(t, r.OK, r.Error)

	// What must not leave: the characters of the base64 of "Bearer <value>"
	// that hold only bits of the value, and every other form of the value.
	header := "Bearer " + sendToValue
	b64 := base64.StdEncoding.EncodeToString([]byte(header))
	first, last := 8*len("Bearer ")/6, (8*len(header)+5)/6
	rev := []byte(sendToValue)
	slices.Reverse(rev)
	needles := []string{sendToValue, b64[first+1 : last-1], hex.EncodeToString([]byte(sendToValue)), string(rev),
		strings.Join(strings.Split(sendToValue, ""), " "), url.QueryEscape(sendToValue)}
	_, rec := auditOf(t, e, web.HTTPRequestName, "enc")
	for _, n := range needles {
		require.NotContains(t, r.Value, n)
		require.NotContains(t, rec, n)
	}
	require.Equal(t, 5, strings.Count(r.Value, "[REDACTED]"), "each form is redacted: %s", r.Value)
	requireClean(t, spans.Ended(), needles...)
}
