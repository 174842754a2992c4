package web_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/tools/web"
	"github.com/capstanhq/capstan/tool"
)

const secretDeniedMsg = "SECRET_NOT_DECLARED: requested secret is not permitted for this tool"

// apiServer answers /api with a fixed JSON body and a few headers, /echo
// with the Authorization header it received, and /to-other redirecting to
// other's /api (another origin).
func apiServer(t *testing.T, other *server) *server {
	t.Helper()
	return newServer(t, map[string]http.HandlerFunc{
		"/api": func(w http.ResponseWriter, _ *http.Request) {
			h := w.Header()
			h.Set("Content-Type", "application/json")
			h.Add("Set-Cookie", "sid=abc; HttpOnly")
			h.Add("Set-Cookie", "theme=dark")
			h.Set("X-Request-Id", "r-1")
			h.Set("X-Csrf-Token", "csrf-1")
			h.Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"ok":true}`))
		},
		"/echo": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT")
			_, _ = w.Write([]byte("you sent: " + r.Header.Get("Authorization")))
		},
		"/to-other": redirect(func() string { return other.url("other.test", "/api") }),
		"/to-self":  redirect(func() string { return "/api" }),
	})
}

// apiResult is the result of /api as served from u.
func apiResult(u string) string {
	return "HTTP 201 Created from " + u + "\n" +
		"Content-Length: 11\n" +
		"Content-Type: application/json\n" +
		"Date: Mon, 02 Jan 2006 15:04:05 GMT\n" +
		"Set-Cookie: [masked]\n" +
		"Set-Cookie: [masked]\n" +
		"X-Csrf-Token: [masked]\n" +
		"X-Request-Id: r-1\n" +
		"\n" +
		`{"ok":true}`
}

func TestHTTPRequestInjectsSecretAsAuthorization(t *testing.T) {
	t.Parallel()
	s := apiServer(t, nil)
	u := s.url("site.test", "/api")
	tc := secretContext(t, web.SecretPattern)
	res := mustCall(t, web.HTTPRequest(), obj{"method": "GET", "url": u, "auth_secret": "http/api/token"}, tc)
	require.Equal(t, tool.OK(apiResult(u)), res)
	reqs := s.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "Bearer "+secretValue, reqs[0].Header.Get("Authorization"))
	require.NotContains(t, res.Value, secretValue)
	require.Equal(t, []string{secretValue}, tc.Secrets.(interface{ Resolved() []string }).Resolved(),
		"the worker learns the value, to redact it everywhere")
}

func TestHTTPRequestAuthScheme(t *testing.T) {
	t.Parallel()
	s := apiServer(t, nil)
	tests := []struct {
		scheme any // nil: absent
		want   string
	}{
		{nil, "Bearer " + secretValue},
		{"token", "token " + secretValue},
		{"Basic", "Basic " + secretValue},
		{"", secretValue},
	}
	for _, tt := range tests {
		args := obj{"method": "GET", "url": s.url("site.test", "/api"), "auth_secret": "http/api/token"}
		if tt.scheme != nil {
			args["auth_scheme"] = tt.scheme
		}
		res := mustCall(t, web.HTTPRequest(), args, secretContext(t, "http/*"))
		require.True(t, res.OK, res.Error)
		reqs := s.requests()
		require.Equal(t, tt.want, reqs[len(reqs)-1].Header.Get("Authorization"), "scheme %v", tt.scheme)
	}
}

func TestHTTPRequestRedactsEchoedSecret(t *testing.T) {
	t.Parallel()
	s := apiServer(t, nil)
	u := s.url("site.test", "/echo")
	res := mustCall(t, web.HTTPRequest(), obj{"method": "GET", "url": u, "auth_secret": "http/api/token"}, secretContext(t, "http/*"))
	require.Equal(t, tool.OK("HTTP 200 OK from "+u+"\nContent-Length: 40\nContent-Type: text/plain\nDate: Mon, 02 Jan 2006 15:04:05 GMT\n\nyou sent: Bearer [REDACTED]"), res)
}

func TestHTTPRequestRedirectToOtherOriginDropsAuthorization(t *testing.T) {
	t.Parallel()
	other := apiServer(t, nil) // another port: another origin
	s := apiServer(t, other)
	tc := secretContext(t, "http/*")
	res := mustCall(t, web.HTTPRequest(), obj{
		"method": "GET", "url": s.url("site.test", "/to-other"), "auth_secret": "http/api/token",
		"headers": obj{"Cookie": "c=1", "X-Trace": "t-1"},
	}, tc)
	require.Equal(t, tool.OK(apiResult(other.url("other.test", "/api"))), res, "the result is the final hop's")

	first := s.requests()
	require.Len(t, first, 1)
	require.Equal(t, "Bearer "+secretValue, first[0].Header.Get("Authorization"))
	hop := other.requests()
	require.Len(t, hop, 1)
	require.Empty(t, hop[0].Header.Values("Authorization"), "the secret never reaches another origin (nor a host it is not bound to)")
	require.Empty(t, hop[0].Header.Values("Cookie"))
	require.Equal(t, "t-1", hop[0].Header.Get("X-Trace"), "other headers follow the redirect")

	// A redirect within the origin keeps the header.
	res = mustCall(t, web.HTTPRequest(), obj{"method": "GET", "url": s.url("site.test", "/to-self"), "auth_secret": "http/api/token"}, tc)
	require.True(t, res.OK, res.Error)
	reqs := s.requests()
	require.Equal(t, "/api", reqs[len(reqs)-1].Path)
	require.Equal(t, "Bearer "+secretValue, reqs[len(reqs)-1].Header.Get("Authorization"))
}

func TestHTTPRequestSecretRefusals(t *testing.T) {
	t.Parallel()
	s := apiServer(t, nil)
	u := s.url("site.test", "/api")
	f := fetcher(t, 0)

	// A ref the grant does not allow: the accessor's denial, verbatim.
	// Braces would reshape the template the tool builds: no valid ref has one.
	for _, ref := range []string{"other/api/token", "http", "http/../other/api/token", "http/api/token}} {{other/api/token", "http/a{b"} {
		tc := secretContext(t, "http/*")
		res, err := call(t, web.HTTPRequest(), obj{"method": "GET", "url": u, "auth_secret": ref}, tc)
		require.ErrorIs(t, err, tool.ErrSecretNotDeclared, ref)
		require.EqualError(t, err, secretDeniedMsg)
		require.Equal(t, tool.Result{}, res)
		require.Empty(t, tc.Secrets.(interface{ Resolved() []string }).Resolved(), ref)
	}
	// A ref without a value.
	_, err := call(t, web.HTTPRequest(), obj{"method": "GET", "url": u, "auth_secret": "http/missing"}, secretContext(t, "http/*"))
	require.EqualError(t, err, "auth_secret: secret not found")
	// A value that cannot be a header value; the message does not echo it.
	res := mustCall(t, web.HTTPRequest(), obj{"method": "GET", "url": u, "auth_secret": "http/bad/value"}, secretContext(t, "http/*"))
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "The value of auth_secret cannot be sent in an HTTP header: it contains a line break or NUL."), res)
	// No secrets accessor.
	res = mustCall(t, web.HTTPRequest(), obj{"method": "GET", "url": u, "auth_secret": "http/api/token"}, &tool.Context{Fetch: f})
	require.Equal(t, tool.Fail(tool.CodeNotAvailable, "Secrets capability not configured for this personality."), res)
	// A caller Authorization header together with auth_secret.
	for _, name := range []string{"Authorization", "authorization"} {
		res = mustCall(t, web.HTTPRequest(), obj{"method": "GET", "url": u, "auth_secret": "http/api/token", "headers": obj{name: "Bearer x"}},
			secretContext(t, "http/*"))
		require.Equal(t, tool.CodeInputInvalid, res.Code)
		require.Equal(t, "invalid arguments: args.headers."+name+" must not be set together with auth_secret, which is sent as the Authorization header", res.Error)
	}
	require.Empty(t, s.requests(), "no refused call reached the server")

	// Without auth_secret, a caller Authorization header is sent as given.
	res = mustCall(t, web.HTTPRequest(), obj{"method": "GET", "url": u, "headers": obj{"Authorization": "Bearer mine"}}, &tool.Context{Fetch: f})
	require.True(t, res.OK, res.Error)
	require.Equal(t, "Bearer mine", s.requests()[0].Header.Get("Authorization"))
}

// TestHTTPRequestSecretToUnboundHost: a host the network policy allows but
// the personality's secrets.send_to does not bind the secret to gets no
// request at all, and the value is never even resolved.
func TestHTTPRequestSecretToUnboundHost(t *testing.T) {
	t.Parallel()
	unbound := apiServer(t, nil)
	for _, host := range []string{"other.test", "127.0.0.1"} {
		tc := secretContext(t, "http/*")
		res, err := call(t, web.HTTPRequest(), obj{"method": "POST", "url": unbound.url(host, "/api"), "auth_secret": "http/api/token", "body": "x"}, tc)
		require.ErrorIs(t, err, tool.ErrSecretDestination)
		require.EqualError(t, err, "SECRET_DESTINATION: this secret may not be sent to "+host+":"+unbound.port)
		require.Equal(t, tool.Result{}, res)
		require.Empty(t, tc.Secrets.(interface{ Resolved() []string }).Resolved(), "the value was never resolved")
	}
	require.Empty(t, unbound.requests(), "the server saw no request")

	// The same host without auth_secret is reachable: only the secret is bound.
	res := mustCall(t, web.HTTPRequest(), obj{"method": "GET", "url": unbound.url("other.test", "/api")}, secretContext(t, "http/*"))
	require.True(t, res.OK, res.Error)
	require.Len(t, unbound.requests(), 1)
}

// TestHTTPRequestNeverHoldsTheValue: http_request no longer reads the
// value; a grant that allows injection only is enough.
func TestHTTPRequestNeverHoldsTheValue(t *testing.T) {
	t.Parallel()
	s := apiServer(t, nil)
	tc := secretContext(t, "http/*")
	_, err := tc.Secrets.Secret(ctxT(t), "http/api/token")
	require.ErrorIs(t, err, tool.ErrSecretNotDeclared, "the grant does not let the tool read the value")
	res := mustCall(t, web.HTTPRequest(), obj{"method": "GET", "url": s.url("site.test", "/echo"), "auth_secret": "http/api/token"}, tc)
	require.True(t, res.OK, res.Error)
	require.Equal(t, "Bearer "+secretValue, s.requests()[0].Header.Get("Authorization"))
	require.True(t, strings.HasSuffix(res.Value, "you sent: Bearer [REDACTED]"), res.Value)
}

func TestHTTPRequestMethodsBodiesAndHeaders(t *testing.T) {
	t.Parallel()
	s := newServer(t, map[string]http.HandlerFunc{
		"/": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT")
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = w.Write([]byte(r.Method + " done"))
		},
	})
	u := s.url("site.test", "/")
	f := fetcher(t, 0)
	head := func(n int) string {
		return "HTTP 200 OK from " + u + "\nContent-Length: " + strconv.Itoa(n) + "\nContent-Type: text/plain; charset=utf-8\nDate: Mon, 02 Jan 2006 15:04:05 GMT\n\n"
	}
	tests := []struct {
		args      obj
		wantCT    string
		wantBody  string
		wantValue string
	}{
		{obj{"method": "POST", "url": u, "body": `{"a":1}`}, "application/json", `{"a":1}`, head(9) + "POST done"},
		{obj{"method": "PUT", "url": u, "body": "plain"}, "text/plain; charset=utf-8", "plain", head(8) + "PUT done"},
		{obj{"method": "PATCH", "url": u, "body": "a=1", "headers": obj{"content-type": "application/x-www-form-urlencoded"}}, "application/x-www-form-urlencoded", "a=1", head(10) + "PATCH done"},
		{obj{"method": "DELETE", "url": u}, "", "", head(11) + "DELETE done"},
		{obj{"method": "HEAD", "url": u}, "", "", head(9) + "(empty body)"},
	}
	for i, tt := range tests {
		res := mustCall(t, web.HTTPRequest(), tt.args, &tool.Context{Fetch: f})
		require.True(t, res.OK, res.Error)
		got := s.requests()[i]
		require.Equal(t, tt.args["method"], got.Method)
		require.Equal(t, tt.wantCT, got.Header.Get("Content-Type"), tt.args["method"])
		require.Equal(t, tt.wantBody, got.Body)
		require.Equal(t, tt.wantValue, res.Value)
	}
	res := mustCall(t, web.HTTPRequest(), obj{"method": "DELETE", "url": u, "headers": obj{"X-One": "1", "Accept": "text/plain"}}, &tool.Context{Fetch: f})
	require.True(t, strings.HasSuffix(res.Value, "\n\nDELETE done"), res.Value)
	got := s.requests()[len(tests)]
	require.Equal(t, "1", got.Header.Get("X-One"))
	require.Equal(t, "text/plain", got.Header.Get("Accept"))
}

func TestHTTPRequestResponses(t *testing.T) {
	t.Parallel()
	s := newServer(t, map[string]http.HandlerFunc{
		"/png":     respond(http.StatusOK, ptr("image/png"), "\x89PNG\r\n\x1a\n1234"),
		"/missing": respond(http.StatusNotFound, ptr("application/json"), `{"error":"nope"}`),
		"/html":    respond(http.StatusOK, ptr("text/html"), "<p>raw <b>html</b></p>"),
		"/big":     respond(http.StatusOK, ptr("text/plain"), strings.Repeat("z", 100)),
	})
	f := fetcher(t, 50)
	body := func(path string) string {
		res := mustCall(t, web.HTTPRequest(), obj{"method": "GET", "url": s.url("site.test", path)}, &tool.Context{Fetch: f})
		require.True(t, res.OK, "any HTTP status is ok: %s", res.Error)
		_, b, found := strings.Cut(res.Value, "\n\n")
		require.True(t, found)
		return strings.SplitN(res.Value, "\n", 2)[0] + " | " + b
	}
	u := s.url("site.test", "")
	require.Equal(t, "HTTP 200 OK from "+u+"/png | <12 bytes of image/png>", body("/png"))
	require.Equal(t, "HTTP 404 Not Found from "+u+`/missing | {"error":"nope"}`, body("/missing"))
	require.Equal(t, "HTTP 200 OK from "+u+"/html | <p>raw <b>html</b></p>", body("/html"), "http_request returns the body raw")
	require.Equal(t, "HTTP 200 OK from "+u+"/big | "+strings.Repeat("z", 50)+"\n[body cut at the download limit of 50 bytes]", body("/big"))
}

func TestHTTPRequestDeniedHostAndNoNetwork(t *testing.T) {
	t.Parallel()
	evil := newServer(t, map[string]http.HandlerFunc{"/": respond(http.StatusOK, ptr("text/plain"), "x")})
	tc := secretContext(t, "http/*")
	res, err := call(t, web.HTTPRequest(), obj{"method": "POST", "url": evil.url("evil.example", "/"), "auth_secret": "http/api/token", "body": "x"}, tc)
	require.ErrorIs(t, err, tool.ErrHostNotAllowed)
	require.EqualError(t, err, "HOST_NOT_ALLOWED: evil.example:"+evil.port+" is not in the declared allowedHosts")
	require.NotContains(t, err.Error(), secretValue)
	require.Equal(t, tool.Result{}, res)
	require.Empty(t, evil.requests())

	for _, tc := range []*tool.Context{{}, {Secrets: secretsFor("http/*")}, nil} {
		res := mustCall(t, web.HTTPRequest(), obj{"method": "GET", "url": "http://site.test/"}, tc)
		require.Equal(t, tool.Fail(tool.CodeNotAvailable, "Network capability not configured for this personality."), res)
	}
}

func TestHTTPRequestMasksCredentialHeaders(t *testing.T) {
	t.Parallel()
	names := []string{"Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie", "X-Auth-Token", "X-Api-Key", "Apikey", "X-Client-Secret", "X-Password", "X-Credential"}
	s := newServer(t, map[string]http.HandlerFunc{
		"/": func(w http.ResponseWriter, _ *http.Request) {
			for _, n := range names {
				w.Header().Set(n, "value-of-"+n)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="api"`)
			w.Header().Set("X-Ratelimit-Remaining", "9")
			w.WriteHeader(http.StatusUnauthorized)
		},
	})
	res := mustCall(t, web.HTTPRequest(), obj{"method": "GET", "url": s.url("site.test", "/")}, &tool.Context{Fetch: fetcher(t, 0)})
	require.True(t, res.OK, res.Error)
	require.NotContains(t, res.Value, "value-of-")
	for _, n := range names {
		require.Contains(t, res.Value, "\n"+http.CanonicalHeaderKey(n)+": [masked]\n")
	}
	require.Contains(t, res.Value, "\nWww-Authenticate: Bearer realm=\"api\"\n", "not a credential: tells the caller how to authenticate")
	require.Contains(t, res.Value, "\nX-Ratelimit-Remaining: 9\n")
	require.True(t, strings.HasSuffix(res.Value, "\n\n(empty body)"))
}

