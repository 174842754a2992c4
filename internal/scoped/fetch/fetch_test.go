package fetch

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

func TestFetchRefusals(t *testing.T) {
	t.Parallel()
	everything := capability.NetworkPolicy{Allow: []string{"*:*"}}
	everythingPrivate := capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true}
	hosts := map[string][]string{
		"internal.test":            {"10.1.2.3"},
		"cgnat.test":               {"100.64.1.1"},
		"mixed.test":               {"8.8.8.8", "10.0.0.1"},
		"sneaky.test":              {"169.254.169.254"},
		"sneaky6.test":             {"fd00:ec2::254"},
		"metadata.google.internal": {"169.254.169.254"},
	}
	tests := []struct {
		name     string
		url      string
		declared []string
		policy   capability.NetworkPolicy
		nilGrant bool
		want     string
	}{
		{name: "scheme ftp", url: "ftp://example.com/x", declared: []string{"*"}, policy: everything,
			want: `scheme "ftp" is not allowed (only http and https)`},
		{name: "scheme file upper case", url: "FILE:///etc/passwd", declared: []string{"*"}, policy: everything,
			want: `scheme "file" is not allowed (only http and https)`},
		{name: "user info", url: "http://user:pw@example.com/", declared: []string{"*"}, policy: everything,
			want: "URLs with user info are not allowed"},
		{name: "user name only", url: "https://token@example.com/", declared: []string{"*"}, policy: everything,
			want: "URLs with user info are not allowed"},
		{name: "missing host", url: "http:///path", declared: []string{"*"}, policy: everything,
			want: "invalid URL: missing host"},
		{name: "missing scheme", url: "/relative/path", declared: []string{"*"}, policy: everything,
			want: "invalid URL: missing scheme"},
		{name: "bad port", url: "http://example.com:99999/", declared: []string{"*"}, policy: everything,
			want: `invalid URL: port "99999" must be a number from 1 to 65535`},
		{name: "space in host", url: "http://exa mple.com/", declared: []string{"*"}, policy: everything,
			want: `invalid URL: invalid character " " in host name`},
		{name: "numeric last label", url: "http://127.1/", declared: []string{"*"}, policy: everything,
			want: `invalid URL: invalid host name "127.1": the last label must not be a number`},
		{name: "not in allowedHosts", url: "https://api.stripe.com/v1/charges", declared: []string{"example.com"},
			policy: capability.NetworkPolicy{Allow: []string{"*"}}, want: "api.stripe.com is not in the declared allowedHosts"},
		{name: "declared but not allowed by personality", url: "https://example.com/", declared: []string{"example.com"},
			policy: capability.NetworkPolicy{Allow: []string{"other.com"}}, want: "example.com is not in the declared allowedHosts"},
		{name: "non-default port", url: "http://EXAMPLE.com:8443/a", declared: []string{"example.com"},
			policy: capability.NetworkPolicy{Allow: []string{"*"}}, want: "example.com:8443 is not in the declared allowedHosts"},
		{name: "explicit default port", url: "https://Example.COM.:443/", declared: []string{"other.com"},
			policy: everything, want: "example.com is not in the declared allowedHosts"},
		{name: "nil grant", url: "http://example.com/", nilGrant: true,
			want: "example.com is not in the declared allowedHosts"},
		{name: "deny list", url: "https://gist.github.com/x", declared: []string{"*"},
			policy: capability.NetworkPolicy{Allow: []string{"*.github.com"}, Deny: []string{"gist.github.com"}},
			want:   "gist.github.com is on the deny list"},
		{name: "deny list every port", url: "https://gist.github.com:8443/x", declared: []string{"*"},
			policy: capability.NetworkPolicy{Allow: []string{"*.github.com:*"}, Deny: []string{"gist.github.com"}},
			want:   "gist.github.com:8443 is on the deny list"},
		{name: "private IP literal", url: "http://10.0.0.1/", declared: []string{"10.0.0.0/8"},
			policy: capability.NetworkPolicy{Allow: []string{"10.0.0.0/8"}}, want: "10.0.0.1 resolves to a private or reserved address"},
		{name: "private by name", url: "http://internal.test/", declared: []string{"internal.test"},
			policy: everything, want: "internal.test resolves to a private or reserved address"},
		{name: "CGNAT by name", url: "http://cgnat.test:8080/", declared: []string{"*"},
			policy: everything, want: "cgnat.test:8080 resolves to a private or reserved address"},
		{name: "one private address among public", url: "http://mixed.test/", declared: []string{"*"},
			policy: everything, want: "mixed.test resolves to a private or reserved address"},
		{name: "loopback", url: "http://127.0.0.1:8080/", declared: []string{"127.0.0.1:8080"},
			policy: everything, want: "127.0.0.1:8080 resolves to a private or reserved address"},
		{name: "multicast", url: "http://224.0.0.1/", declared: []string{"*"},
			policy: everything, want: "224.0.0.1 resolves to a private or reserved address"},
		{name: "link-local IPv6", url: "http://[fe80::1]/", declared: []string{"*"},
			policy: everything, want: "[fe80::1] resolves to a private or reserved address"},
		{name: "IPv6 not allowed", url: "http://[::1]:8080/", declared: []string{"example.com"},
			policy: everything, want: "[::1]:8080 is not in the declared allowedHosts"},
		{name: "IPv6 loopback", url: "http://[0:0::1]:8080/", declared: []string{"[::1]:8080"},
			policy: everything, want: "[::1]:8080 resolves to a private or reserved address"},
		{name: "metadata IP", url: "http://169.254.169.254/latest/meta-data/", declared: []string{"*"},
			policy: everything, want: "169.254.169.254 is a cloud metadata address"},
		{name: "metadata IP with private allowed", url: "http://169.254.169.254/latest/meta-data/", declared: []string{"*"},
			policy: everythingPrivate, want: "169.254.169.254 is a cloud metadata address"},
		{name: "ECS metadata", url: "http://169.254.170.2/v2/credentials", declared: []string{"*"},
			policy: everythingPrivate, want: "169.254.170.2 is a cloud metadata address"},
		{name: "Alibaba metadata", url: "http://100.100.100.200/latest/meta-data", declared: []string{"*"},
			policy: everythingPrivate, want: "100.100.100.200 is a cloud metadata address"},
		{name: "AWS IPv6 metadata", url: "http://[fd00:ec2::254]/latest", declared: []string{"*"},
			policy: everythingPrivate, want: "[fd00:ec2::254] is a cloud metadata address"},
		{name: "NAT64 metadata", url: "http://[64:ff9b::a9fe:a9fe]/", declared: []string{"*"},
			policy: everythingPrivate, want: "[64:ff9b::a9fe:a9fe] is a cloud metadata address"},
		{name: "metadata name", url: "http://metadata.google.internal/computeMetadata/v1/", declared: []string{"*"},
			policy: everythingPrivate, want: "metadata.google.internal is a cloud metadata address"},
		{name: "metadata name spelled oddly", url: "http://Metadata.Google.Internal.:8080/", declared: []string{"*"},
			policy: everythingPrivate, want: "metadata.google.internal:8080 is a cloud metadata address"},
		{name: "name resolving to metadata", url: "http://sneaky.test/", declared: []string{"*"},
			policy: everythingPrivate, want: "sneaky.test is a cloud metadata address"},
		{name: "name resolving to IPv6 metadata", url: "https://sneaky6.test/", declared: []string{"*"},
			policy: everythingPrivate, want: "sneaky6.test is a cloud metadata address"},
		{name: "not allowed wins over metadata", url: "http://169.254.169.254/", declared: []string{"example.com"},
			policy: everythingPrivate, want: "169.254.169.254 is not in the declared allowedHosts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{declared: tt.declared, policy: tt.policy, nilGrant: tt.nilGrant, hosts: hosts})
			resp, err := e.fetch(t, tool.Request{URL: tt.url, Header: map[string][]string{"Authorization": {"Bearer s3cr3t"}}})
			require.Nil(t, resp)
			requireDenied(t, e, err, tt.want, 1)
			require.NotContains(t, err.Error(), "s3cr3t")
			require.Zero(t, e.dials.Load(), "refused before any dial")
			if strings.Contains(tt.name, "metadata name") {
				require.Zero(t, e.lookups.Load(), "metadata names are refused before DNS")
			}
		})
	}
}

