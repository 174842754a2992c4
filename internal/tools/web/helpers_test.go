package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
	scopedsecrets "github.com/capstanhq/capstan/internal/scoped/secrets"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tool/tooltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// policy is the personality's network policy in these tests: loopback and
// every *.test name on any port; names outside it (evil.example) are refused.
var policy = capability.NetworkPolicy{
	Allow:            []string{"127.0.0.1:*", "*.test:*"},
	AllowPrivateURLs: true,
}

// fetcher returns the real scoped fetcher for a tool declaring
// allowed_hosts ["*"] under policy; every *.test name resolves to
// 127.0.0.1. maxBody is the body cap (0: the default).
func fetcher(t *testing.T, maxBody int64) tool.Fetcher { return fetcherWith(t, maxBody, nil) }

// fetcherWith is fetcher that injects the secrets of acc (nil: none).
func fetcherWith(t *testing.T, maxBody int64, acc *scopedsecrets.Accessor) tool.Fetcher {
	t.Helper()
	g, err := capability.NewNetworkGrant([]string{"*"}, policy)
	require.NoError(t, err)
	var opts []fetch.Option
	if acc != nil {
		opts = append(opts, fetch.WithSecrets(scopedsecrets.NewInjection(acc)))
	}
	return fetch.New(g, fetch.Config{
		MaxBodyBytes: maxBody,
		Timeout:      20 * time.Second,
		LookupIP: func(_ context.Context, host string) ([]netip.Addr, error) {
			if strings.HasSuffix(host, ".test") {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, fmt.Errorf("no such host %q", host)
		},
	}, nil, opts...)
}

// sendTo is the personality's secrets.send_to in these tests: refs below
// http/ may be sent to site.test on any port. other.test and 127.0.0.1 are
// allowed by the network policy but receive no secret.
var sendTo = map[string][]string{"http/*": {"site.test:*"}}

// secretContext returns the tool context of a call whose tool declares
// refs: the real secrets accessor and a fetcher that injects its secrets.
func secretContext(t *testing.T, refs ...string) *tool.Context {
	t.Helper()
	acc := secretsFor(refs...)
	return &tool.Context{Fetch: fetcherWith(t, 0, acc), Secrets: acc}
}

// secretEnv is the environment the env backend reads; CAPSTAN_SECRET_ is
// its default prefix.
var secretEnv = map[string]string{
	"CAPSTAN_SECRET_HTTP_API_TOKEN":    "s3cr3t-token-value-4d2f",
	"CAPSTAN_SECRET_HTTP_BAD_VALUE":    "line1\nline2",
	"CAPSTAN_SECRET_OTHER_API_TOKEN":   "other-value-8e1a",
	"CAPSTAN_SECRET_HTTP_SHORT_COOKIE": "cookie-value-77",
}

// secretValue is the value of http/api/token.
const secretValue = "s3cr3t-token-value-4d2f"

// secretsFor returns the real secrets accessor of a grant declaring refs
// (not raw) under sendTo, over the env backend reading secretEnv.
func secretsFor(refs ...string) *scopedsecrets.Accessor {
	b := secrets.NewEnv("", func(k string) string { return secretEnv[k] })
	dest, err := capability.NewSecretDestinations(sendTo)
	if err != nil {
		panic(err)
	}
	return scopedsecrets.New(&capability.RefGrant{Declared: refs, Destinations: dest}, b, nil)
}

// server is a loopback test server. It records every request it receives.
type server struct {
	*httptest.Server
	port string

	mu   sync.Mutex
	reqs []seen
}

// seen is a request as the server received it.
type seen struct {
	Method string
	Path   string
	Header http.Header
	Body   string
}

func newServer(t *testing.T, routes map[string]http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.HandleFunc(pattern, h)
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, seen{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: string(body)})
		s.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	_, port, err := net.SplitHostPort(s.Listener.Addr().String())
	require.NoError(t, err)
	s.port = port
	return s
}

// url is http://<host>:<port><path>.
func (s *server) url(host, path string) string { return "http://" + host + ":" + s.port + path }

// requests returns the requests received so far.
func (s *server) requests() []seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seen(nil), s.reqs...)
}

// respond returns a handler answering status, contentType (nil: no
// Content-Type at all) and body.
func respond(status int, contentType *string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if contentType == nil {
			w.Header()["Content-Type"] = nil // suppress sniffing by net/http
		} else {
			w.Header().Set("Content-Type", *contentType)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

func ptr[T any](v T) *T { return &v }

// redirect returns a handler redirecting (302) to target.
func redirect(target func() string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target(), http.StatusFound)
	}
}

func ctxT(t *testing.T) context.Context { return tooltest.Context(t, 30*time.Second) }

// call runs tl with args and tc.
func call(t *testing.T, tl tool.Tool, args any, tc *tool.Context) (tool.Result, error) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	return tl.Execute(ctxT(t), raw, tc)
}

// mustCall is call that requires no Go error.
func mustCall(t *testing.T, tl tool.Tool, args any, tc *tool.Context) tool.Result {
	t.Helper()
	res, err := call(t, tl, args, tc)
	require.NoError(t, err)
	return res
}

// recorder collects progress events.
type recorder struct {
	mu  sync.Mutex
	got []tool.Progress
}

func (r *recorder) emit(p tool.Progress) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, p)
	return nil
}

func (r *recorder) events() []tool.Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]tool.Progress(nil), r.got...)
}

// obj is a JSON object of arguments.
type obj = map[string]any
