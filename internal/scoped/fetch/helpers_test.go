package fetch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is a fetcher wired for tests: names resolve through a fixed table (or
// a function), and every dial is counted and must end on loopback.
type env struct {
	f       *fetcher
	dials   atomic.Int64
	lookups atomic.Int64

	mu      sync.Mutex
	dialled []string // the checked addresses the fetcher asked for
	denied  []error
}

type envOpts struct {
	declared []string
	policy   capability.NetworkPolicy
	nilGrant bool
	cfg      Config
	// hosts answers LookupIP when cfg.LookupIP is nil; other names fail.
	hosts map[string][]string
	// secrets, when set, lets the fetcher inject secret headers.
	secrets Secrets
	// dialTo, when set, receives every dial of a non-loopback address, so
	// a test can let a "public" address reach a loopback server. Loopback
	// addresses are dialled as they are, through the fetcher's guarded
	// dialer; anything else without dialTo is refused by the harness.
	dialTo string
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	var g *capability.NetworkGrant
	if !o.nilGrant {
		var err error
		g, err = capability.NewNetworkGrant(o.declared, o.policy)
		require.NoError(t, err)
	}
	e := &env{}
	lookup := o.cfg.LookupIP
	if lookup == nil {
		lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
			ss, ok := o.hosts[host]
			if !ok {
				return nil, fmt.Errorf("no such host %q", host)
			}
			var out []netip.Addr
			for _, s := range ss {
				out = append(out, netip.MustParseAddr(s))
			}
			return out, nil
		}
	}
	o.cfg.LookupIP = func(ctx context.Context, host string) ([]netip.Addr, error) {
		e.lookups.Add(1)
		return lookup(ctx, host)
	}
	var opts []Option
	if o.secrets != nil {
		opts = append(opts, WithSecrets(o.secrets))
	}
	e.f = New(g, o.cfg, func(err error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.denied = append(e.denied, err)
	}, opts...).(*fetcher)
	guarded := e.f.dialer.dial // the fetcher's own dialer, with its control hook
	plain := (&net.Dialer{}).DialContext
	e.f.dialer.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		e.dials.Add(1)
		e.mu.Lock()
		e.dialled = append(e.dialled, addr)
		e.mu.Unlock()
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, err
		}
		if ap.Addr().IsLoopback() {
			return guarded(ctx, network, addr)
		}
		if o.dialTo == "" {
			return nil, fmt.Errorf("test harness refuses to dial non-loopback %s", addr)
		}
		// A "public" address stands for a server on the internet: the
		// loopback server at dialTo plays it, so the guard (which would
		// refuse loopback) is bypassed for this one connection only.
		return plain(ctx, network, o.dialTo)
	}
	return e
}

func (e *env) fetch(t *testing.T, req tool.Request) (*tool.Response, error) {
	t.Helper()
	return e.f.Fetch(t.Context(), req)
}

func (e *env) deniedErrs() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.denied...)
}

func (e *env) dialledAddrs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.dialled...)
}

// requireDenied asserts err is exactly the HOST_NOT_ALLOWED denial with
// detail and that onDeny saw it once (after want earlier denials).
func requireDenied(t *testing.T, e *env, err error, detail string, nth int) {
	t.Helper()
	require.Error(t, err)
	var d *tool.DenialError
	require.True(t, errors.As(err, &d), "want a denial, got %T: %v", err, err)
	require.ErrorIs(t, err, tool.ErrHostNotAllowed)
	require.Equal(t, "HOST_NOT_ALLOWED: "+detail, err.Error())
	denied := e.deniedErrs()
	require.Len(t, denied, nth, "onDeny must be called once per denial")
	require.Same(t, d, denied[nth-1])
}

// requireNotDenied asserts err is a wrapped failure, not a denial.
func requireNotDenied(t *testing.T, e *env, err error) {
	t.Helper()
	require.Error(t, err)
	_, isDenial := tool.DenialCode(err)
	require.False(t, isDenial, "want a non-denial, got %v", err)
	require.True(t, strings.HasPrefix(err.Error(), "fetch "), "non-denials are wrapped: %v", err)
	require.Empty(t, e.deniedErrs())
}

// server is a loopback test server with a few routes:
//
//	/echo        200 with the request as JSON (echoed)
//	/to?u=URL    302 to URL
//	/chain/N     302 to /chain/N-1 while N > 0, then 200 "done"
//	/bytes/N     200 with N bytes
func newServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Served-By", "echo")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(echoed{Method: r.Method, Host: r.Host, Header: r.Header, Body: string(body)})
	})
	mux.HandleFunc("/to", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("u"), http.StatusFound)
	})
	mux.HandleFunc("/chain/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		if n > 0 {
			http.Redirect(w, r, "/chain/"+strconv.Itoa(n-1), http.StatusFound)
			return
		}
		_, _ = io.WriteString(w, "done")
	})
	mux.HandleFunc("/bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.PathValue("n"))
		_, _ = w.Write([]byte(strings.Repeat("x", n)))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	return srv, port
}

type echoed struct {
	Method string
	Host   string
	Header http.Header
	Body   string
}

func decodeEcho(t *testing.T, resp *tool.Response) echoed {
	t.Helper()
	var got echoed
	require.NoError(t, json.Unmarshal(resp.Body, &got))
	return got
}