func TestFetchOK(t *testing.T) {
	t.Parallel()
	_, port := newServer(t)
	e := newEnv(t, envOpts{
		declared: []string{"api.test:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*.test:*"}, AllowPrivateURLs: true},
		hosts:    map[string][]string{"api.test": {"127.0.0.1"}},
	})
	resp, err := e.fetch(t, tool.Request{
		Method: http.MethodPost,
		URL:    "http://API.test:" + port + "/echo?q=1",
		Header: map[string][]string{"X-Trace": {"abc"}, "Authorization": {"Bearer t"}},
		Body:   []byte(`{"a":1}`),
	})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "201 Created", resp.Status)
	require.Equal(t, []string{"echo"}, resp.Header["X-Served-By"])
	require.Equal(t, "http://api.test:"+port+"/echo?q=1", resp.FinalURL, "the URL as matched and fetched")
	require.False(t, resp.Truncated)
	got := decodeEcho(t, resp)
	require.Equal(t, http.MethodPost, got.Method)
	require.Equal(t, `{"a":1}`, got.Body)
	require.Equal(t, "abc", got.Header.Get("X-Trace"))
	require.Equal(t, "Bearer t", got.Header.Get("Authorization"))
	require.Equal(t, []string{"127.0.0.1:" + port}, e.dialledAddrs(), "the checked address is dialled, not the name")

	resp, err = e.fetch(t, tool.Request{URL: "http://api.test:" + port + "/echo"})
	require.NoError(t, err)
	require.Equal(t, http.MethodGet, decodeEcho(t, resp).Method, "GET by default")
	require.Empty(t, e.deniedErrs())
}