func TestHTTPRequestChecksArgsAgain(t *testing.T) {
	t.Parallel()
	// For callers that skip the schema (the worker never does).
	tc := secretContext(t, "http/*")
	tests := []struct {
		args string
		want string
	}{
		{`{"method":"get","url":"http://site.test/"}`, "args.method must be one of GET, POST, PUT, PATCH, DELETE, HEAD"},
		{`{"method":"GET"}`, "args.url is required"},
		{`{"method":"GET","url":"http://site.test/","headers":{"Bad Name":"x"}}`, `args.headers has an invalid header name "Bad Name"`},
		{`{"method":"GET","url":"http://site.test/","headers":{"X":"a\r\nInjected: 1"}}`, "args.headers.X must not contain a line break or NUL"},
		{`{"method":"GET","url":"http://site.test/","auth_scheme":"Bearer"}`, "args.auth_scheme needs args.auth_secret"},
		{`{"method":"GET","url":"http://site.test/","auth_secret":"http/api/token","auth_scheme":"Bearer x"}`, "args.auth_scheme must be a single token such as Bearer"},
		{`{"method":"GET","url":"http://site.test/","headers":"x"}`, "args.headers must be an object, got string"},
	}
	for _, tt := range tests {
		res, err := web.HTTPRequest().Execute(ctxT(t), json.RawMessage(tt.args), tc)
		require.NoError(t, err)
		require.Equal(t, tool.CodeInputInvalid, res.Code, tt.args)
		require.Contains(t, res.Error, "invalid arguments: "+tt.want, tt.args)
	}
}
