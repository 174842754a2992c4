package vault_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/vault/api"
	"github.com/hashicorp/vault/builtin/credential/approle"
	vaulthttp "github.com/hashicorp/vault/http"
	"github.com/hashicorp/vault/sdk/logical"
	"github.com/hashicorp/vault/vault"
	"github.com/stretchr/testify/require"
)

// testVault is a real Vault core, unsealed, serving its real HTTP API on a
// loopback port, with KV v2 at secret/, AppRole enabled and a policy
// "capstan" that reads secret/data/*. Clients reach it through front, a
// proxy the test can take down and bring back.
type testVault struct {
	core  *vault.Core
	root  *api.Client // root token, direct to the core
	front *frontProxy
}

func startVault(t *testing.T) *testVault {
	t.Helper()
	core, _, rootToken := vault.TestCoreUnsealedWithConfig(t, &vault.CoreConfig{
		CredentialBackends: map[string]logical.Factory{"approle": approle.Factory},
		// Vault's own warnings and errors only, in the test's output.
		Logger: hclog.New(&hclog.LoggerOptions{Name: "vault", Level: hclog.Warn, Output: t.Output()}),
	})
	_, addr := vaulthttp.TestServer(t, core)
	root, err := api.NewClient(&api.Config{Address: addr})
	require.NoError(t, err)
	root.SetToken(rootToken)

	// The test core mounts a KV v1 at secret/; production uses KV v2 there.
	require.NoError(t, root.Sys().Unmount("secret"))
	require.NoError(t, root.Sys().Mount("secret", &api.MountInput{Type: "kv", Options: map[string]string{"version": "2"}}))
	require.NoError(t, root.Sys().PutPolicy("capstan", `path "secret/data/*" { capabilities = ["read"] }`))
	require.NoError(t, root.Sys().EnableAuthWithOptions("approle", &api.EnableAuthOptions{Type: "approle"}))
	tv := &testVault{core: core, root: root, front: newFrontProxy(t, addr)}
	// A fresh KV v2 mount takes a moment before it accepts writes.
	eventually(t, 10*time.Second, func() error {
		_, err := root.KVv2("secret").Put(context.Background(), "warmup", map[string]any{"x": "y"})
		return err
	})
	return tv
}

// put writes fields at the KV v2 path below secret/.
func (tv *testVault) put(t *testing.T, path string, fields map[string]any) {
	t.Helper()
	_, err := tv.root.KVv2("secret").Put(context.Background(), path, fields)
	require.NoError(t, err)
}

// seed writes every ref of seed under prefix, grouping fields by path.
func (tv *testVault) seed(t *testing.T, prefix string, seed map[string]string) {
	t.Helper()
	byPath := map[string]map[string]any{}
	for ref, v := range seed {
		i := strings.LastIndex(ref, "/")
		path, field := prefix, ref
		if i >= 0 {
			path, field = prefix+"/"+ref[:i], ref[i+1:]
		}
		if byPath[path] == nil {
			byPath[path] = map[string]any{}
		}
		byPath[path][field] = v
	}
	for path, fields := range byPath {
		tv.put(t, path, fields)
	}
}

// token creates a renewable token with the given policies and TTL.
func (tv *testVault) token(t *testing.T, ttl string, policies ...string) string {
	t.Helper()
	s, err := tv.root.Auth().Token().Create(&api.TokenCreateRequest{Policies: policies, TTL: ttl, Renewable: new(true)})
	require.NoError(t, err)
	return s.Auth.ClientToken
}

// appRole creates an AppRole role whose tokens carry policies with the given
// TTLs (Vault duration strings, "" for Vault's default) and returns its role
// id and a fresh secret id.
func (tv *testVault) appRole(t *testing.T, name, ttl, maxTTL string, policies ...string) (roleID, secretID string) {
	t.Helper()
	data := map[string]any{"token_policies": strings.Join(policies, ",")}
	if ttl != "" {
		data["token_ttl"] = ttl
	}
	if maxTTL != "" {
		data["token_max_ttl"] = maxTTL
	}
	_, err := tv.root.Logical().Write("auth/approle/role/"+name, data)
	require.NoError(t, err)
	r, err := tv.root.Logical().Read("auth/approle/role/" + name + "/role-id")
	require.NoError(t, err)
	s, err := tv.root.Logical().Write("auth/approle/role/"+name+"/secret-id", nil)
	require.NoError(t, err)
	return r.Data["role_id"].(string), s.Data["secret_id"].(string)
}

// frontProxy forwards HTTP to the Vault server and counts request paths. Down
// closes its listener and every connection (clients then see connection
// refused); Up listens again on the same port.
type frontProxy struct {
	t      *testing.T
	addr   string // host:port
	target *url.URL

	mu     sync.Mutex
	srv    *http.Server
	counts map[string]int
}

func newFrontProxy(t *testing.T, target string) *frontProxy {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &frontProxy{t: t, addr: ln.Addr().String(), target: u, counts: map[string]int{}}
	p.serve(ln)
	t.Cleanup(p.Down)
	return p
}

// URL is the address clients use.
func (p *frontProxy) URL() string { return "http://" + p.addr }

func (p *frontProxy) serve(ln net.Listener) {
	rp := httputil.NewSingleHostReverseProxy(p.target)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.counts[r.Method+" "+r.URL.Path]++
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 5 * time.Second}
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// Down makes Vault unreachable: nothing listens on the port any more.
func (p *frontProxy) Down() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Up makes Vault reachable again on the same address.
func (p *frontProxy) Up() {
	p.t.Helper()
	var ln net.Listener
	eventually(p.t, 10*time.Second, func() error {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		return err
	})
	p.serve(ln)
}

// Count returns how many requests with method and path went through.
func (p *frontProxy) Count(method, path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[method+" "+path]
}

// eventually polls fn every 50ms until it returns nil or the deadline passes.
func eventually(t *testing.T, within time.Duration, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %v", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// requireNoSecret fails when text holds any of values.
func requireNoSecret(t *testing.T, text string, values ...string) {
	t.Helper()
	for _, v := range values {
		if v != "" && strings.Contains(text, v) {
			t.Fatalf("a secret value appears in the log:\n%s", text)
		}
	}
}

var errNotYet = errors.New("not yet")

// tlsServer is an HTTPS server answering 404 to everything, with its
// certificate's CA written to caFile.
type tlsServer struct {
	*httptest.Server
	caFile string
}

func newTLSServer(t *testing.T) *tlsServer {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"errors":[]}`))
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	require.NoError(t, os.WriteFile(ca, pemBytes, 0o600))
	return &tlsServer{Server: srv, caFile: ca}
}