func TestFetchIgnoresProxyEnvironment(t *testing.T) {
	// Not parallel: it sets the environment.
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	_, port := newServer(t)
	e := newEnv(t, envOpts{
		declared: []string{"api.test:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
		hosts:    map[string][]string{"api.test": {"127.0.0.1"}},
	})
	resp, err := e.fetch(t, tool.Request{URL: "http://api.test:" + port + "/echo"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Nil(t, e.f.transport.Proxy)
}

func TestFetchHTTPS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(r.TLS.ServerName + " " + r.Host + " " + r.Proto))
	}))
	srv.EnableHTTP2 = true
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	e := newEnv(t, envOpts{
		declared: []string{"example.com:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"example.com:*"}, AllowPrivateURLs: true},
		hosts:    map[string][]string{"example.com": {"127.0.0.1"}},
	})
	e.f.transport.TLSClientConfig = &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	resp, err := e.fetch(t, tool.Request{URL: "https://example.com:" + port + "/"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasPrefix(string(resp.Body), "example.com "), "SNI is the name, not the dialled address: %s", resp.Body)
	require.Equal(t, int64(1), e.dials.Load())

	// A soft hyphen is dropped by the matcher's IDNA mapping; the server
	// name and the Host header are the name as matched, not the
	// transport's own conversion (xn--exampl-gva.com).
	resp, err = e.fetch(t, tool.Request{URL: "https://exam\u00adple.com:" + port + "/"})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(resp.Body), "example.com example.com:"+port+" "), "SNI and Host are the matched name: %s", resp.Body)
}

func TestFetchBodyCap(t *testing.T) {
	t.Parallel()
	_, port := newServer(t)
	tests := []struct {
		name      string
		size      int
		limit     int64
		want      int
		truncated bool
	}{
		{name: "under", size: 5, limit: 10, want: 5},
		{name: "exactly", size: 10, limit: 10, want: 10},
		{name: "over", size: 11, limit: 10, want: 10, truncated: true},
		{name: "far over", size: 1 << 20, limit: 1000, want: 1000, truncated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{
				declared: []string{"127.0.0.1:*"},
				policy:   capability.NetworkPolicy{Allow: []string{"127.0.0.1:*"}, AllowPrivateURLs: true},
				cfg:      Config{MaxBodyBytes: tt.limit},
			})
			resp, err := e.fetch(t, tool.Request{URL: "http://127.0.0.1:" + port + "/bytes/" + strconv.Itoa(tt.size)})
			require.NoError(t, err)
			require.Len(t, resp.Body, tt.want)
			require.Equal(t, tt.truncated, resp.Truncated)
		})
	}
}

