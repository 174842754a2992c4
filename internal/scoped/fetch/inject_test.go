package fetch

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	scopedsecrets "github.com/capstanhq/capstan/internal/scoped/secrets"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/tool"
)

// The secrets of these tests; every value is distinctive, so a test can
// search any text for it.
const (
	tokenValue = "tok-3f9a-injected-value"
	userValue  = "user-77c1"
)

var injectValues = map[string]string{
	"http/api/token": tokenValue,
	"http/api/user":  userValue,
	"http/bad":       "line\nbreak-5e0d",
	"http/open":      "open-value-18b2",
}

// countingBackend resolves from injectValues and counts resolutions.
type countingBackend struct{ calls atomic.Int64 }

func (b *countingBackend) Resolve(_ context.Context, ref string) (string, error) {
	b.calls.Add(1)
	if v, ok := injectValues[ref]; ok {
		return v, nil
	}
	return "", secrets.ErrNotFound
}

// recorded is one request as a recordingServer received it.
type recorded struct {
	Method, Path, Authorization, APIKey, Trace, Body string
}

// recordingServer is a loopback server that records what reaches it:
//
//	/echo          200, echoing the Authorization header in the body and
//	               in an X-Echo header
//	/to?u=URL      302 to URL
//	/307?u=URL     307 to URL (method and body kept)
type recordingServer struct {
	port string
	mu   sync.Mutex
	reqs []recorded
}

func newRecordingServer(t *testing.T) *recordingServer {
	t.Helper()
	s := &recordingServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, recorded{Method: r.Method, Path: r.URL.Path, Authorization: r.Header.Get("Authorization"),
			APIKey: r.Header.Get("X-Api-Key"), Trace: r.Header.Get("X-Trace"), Body: string(body)})
		s.mu.Unlock()
		switch r.URL.Path {
		case "/to":
			http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusFound)
		case "/307":
			http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusTemporaryRedirect)
		default:
			w.Header().Set("X-Echo", r.Header.Get("Authorization"))
			_, _ = io.WriteString(w, "you sent: "+r.Header.Get("Authorization")+" / "+r.Header.Get("X-Api-Key"))
		}
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	s.port = port
	return s
}

func (s *recordingServer) requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.reqs...)
}

// url is http://<host>:<port><path>.
func (s *recordingServer) url(host, path string) string {
	return "http://" + host + ":" + s.port + path
}

// injectEnv is a fetcher whose call declares secrets http/* and whose
// personality binds http/api/* to a.test and b.test (any port), http/bad to
// a.test, and nothing else. a.test, b.test and c.test (allowed by the
// network policy, bound to no secret) resolve to loopback.
type injectEnv struct {
	*env
	backend  *countingBackend
	accessor *scopedsecrets.Accessor
}

func newInjectEnv(t *testing.T, declared ...string) *injectEnv {
	t.Helper()
	if declared == nil {
		declared = []string{"http/*"}
	}
	return newInjectEnvRaw(t, declared, nil)
}

// newInjectEnvRaw is newInjectEnv for a tool that also declares raw the
// refs matching raw.
func newInjectEnvRaw(t *testing.T, declared, raw []string) *injectEnv {
	t.Helper()
	dest, err := capability.NewSecretDestinations(map[string][]string{
		"http/api/*": {"a.test:*", "b.test:*"},
		"http/bad":   {"a.test:*"},
	})
	require.NoError(t, err)
	b := &countingBackend{}
	a := scopedsecrets.New(&capability.RefGrant{Declared: declared, Raw: raw, Destinations: dest}, b, nil)
	e := newEnv(t, envOpts{
		declared: []string{"*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*.test:*"}, AllowPrivateURLs: true},
		hosts:    map[string][]string{"a.test": {"127.0.0.1"}, "b.test": {"127.0.0.1"}, "c.test": {"127.0.0.1"}},
		secrets:  scopedsecrets.NewInjection(a),
	})
	return &injectEnv{env: e, backend: b, accessor: a}
}

func bearer(ref string) map[string]string {
	return map[string]string{"Authorization": "Bearer {{" + ref + "}}"}
}

