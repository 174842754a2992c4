package fetch

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// redirectEnv resolves a.test, b.test, evil.test and blocked.test to
// loopback; a.test and b.test are granted on any port, blocked.test denied.
func redirectEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, envOpts{
		declared: []string{"a.test:*", "b.test:*", "blocked.test:*"},
		policy: capability.NetworkPolicy{
			Allow:            []string{"*.test:*"},
			Deny:             []string{"blocked.test"},
			AllowPrivateURLs: true,
		},
		hosts: map[string][]string{
			"a.test": {"127.0.0.1"}, "b.test": {"127.0.0.1"},
			"evil.test": {"127.0.0.1"}, "blocked.test": {"127.0.0.1"},
		},
	})
}

// to returns base + "/to?u=" + target, a redirect to target.
func to(base, target string) string { return base + "/to?u=" + url.QueryEscape(target) }

func TestRedirectFollowed(t *testing.T) {
	t.Parallel()
	_, port := newServer(t)
	a, b := "http://a.test:"+port, "http://b.test:"+port
	e := redirectEnv(t)
	resp, err := e.fetch(t, tool.Request{URL: to(a, b+"/echo")})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, b+"/echo", resp.FinalURL)
	require.Equal(t, "b.test:"+port, decodeEcho(t, resp).Host)
	require.Equal(t, int64(2), e.dials.Load(), "every hop dials, so every hop is checked")
	require.Equal(t, int64(2), e.lookups.Load())
}

func TestRedirectRefusals(t *testing.T) {
	t.Parallel()
	_, port := newServer(t)
	a := "http://a.test:" + port
	tests := []struct {
		name   string
		target string
		want   string
	}{
		{name: "host not allowed", target: "http://evil.test/x", want: "evil.test is not in the declared allowedHosts"},
		{name: "host not allowed on port", target: "http://evil.test:" + port + "/x", want: "evil.test:" + port + " is not in the declared allowedHosts"},
		{name: "denied host", target: "http://blocked.test:" + port + "/echo", want: "blocked.test:" + port + " is on the deny list"},
		{name: "scheme", target: "ftp://a.test/x", want: `scheme "ftp" is not allowed (only http and https)`},
		{name: "user info", target: "http://me:pw@a.test:" + port + "/echo", want: "URLs with user info are not allowed"},
		{name: "IP literal not allowed", target: "http://169.254.169.254/latest", want: "169.254.169.254 is not in the declared allowedHosts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := redirectEnv(t)
			resp, err := e.fetch(t, tool.Request{URL: to(a, tt.target)})
			require.Nil(t, resp)
			requireDenied(t, e, err, tt.want, 1)
			require.Equal(t, int64(1), e.dials.Load(), "only the first request connected")
		})
	}
}

func TestRedirectToMetadataWithEverythingAllowed(t *testing.T) {
	t.Parallel()
	_, port := newServer(t)
	e := newEnv(t, envOpts{
		declared: []string{"*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
		hosts:    map[string][]string{"a.test": {"127.0.0.1"}},
	})
	a := "http://a.test:" + port
	_, err := e.fetch(t, tool.Request{URL: to(a, "http://169.254.169.254/latest/meta-data/")})
	requireDenied(t, e, err, "169.254.169.254 is a cloud metadata address", 1)
	_, err = e.fetch(t, tool.Request{URL: to(a, "http://metadata.google.internal/")})
	requireDenied(t, e, err, "metadata.google.internal is a cloud metadata address", 2)
	require.Equal(t, int64(2), e.dials.Load())
}

func TestRedirectLimit(t *testing.T) {
	t.Parallel()
	_, port := newServer(t)
	e := redirectEnv(t)
	resp, err := e.fetch(t, tool.Request{URL: "http://a.test:" + port + "/chain/4"})
	require.NoError(t, err, "4 redirects, 5 requests")
	require.Equal(t, "done", string(resp.Body))
	require.Equal(t, int64(5), e.dials.Load())

	resp, err = e.fetch(t, tool.Request{URL: "http://a.test:" + port + "/chain/5"})
	require.Nil(t, resp)
	requireDenied(t, e, err, "too many redirects (at most 4)", 1)
	require.Equal(t, int64(10), e.dials.Load(), "the sixth request is never sent")
}

func TestRedirectHeaders(t *testing.T) {
	t.Parallel()
	srv, port := newServer(t)
	_, port2 := newServer(t)
	a, b := "http://a.test:"+port, "http://b.test:"+port
	a2 := "http://a.test:" + port2
	sensitive := []string{"Authorization", "cookie", "Proxy-Authorization", "x-api-key", "Apikey", "X-Auth-Token", "Client-Secret"}
	header := map[string][]string{"X-Trace": {"kept"}, "accept": {"text/plain"}}
	for _, h := range sensitive {
		header[h] = []string{"s3cr3t"}
	}
	tests := []struct {
		name    string
		url     string
		dropped bool
	}{
		{name: "same origin", url: to(a, "/echo"), dropped: false},
		{name: "same origin absolute", url: to(a, a+"/echo"), dropped: false},
		{name: "host changes", url: to(a, b+"/echo"), dropped: true},
		{name: "port changes", url: to(a, a2+"/echo"), dropped: true},
		{name: "IP literal to name", url: to(srv.URL, a+"/echo"), dropped: true},
		{name: "away and back", url: to(a, to(b, a+"/echo")), dropped: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOpts{
				declared: []string{"*"},
				policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
				hosts:    map[string][]string{"a.test": {"127.0.0.1"}, "b.test": {"127.0.0.1"}},
			})
			resp, err := e.fetch(t, tool.Request{URL: tt.url, Header: header})
			require.NoError(t, err)
			got := decodeEcho(t, resp).Header
			require.Equal(t, "kept", got.Get("X-Trace"))
			require.Equal(t, "text/plain", got.Get("Accept"))
			require.Empty(t, got.Get("Referer"), "the previous URL is never sent as Referer")
			for _, h := range sensitive {
				if tt.dropped {
					require.Empty(t, got.Values(h), "%s must be dropped", h)
				} else {
					require.Equal(t, []string{"s3cr3t"}, got.Values(h), "%s must be kept", h)
				}
			}
		})
	}
}

func TestRedirectKeepsCallerReferer(t *testing.T) {
	t.Parallel()
	_, port := newServer(t)
	e := redirectEnv(t)
	a := "http://a.test:" + port
	resp, err := e.fetch(t, tool.Request{URL: to(a, "/echo"), Header: map[string][]string{"Referer": {"https://origin.example/"}}})
	require.NoError(t, err)
	require.Equal(t, "https://origin.example/", decodeEcho(t, resp).Header.Get("Referer"))
}

func TestSensitiveHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"Authorization": true, "authorization": true, "Proxy-Authorization": true,
		"Cookie": true, "Cookie2": true, "X-Api-Key": true, "x-apikey": true, "Api_Key": true,
		"X-Goog-Api-Key": true, "Ocp-Apim-Subscription-Key": true, "X-Auth-Token": true,
		"Private-Token": true, "X-Amz-Security-Token": true, "Client-Secret": true,
		"X-Password": true, "X-Session-Id": true, "X-Hub-Signature": true, "X-Credential": true,
		"Accept": false, "Content-Type": false, "User-Agent": false, "X-Trace": false,
		"If-None-Match": false, "Referer": false, "X-Request-Id": false,
	} {
		require.Equal(t, want, sensitiveHeader(name), name)
	}
}
