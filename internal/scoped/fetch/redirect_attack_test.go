package fetch

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// secretServer is a loopback server that stands for an internal service:
// a fetch that is refused must never reach it.
func secretServer(t *testing.T) (port string, hits *atomic.Int64) {
	t.Helper()
	hits = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("internal secret"))
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	return port, hits
}

// TestRedirectAttacks starts at a.test (a public address, played by a
// loopback server) whose /to route redirects to the target. Each redirect
// is refused with the exact detail, after the first request only, and the
// internal server is never reached; or it is followed to b.test.
func TestRedirectAttacks(t *testing.T) {
	t.Parallel()
	srv, port := newServer(t)
	secret, hits := secretServer(t)
	t.Cleanup(func() { require.Zero(t, hits.Load(), "the internal service was never reached") }) // after every subtest
	anyPort := grantSpec{declared: []string{"*"}, policy: capability.NetworkPolicy{Allow: []string{"*:*"}}}
	anyPortPrivate := grantSpec{declared: []string{"*"}, policy: capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true}}
	twoHosts := grantSpec{declared: []string{"a.test:*", "b.test:*"}, policy: capability.NetworkPolicy{Allow: []string{"*:*"}, Deny: []string{"blocked.test"}}}
	hosts := map[string][]string{
		"a.test": {"8.8.8.8"}, "b.test": {"8.8.4.4"}, "evil.test": {"8.8.8.8"}, "blocked.test": {"8.8.8.8"},
		"localhost": {"127.0.0.1", "::1"}, "sneaky.test": {"169.254.169.254"}, "internal.test": {"10.0.0.7"},
	}
	tests := []struct {
		name   string
		grant  grantSpec
		target string
		want   string // "" = followed to b.test's /echo
	}{
		{name: "to another allowed host", grant: twoHosts, target: "http://b.test:" + port + "/echo"},
		{name: "to a host not allowed", grant: twoHosts, target: "http://evil.test:" + port + "/echo", want: "evil.test:" + port + " is not in the declared allowedHosts"},
		{name: "to a denied host", grant: twoHosts, target: "http://blocked.test:" + port + "/echo", want: "blocked.test:" + port + " is on the deny list"},
		{name: "scheme-relative to a host not allowed", grant: twoHosts, target: "//evil.test/x", want: "evil.test is not in the declared allowedHosts"},
		{name: "user info", grant: twoHosts, target: "http://b.test@evil.test/", want: "URLs with user info are not allowed"},
		{name: "to metadata", grant: anyPort, target: "http://169.254.169.254/latest/meta-data/", want: "169.254.169.254 is a cloud metadata address"},
		{name: "to metadata with private allowed", grant: anyPortPrivate, target: "http://169.254.169.254/latest/meta-data/", want: "169.254.169.254 is a cloud metadata address"},
		{name: "to IPv4-mapped metadata", grant: anyPortPrivate, target: "http://[::ffff:169.254.169.254]/", want: "169.254.169.254 is a cloud metadata address"},
		{name: "to NAT64 metadata", grant: anyPortPrivate, target: "http://[64:ff9b::a9fe:a9fe]/", want: "[64:ff9b::a9fe:a9fe] is a cloud metadata address"},
		{name: "to a metadata name", grant: anyPortPrivate, target: "http://metadata.google.internal/computeMetadata/v1/", want: "metadata.google.internal is a cloud metadata address"},
		{name: "to a name resolving to metadata", grant: anyPortPrivate, target: "http://sneaky.test/", want: "sneaky.test is a cloud metadata address"},
		{name: "to loopback", grant: anyPort, target: "http://127.0.0.1:" + secret + "/", want: "127.0.0.1:" + secret + " resolves to a private or reserved address"},
		{name: "to loopback IPv6", grant: anyPort, target: "http://[::1]:" + secret + "/", want: "[::1]:" + secret + " resolves to a private or reserved address"},
		{name: "to unspecified (Linux dials loopback)", grant: anyPort, target: "http://0.0.0.0:" + secret + "/", want: "0.0.0.0:" + secret + " resolves to a private or reserved address"},
		{name: "to localhost", grant: anyPort, target: "http://localhost:" + secret + "/", want: "localhost:" + secret + " resolves to a private or reserved address"},
		{name: "to a private address", grant: anyPort, target: "http://10.0.0.1/", want: "10.0.0.1 resolves to a private or reserved address"},
		{name: "to a name resolving to a private address", grant: anyPort, target: "http://internal.test/", want: "internal.test resolves to a private or reserved address"},
		{name: "to a decimal IP", grant: anyPort, target: "http://2130706433:" + secret + "/", want: `invalid URL: invalid host name "2130706433": the last label must not be a number`},
		{name: "to file", grant: anyPortPrivate, target: "file:///etc/passwd", want: `scheme "file" is not allowed (only http and https)`},
		{name: "to gopher", grant: anyPortPrivate, target: "gopher://127.0.0.1:" + secret + "/_SET%20x", want: `scheme "gopher" is not allowed (only http and https)`},
		{name: "to ftp", grant: anyPortPrivate, target: "ftp://b.test/", want: `scheme "ftp" is not allowed (only http and https)`},
		{name: "to data", grant: anyPortPrivate, target: "data:text/plain,hello", want: `scheme "data" is not allowed (only http and https)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{declared: tt.grant.declared, policy: tt.grant.policy, hosts: hosts, dialTo: srv.Listener.Addr().String()})
			resp, err := e.fetch(t, tool.Request{URL: to("http://a.test:"+port, tt.target)})
			if tt.want == "" {
				require.NoError(t, err)
				require.Equal(t, http.StatusCreated, resp.StatusCode)
				require.Equal(t, "b.test:"+port, decodeEcho(t, resp).Host)
				require.Equal(t, []string{"8.8.8.8:" + port, "8.8.4.4:" + port}, e.dialledAddrs())
				return
			}
			require.Nil(t, resp)
			requireDenied(t, e, err, tt.want, 1)
			require.Equal(t, []string{"8.8.8.8:" + port}, e.dialledAddrs(), "only the first request connected")
		})
	}
}

// TestRedirectDowngrade follows an https page that redirects to http on
// the same host: allowed (both schemes are), but the caller's credentials
// do not follow, since the origin changed.
func TestRedirectDowngrade(t *testing.T) {
	t.Parallel()
	_, port := newServer(t)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://a.test:"+port+"/echo", http.StatusFound)
	}))
	t.Cleanup(tlsSrv.Close)
	_, tlsPort, err := net.SplitHostPort(tlsSrv.Listener.Addr().String())
	require.NoError(t, err)
	e := newEnv(t, envOpts{
		declared: []string{"a.test:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
		hosts:    map[string][]string{"a.test": {"127.0.0.1"}},
	})
	e.f.transport.TLSClientConfig = tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	e.f.transport.TLSClientConfig.ServerName = "example.com" // the test certificate's name
	resp, err := e.fetch(t, tool.Request{URL: "https://a.test:" + tlsPort + "/", Header: map[string][]string{"Authorization": {"Bearer s3cr3t"}, "X-Trace": {"kept"}}})
	require.NoError(t, err)
	require.Equal(t, "http://a.test:"+port+"/echo", resp.FinalURL)
	got := decodeEcho(t, resp).Header
	require.Empty(t, got.Values("Authorization"), "credentials never follow a scheme change")
	require.Equal(t, "kept", got.Get("X-Trace"))
}

// TestRedirectBadLocation: a Location the client cannot parse is refused
// without quoting it (it may carry a credential in its query).
func TestRedirectBadLocation(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Location", "http://evil.test%zz/?token=s3cr3t")
		w.WriteHeader(http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t, envOpts{
		declared: []string{"127.0.0.1:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"127.0.0.1:*"}, AllowPrivateURLs: true},
	})
	resp, err := e.fetch(t, tool.Request{URL: srv.URL + "/"})
	require.Nil(t, resp)
	requireDenied(t, e, err, "invalid URL: the redirect location cannot be parsed", 1)
	require.Equal(t, int64(1), e.dials.Load())
}