func TestInjectSendsToABoundHost(t *testing.T) {
	t.Parallel()
	s := newRecordingServer(t)
	e := newInjectEnv(t)
	header := map[string][]string{"X-Trace": {"t-1"}}
	resp, err := e.fetch(t, tool.Request{
		URL:    s.url("a.test", "/echo"),
		Header: header,
		SecretHeaders: map[string]string{
			"Authorization": "Bearer {{http/api/token}}",
			"x-api-key":     "{{http/api/user}}:{{http/api/token}}",
		},
	})
	require.NoError(t, err)
	reqs := s.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "Bearer "+tokenValue, reqs[0].Authorization, "the server gets the value")
	require.Equal(t, userValue+":"+tokenValue, reqs[0].APIKey)
	require.Equal(t, "t-1", reqs[0].Trace)

	require.Equal(t, map[string][]string{"X-Trace": {"t-1"}}, header, "the caller's header map is not touched")
	require.Equal(t, "you sent: Bearer [REDACTED] / [REDACTED]:[REDACTED]", string(resp.Body), "the tool never gets the value back")
	require.Equal(t, []string{"Bearer [REDACTED]"}, resp.Header["X-Echo"])
	require.ElementsMatch(t, []string{tokenValue, userValue}, e.accessor.Resolved(), "injected values are redacted by the worker too")
	require.Equal(t, int64(2), e.backend.calls.Load(), "each ref resolved once")
	require.Empty(t, e.deniedErrs())
}

