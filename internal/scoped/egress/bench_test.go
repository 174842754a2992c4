package egress

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
)

// BenchmarkProxyOverhead measures what the proxy adds to a loopback GET of
// a small body. Each iteration does one GET straight to the server and one
// through the proxy, alternately, so both see the same machine load; the
// reported metrics are direct-ns/op, proxied-ns/op and their difference,
// added-ns/op (ns/op itself is the sum of both). Modes:
//
//	http/keepalive=off     a new client connection per request, absolute-form
//	http/keepalive=on      one kept-alive client connection, absolute-form
//	                       (the proxy still dials, and checks, every request)
//	connect/keepalive=off  a new CONNECT tunnel and TLS handshake per request
//	connect/keepalive=on   one tunnel, TLS requests through it
func BenchmarkProxyOverhead(b *testing.B) {
	body := strings.Repeat("x", 512)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, body) })
	plain := httptest.NewServer(handler)
	b.Cleanup(plain.Close)
	secure := httptest.NewTLSServer(handler)
	b.Cleanup(secure.Close)
	plainPort, securePort := portOf(b, plain.Listener.Addr()), portOf(b, secure.Listener.Addr())
	p := startProxy(b, proxyOpts{
		declared: []string{"allowed.test:*"},
		policy:   capability.NetworkPolicy{Allow: []string{"*:*"}, AllowPrivateURLs: true},
	})

	modes := []struct {
		name      string
		srv       *httptest.Server
		keepAlive bool
		direct    string
		proxied   string
	}{
		{"http/keepalive=off", plain, false, "http://127.0.0.1:" + plainPort + "/", "http://allowed.test:" + plainPort + "/"},
		{"http/keepalive=on", plain, true, "http://127.0.0.1:" + plainPort + "/", "http://allowed.test:" + plainPort + "/"},
		{"connect/keepalive=off", secure, false, "https://127.0.0.1:" + securePort + "/", "https://allowed.test:" + securePort + "/"},
		{"connect/keepalive=on", secure, true, "https://127.0.0.1:" + securePort + "/", "https://allowed.test:" + securePort + "/"},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			direct := &http.Transport{Proxy: nil, DisableKeepAlives: !m.keepAlive}
			if m.srv.TLS != nil {
				direct.TLSClientConfig = tlsConfigFor(m.srv)
			}
			b.Cleanup(direct.CloseIdleConnections)
			directClient := &http.Client{Transport: direct}
			proxiedClient := p.client(b, m.srv, m.keepAlive)
			get := func(c *http.Client, url string) time.Duration {
				start := time.Now()
				resp, err := c.Get(url)
				require.NoError(b, err)
				n, err := io.Copy(io.Discard, resp.Body)
				require.NoError(b, err)
				resp.Body.Close()
				d := time.Since(start)
				require.Equal(b, http.StatusOK, resp.StatusCode)
				require.Equal(b, int64(len(body)), n)
				return d
			}
			get(directClient, m.direct) // warm up: connections, TLS sessions
			get(proxiedClient, m.proxied)
			var directTotal, proxiedTotal time.Duration
			b.ResetTimer()
			for b.Loop() {
				directTotal += get(directClient, m.direct)
				proxiedTotal += get(proxiedClient, m.proxied)
			}
			n := float64(b.N)
			b.ReportMetric(float64(directTotal.Nanoseconds())/n, "direct-ns/op")
			b.ReportMetric(float64(proxiedTotal.Nanoseconds())/n, "proxied-ns/op")
			b.ReportMetric(float64((proxiedTotal-directTotal).Nanoseconds())/n, "added-ns/op")
		})
	}
	require.Empty(b, p.deniedErrs())
}
