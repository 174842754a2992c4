package fetch

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	scopedsecrets "github.com/capstanhq/capstan/internal/scoped/secrets"
	"github.com/capstanhq/capstan/tool"
)

// injectorSource declares http/* and binds http/api/* to the endpoint
// 127.0.0.1:<port> only.
func injectorSource(t *testing.T, port string) (SecretSource, *countingBackend) {
	t.Helper()
	dest, err := capability.NewSecretDestinations(map[string][]string{"http/api/*": {"127.0.0.1:" + port}})
	require.NoError(t, err)
	b := &countingBackend{}
	a := scopedsecrets.New(&capability.RefGrant{Declared: []string{"http/*"}, Destinations: dest}, b, nil)
	return scopedsecrets.NewInjection(a), b
}

func loopback(t *testing.T, port string) capability.Endpoint {
	t.Helper()
	u, err := url.Parse("http://127.0.0.1:" + port)
	require.NoError(t, err)
	e, err := endpointOf(u)
	require.NoError(t, err)
	return e
}

// An Injector (a long-lived client's injection at egress) sends the
// secret headers to its origin only, through a client that follows
// redirects: never to another host (another port of the same address is
// another host for the send_to matcher), never to a hop after the chain
// left the origin, even back to it; a same-origin hop keeps them.
func TestInjectorSendsToItsOriginOnly(t *testing.T) {
	t.Parallel()
	origin, other := newRecordingServer(t), newRecordingServer(t)
	src, backend := injectorSource(t, origin.port)
	inj, err := NewInjector(context.Background(), src, bearer("http/api/token"), loopback(t, origin.port))
	require.NoError(t, err)
	require.Equal(t, []string{tokenValue}, inj.Values())
	require.EqualValues(t, 1, backend.calls.Load(), "resolved once, when built")

	base := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(base.CloseIdleConnections)
	client := &http.Client{Transport: inj.Transport(base)}
	get := func(u string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, u, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Empty(t, req.Header.Get("Authorization"), "the client's request never holds the value")
	}
	auth := func(s *recordingServer) []string {
		var out []string
		for _, r := range s.requests() {
			out = append(out, r.Authorization)
		}
		return out
	}
	const sent = "Bearer " + tokenValue
	o, x := origin.url("127.0.0.1", ""), other.url("127.0.0.1", "")

	get(o + "/echo")
	require.Equal(t, []string{sent}, auth(origin))

	get(x + "/echo")
	require.Equal(t, []string{""}, auth(other), "another host never gets it")

	get(o + "/to?u=" + url.QueryEscape(x+"/echo"))
	require.Equal(t, []string{sent, sent}, auth(origin))
	require.Equal(t, []string{"", ""}, auth(other), "a redirect hop to another host does not carry it")

	get(x + "/to?u=" + url.QueryEscape(o+"/echo"))
	require.Equal(t, []string{sent, sent, ""}, auth(origin), "a chain that left the origin never gets it back")

	get(o + "/to?u=" + url.QueryEscape(o+"/echo"))
	require.Equal(t, []string{sent, sent, "", sent, sent}, auth(origin), "a same-origin hop keeps it")
}

// NewInjector refuses, before anything is resolved, a ref its source does
// not let go to the origin.
func TestNewInjectorRefusesAnUnboundOrigin(t *testing.T) {
	t.Parallel()
	src, backend := injectorSource(t, "1")
	_, err := NewInjector(context.Background(), src, bearer("http/api/token"), loopback(t, "2"))
	require.EqualError(t, err, "SECRET_DESTINATION: this secret may not be sent to 127.0.0.1:2")
	require.ErrorIs(t, err, tool.ErrSecretDestination)
	require.Zero(t, backend.calls.Load())

	inj, err := NewInjector(context.Background(), src, nil, loopback(t, "1"))
	require.NoError(t, err)
	require.Nil(t, inj, "no headers, no injector")
	require.Nil(t, inj.Values())
	rt := http.DefaultTransport
	require.Equal(t, rt, inj.Transport(rt))
}