func TestInjectRefusesBeforeAnythingIsSent(t *testing.T) {
	t.Parallel()
	s := newRecordingServer(t)
	tests := []struct {
		name     string
		declared []string
		url      string
		secrets  map[string]string
		header   map[string][]string
		want     string
		wantIs   error
	}{
		{name: "host allowed but not bound", url: s.url("c.test", "/echo"), secrets: bearer("http/api/token"),
			want: "SECRET_DESTINATION: this secret may not be sent to c.test:" + s.port, wantIs: tool.ErrSecretDestination},
		{name: "bound host on another ref only", url: s.url("b.test", "/echo"), secrets: bearer("http/bad"),
			want: "SECRET_DESTINATION: this secret may not be sent to b.test:" + s.port, wantIs: tool.ErrSecretDestination},
		{name: "declared ref without send_to entry", url: s.url("a.test", "/echo"), secrets: bearer("http/open"),
			want: "SECRET_DESTINATION: this secret may not be sent to a.test:" + s.port, wantIs: tool.ErrSecretDestination},
		{name: "one unbound ref among several", url: s.url("b.test", "/echo"),
			secrets: map[string]string{"Authorization": "Bearer {{http/api/token}}", "X-Other": "{{http/bad}}"},
			want:    "SECRET_DESTINATION: this secret may not be sent to b.test:" + s.port, wantIs: tool.ErrSecretDestination},
		{name: "undeclared ref", declared: []string{"http/api/*"}, url: s.url("a.test", "/echo"), secrets: bearer("http/bad"),
			want: "SECRET_NOT_DECLARED: requested secret is not permitted for this tool", wantIs: tool.ErrSecretNotDeclared},
		{name: "invalid ref", url: s.url("a.test", "/echo"), secrets: bearer("http/api/../../vault/root"),
			want: "SECRET_NOT_DECLARED: requested secret is not permitted for this tool", wantIs: tool.ErrSecretNotDeclared},
		{name: "invalid header name", url: s.url("a.test", "/echo"), secrets: map[string]string{"Bad Name": "{{http/api/token}}"},
			want: `secret header "Bad Name": not a valid HTTP header name`},
		{name: "header the transport sets", url: s.url("a.test", "/echo"), secrets: map[string]string{"host": "{{http/api/token}}"},
			want: `secret header "host": the transport sets this header itself`},
		{name: "also a plain header", url: s.url("a.test", "/echo"), secrets: bearer("http/api/token"),
			header: map[string][]string{"authorization": {"Bearer mine"}},
			want:   `secret header "Authorization": also set in Request.Header`},
		{name: "twice", url: s.url("a.test", "/echo"), secrets: map[string]string{"Authorization": "{{http/api/token}}", "authorization": "{{http/api/user}}"},
			want: `secret header "authorization": set twice (header names are case-insensitive)`},
		{name: "no placeholder", url: s.url("a.test", "/echo"), secrets: map[string]string{"Authorization": "Bearer " + tokenValue},
			want: `secret header "Authorization": invalid template: it has no {{ref}} placeholder`},
		{name: "header injection in the template", url: s.url("a.test", "/echo"), secrets: map[string]string{"Authorization": "Bearer {{http/api/token}}\r\nX-Evil: 1"},
			want: `secret header "Authorization": invalid template: it contains a control character at byte 25 (a line break, NUL, ...)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newInjectEnv(t, tt.declared...)
			resp, err := e.fetch(t, tool.Request{URL: tt.url, Header: tt.header, SecretHeaders: tt.secrets})
			require.Nil(t, resp)
			require.EqualError(t, err, tt.want)
			if tt.wantIs != nil {
				require.ErrorIs(t, err, tt.wantIs)
				require.Equal(t, []error{err}, e.deniedErrs(), "the denial is reported once")
			} else {
				var she *tool.SecretHeaderError
				require.True(t, errors.As(err, &she), "%T", err)
				require.Empty(t, e.deniedErrs())
			}
			require.Zero(t, e.dials.Load(), "nothing was sent")
			require.Zero(t, e.backend.calls.Load(), "nothing was resolved")
			require.Empty(t, e.accessor.Resolved())
		})
	}
	require.Empty(t, s.requests())
}

func TestInjectValueErrors(t *testing.T) {
	t.Parallel()
	s := newRecordingServer(t)
	e := newInjectEnv(t)

	// A value that would split the header: refused, never echoed.
	_, err := e.fetch(t, tool.Request{URL: s.url("a.test", "/echo"), SecretHeaders: bearer("http/bad")})
	require.EqualError(t, err, `secret header "Authorization": the secret's value cannot be sent in an HTTP header: it contains a line break, NUL or another control character`)
	require.ErrorIs(t, err, tool.ErrSecretValueInvalid)
	require.NotContains(t, err.Error(), "break-5e0d")

	// A ref without a value: the backend's sentinel, wrapped.
	_, err = e.fetch(t, tool.Request{URL: s.url("a.test", "/echo"), SecretHeaders: bearer("http/api/missing")})
	require.EqualError(t, err, `secret header "Authorization": secret not found`)
	require.ErrorIs(t, err, secrets.ErrNotFound)
	var she *tool.SecretHeaderError
	require.True(t, errors.As(err, &she))
	require.Equal(t, "Authorization", she.Header)

	require.Empty(t, s.requests(), "nothing was sent")
	require.Zero(t, e.dials.Load())
}

func TestInjectWithoutSecretsIsRefused(t *testing.T) {
	t.Parallel()
	s := newRecordingServer(t)
	e := newEnv(t, envOpts{declared: []string{"*"}, policy: capability.NetworkPolicy{Allow: []string{"*.test:*"}, AllowPrivateURLs: true},
		hosts: map[string][]string{"a.test": {"127.0.0.1"}}})
	_, err := e.fetch(t, tool.Request{URL: s.url("a.test", "/echo"), SecretHeaders: bearer("http/api/token")})
	require.EqualError(t, err, "SECRET_NOT_DECLARED: requested secret is not permitted for this tool")
	require.Empty(t, s.requests())
}

func TestInjectHostCheckComesFirst(t *testing.T) {
	t.Parallel()
	s := newRecordingServer(t)
	e := newInjectEnv(t)
	_, err := e.fetch(t, tool.Request{URL: "http://evil.example:" + s.port + "/echo", SecretHeaders: bearer("http/api/token")})
	require.EqualError(t, err, "HOST_NOT_ALLOWED: evil.example:"+s.port+" is not in the declared allowedHosts")
	require.Zero(t, e.backend.calls.Load())
}

// TestInjectAcrossRedirects fixes the redirect rule: the secret goes to the
// first request's origin (scheme, host, port) only, and once a redirect
// left it, never again in that chain, even to another bound host or back.
func TestInjectAcrossRedirects(t *testing.T) {
	t.Parallel()
	to := func(from, target string) string { return from + "/to?u=" + url.QueryEscape(target) }
	// s serves a.test, b.test and c.test; other the same names on another
	// port, another origin. Paths are built per test from the two.
	type servers struct{ s, other *recordingServer }
	tests := []struct {
		name     string
		url      func(v servers) string
		method   string
		body     []byte
		wantAuth []string // Authorization seen by each request in order (s first, then other)
	}{
		{name: "same origin keeps it", url: func(v servers) string { return to(v.s.url("a.test", ""), "/echo") },
			wantAuth: []string{"Bearer " + tokenValue, "Bearer " + tokenValue}},
		{name: "to a host the secret is not bound to", url: func(v servers) string { return to(v.s.url("a.test", ""), v.s.url("c.test", "/echo")) },
			wantAuth: []string{"Bearer " + tokenValue, ""}},
		{name: "to another bound host", url: func(v servers) string { return to(v.s.url("a.test", ""), v.s.url("b.test", "/echo")) },
			wantAuth: []string{"Bearer " + tokenValue, ""}},
		{name: "away and back", url: func(v servers) string {
			return to(v.s.url("a.test", ""), to(v.s.url("c.test", ""), v.s.url("a.test", "/echo")))
		}, wantAuth: []string{"Bearer " + tokenValue, "", ""}},
		{name: "to another port of the same host", url: func(v servers) string { return to(v.s.url("a.test", ""), v.other.url("a.test", "/echo")) },
			wantAuth: []string{"Bearer " + tokenValue, ""}},
		{name: "307 keeps method and body, not the secret", method: "POST", body: []byte("payload"),
			url: func(v servers) string {
				return v.s.url("a.test", "/307?u="+url.QueryEscape(v.s.url("c.test", "/echo")))
			},
			wantAuth: []string{"Bearer " + tokenValue, ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := servers{s: newRecordingServer(t), other: newRecordingServer(t)}
			e := newInjectEnv(t)
			resp, err := e.fetch(t, tool.Request{Method: tt.method, URL: tt.url(v), Body: tt.body,
				Header: map[string][]string{"X-Trace": {"t-2"}}, SecretHeaders: bearer("http/api/token")})
			require.NoError(t, err, "the redirect is followed")
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.NotContains(t, string(resp.Body), tokenValue)
			got := append(v.s.requests(), v.other.requests()...)
			var auth []string
			for _, r := range got {
				auth = append(auth, r.Authorization)
				require.Equal(t, "t-2", r.Trace, "other headers follow the redirect")
			}
			require.Equal(t, tt.wantAuth, auth)
			if tt.body != nil {
				last := got[len(got)-1]
				require.Equal(t, "POST", last.Method)
				require.Equal(t, "payload", last.Body)
			}
		})
	}
}

func TestHeaderForChecksTheOrigin(t *testing.T) {
	t.Parallel()
	e := newInjectEnv(t)
	origin, err := capability.ParseEndpoint("http", "a.test", 0)
	require.NoError(t, err)
	inj := &injection{origin: origin, refs: []string{"http/api/token"}, header: http.Header{"Authorization": {"Bearer x"}}}
	ctx := context.WithValue(context.Background(), injectionKey{}, inj)
	base := http.Header{"Accept": {"*/*"}}
	for _, tt := range []struct {
		scheme string
		host   string
		port   int
		want   bool
	}{
		{"http", "a.test", 0, true},
		{"https", "a.test", 0, false}, // scheme change (and port)
		{"http", "a.test", 8080, false},
		{"http", "b.test", 0, false}, // bound, but another origin
	} {
		ep, err := capability.ParseEndpoint(tt.scheme, tt.host, tt.port)
		require.NoError(t, err)
		h, err := e.f.headerFor(ctx, base, ep)
		require.NoError(t, err)
		require.Equal(t, tt.want, h.Get("Authorization") != "", "%s://%s:%d", tt.scheme, tt.host, tt.port)
		require.Equal(t, "*/*", h.Get("Accept"))
	}
	require.Empty(t, base.Get("Authorization"), "the request's own header is never changed")
	inj.left.Store(true)
	h, err := e.f.headerFor(ctx, base, origin)
	require.NoError(t, err)
	require.Empty(t, h.Get("Authorization"), "once the chain left the origin, never again")
}

func TestValidateSecretHeader(t *testing.T) {
	t.Parallel()
	require.NoError(t, ValidateSecretHeader("Authorization", "Bearer {{providers/x/token}}"))
	require.NoError(t, ValidateSecretHeader("X-Api-Key", "{{a/b}}"))
	for _, tt := range []struct{ name, template, want string }{
		{"Bad Name", "{{a}}", "not a valid HTTP header name"},
		{"Content-Length", "{{a}}", "the transport sets this header itself"},
		{"transfer-encoding", "{{a}}", "the transport sets this header itself"},
		{"Authorization", "Bearer {{a/../b}}", "invalid template: placeholder 1 is not a valid secret ref (want segments separated by /, none empty, . or .., and no *)"},
		{"Authorization", "Bearer token", "invalid template: it has no {{ref}} placeholder"},
	} {
		err := ValidateSecretHeader(tt.name, tt.template)
		require.EqualError(t, err, tt.want, tt.name)
		require.False(t, strings.Contains(err.Error(), "a/../b"))
	}
}

// TestRawValueHeldToItsBindings: a tool that read a secret raw
// (secrets_raw) cannot send it, in the URL, a header or the body, to a
// host its ref is not bound to, on the first request or on a redirect hop.
func TestRawValueHeldToItsBindings(t *testing.T) {
	t.Parallel()
	to := func(from, target string) string { return from + "/to?u=" + url.QueryEscape(target) }
	tests := []struct {
		name    string
		req     func(bound, unbound string) tool.Request
		wantErr bool // else the request is sent
		reached int  // requests the server saw
	}{
		{name: "header to a bound host", req: func(bound, _ string) tool.Request {
			return tool.Request{URL: bound + "/echo", Header: map[string][]string{"X-Sig": {tokenValue}}}
		}, reached: 1},
		{name: "header to an unbound host", req: func(_, unbound string) tool.Request {
			return tool.Request{URL: unbound + "/echo", Header: map[string][]string{"X-Sig": {"v1=" + tokenValue}}}
		}, wantErr: true},
		{name: "query to an unbound host", req: func(_, unbound string) tool.Request {
			return tool.Request{URL: unbound + "/echo?key=" + url.QueryEscape(tokenValue)}
		}, wantErr: true},
		{name: "path to an unbound host", req: func(_, unbound string) tool.Request {
			return tool.Request{URL: unbound + "/k/" + tokenValue}
		}, wantErr: true},
		{name: "body to an unbound host", req: func(_, unbound string) tool.Request {
			return tool.Request{Method: "POST", URL: unbound + "/echo", Body: []byte(`{"key":"` + tokenValue + `"}`)}
		}, wantErr: true},
		{name: "query across a redirect to an unbound host", req: func(bound, unbound string) tool.Request {
			return tool.Request{URL: to(bound, unbound+"/echo?key="+tokenValue)}
		}, wantErr: true, reached: 1},
		{name: "body across a 307 to an unbound host", req: func(bound, unbound string) tool.Request {
			return tool.Request{Method: "POST", URL: bound + "/307?u=" + url.QueryEscape(unbound+"/echo"), Body: []byte(tokenValue)}
		}, wantErr: true, reached: 1},
		{name: "no secret in the request", req: func(_, unbound string) tool.Request {
			return tool.Request{URL: unbound + "/echo", Header: map[string][]string{"X-Sig": {"nothing"}}}
		}, reached: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newRecordingServer(t)
			e := newInjectEnvRaw(t, []string{"http/*"}, []string{"http/api/*"})
			v, err := e.accessor.Secret(t.Context(), "http/api/token")
			require.NoError(t, err)
			require.Equal(t, tokenValue, v)
			_, err = e.fetch(t, tt.req(s.url("a.test", ""), s.url("c.test", "")))
			if tt.wantErr {
				require.EqualError(t, err, "SECRET_DESTINATION: this secret may not be sent to c.test:"+s.port)
				require.Equal(t, []error{err}, e.deniedErrs())
			} else {
				require.NoError(t, err)
			}
			require.Len(t, s.requests(), tt.reached)
		})
	}
}