func TestFetchContextCancel(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	e := newEnv(t, envOpts{
		declared: []string{"127.0.0.1:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"127.0.0.1:*"}, AllowPrivateURLs: true},
	})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-started
		cancel()
	}()
	begin := time.Now()
	resp, err := e.f.Fetch(ctx, tool.Request{URL: srv.URL + "/slow?token=s3cr3t"})
	require.Nil(t, resp)
	requireNotDenied(t, e, err)
	require.ErrorIs(t, err, context.Canceled)
	require.NotContains(t, err.Error(), "s3cr3t", "errors carry the origin only")
	require.Less(t, time.Since(begin), 10*time.Second)
}

func TestFetchTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	e := newEnv(t, envOpts{
		declared: []string{"127.0.0.1:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"127.0.0.1:*"}, AllowPrivateURLs: true},
		cfg:      Config{Timeout: 200 * time.Millisecond},
	})
	_, err := e.fetch(t, tool.Request{URL: srv.URL})
	requireNotDenied(t, e, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "fetch GET "+srv.URL+": timed out after 200ms")
}

func TestFetchConnectionRefusedIsNotADenial(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	e := newEnv(t, envOpts{
		declared: []string{"127.0.0.1:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"127.0.0.1:*"}, AllowPrivateURLs: true},
	})
	_, err = e.fetch(t, tool.Request{URL: "http://" + addr + "/x?key=s3cr3t", Header: map[string][]string{"Cookie": {"s3cr3t"}}, Body: []byte("s3cr3t")})
	requireNotDenied(t, e, err)
	require.True(t, strings.HasPrefix(err.Error(), "fetch GET http://"+addr+": "), err.Error())
	require.Contains(t, err.Error(), "connection refused")
	require.NotContains(t, err.Error(), "s3cr3t")
}

func TestFetchResolveErrorIsNotADenial(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{declared: []string{"*"}, policy: capability.NetworkPolicy{Allow: []string{"*"}}})
	_, err := e.fetch(t, tool.Request{URL: "https://nowhere.test/"})
	requireNotDenied(t, e, err)
	require.Equal(t, `fetch GET https://nowhere.test: resolve nowhere.test: no such host "nowhere.test"`, err.Error())
	require.Zero(t, e.dials.Load())
}

func TestFetchBadMethodIsNotADenial(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{declared: []string{"*"}, policy: capability.NetworkPolicy{Allow: []string{"*"}}})
	_, err := e.fetch(t, tool.Request{Method: "GET /x", URL: "https://example.com/"})
	requireNotDenied(t, e, err)
	require.Zero(t, e.lookups.Load())
}

func TestConfig(t *testing.T) {
	t.Parallel()
	f := New(nil, Config{}, nil).(*fetcher)
	require.Equal(t, DefaultMaxBodyBytes, f.cfg.MaxBodyBytes)
	require.Equal(t, DefaultTimeout, f.cfg.Timeout)
	require.NotNil(t, f.cfg.LookupIP)
	require.Nil(t, f.transport.Proxy)

	err := Config{MaxBodyBytes: -1, Timeout: -time.Second}.Validate()
	require.ErrorContains(t, err, "Config.MaxBodyBytes must not be negative")
	require.ErrorContains(t, err, "Config.Timeout must not be negative")
	require.Panics(t, func() { New(nil, Config{MaxBodyBytes: -1}, nil) })

	// A nil onDeny is allowed.
	_, err = f.Fetch(t.Context(), tool.Request{URL: "http://example.com/"})
	require.EqualError(t, err, "HOST_NOT_ALLOWED: example.com is not in the declared allowedHosts")
}
