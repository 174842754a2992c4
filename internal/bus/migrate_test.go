package bus_test

import (
	"maps"
	"testing"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// capstanStreams are the streams EnsureTopology creates (buckets aside).
var capstanStreams = []string{"CAPSTAN_CALLS", "CAPSTAN_RESULTS", "CAPSTAN_PROGRESS", "CAPSTAN_DLQ", "CAPSTAN_AUDIT", "CAPSTAN_ADVISORIES"}

// versionOneServer returns a server holding Capstan's streams as protocol
// version 1 left them: today's configuration without the protocol metadata
// and without direct gets on the results stream, plus whatever messages
// publish stores. It returns the server's URL and a raw JetStream handle.
func versionOneServer(t *testing.T, publish map[string]string) (string, jetstream.JetStream) {
	t.Helper()
	// The configurations of this version, taken from a server it set up.
	ref := bustest.Server(t)
	require.NoError(t, bustest.Conn(t, ref, "").EnsureTopology(ctxT(t)))
	refJS := rawJS(t, ref)
	url := bustest.Server(t)
	js := rawJS(t, url)
	for _, name := range capstanStreams {
		s, err := refJS.Stream(ctxT(t), name)
		require.NoError(t, err)
		cfg := s.CachedInfo().Config
		cfg.Metadata = nil
		cfg.AllowDirect = false
		_, err = js.CreateStream(ctxT(t), cfg)
		require.NoError(t, err, name)
	}
	for subject, body := range publish {
		_, err := js.Publish(ctxT(t), subject, []byte(body))
		require.NoError(t, err, subject)
	}
	return url, js
}

func rawJS(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nkey(t, url))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

func streamConfig(t *testing.T, js jetstream.JetStream, name string) (jetstream.StreamConfig, uint64) {
	t.Helper()
	s, err := js.Stream(ctxT(t), name)
	require.NoError(t, err)
	info, err := s.Info(ctxT(t))
	require.NoError(t, err)
	return info.Config, info.State.Msgs
}

// TestVersionOneStreamsAreMigrated: with no call of version 1 waiting, a
// component of version 2 migrates the streams itself: the protocol version
// in their metadata, direct gets on the results stream, and the results and
// progress events of version 1 (subjects no reader of version 2 asks for)
// removed. Results and events of version 2 stay.
func TestVersionOneStreamsAreMigrated(t *testing.T) {
	t.Parallel()
	url, js := versionOneServer(t, map[string]string{
		"capstan.result.b1.c1":            `{"call_id":"c1"}`,
		"capstan.progress.user.b1.c1":     `{"call_id":"c1"}`,
		"capstan.audit.echo":              `{"call_id":"c1"}`,
		"capstan.result.default.b2.c2":    `{"call_id":"c2"}`,
		"capstan.progress.user.p.b2.c2":   `{"call_id":"c2"}`,
		"capstan.progress.internal.p.b.c": `{"call_id":"c"}`,
	})
	c, err := bus.Connect(ctxT(t), bus.Config{URL: url, Creds: bustest.Creds(url)})
	require.NoError(t, err)
	t.Cleanup(c.Close)

	for _, name := range capstanStreams {
		cfg, _ := streamConfig(t, js, name)
		require.Equal(t, "2", cfg.Metadata["capstan_protocol"], name)
	}
	cfg, n := streamConfig(t, js, "CAPSTAN_RESULTS")
	require.True(t, cfg.AllowDirect, "the results stream answers direct gets")
	require.Equal(t, uint64(1), n, "the version-1 result is gone, the version-2 one stays")
	_, err = c.DirectLast(ctxT(t), "CAPSTAN_RESULTS", "capstan.result.default.*.c2")
	require.NoError(t, err)
	_, n = streamConfig(t, js, "CAPSTAN_PROGRESS")
	require.Equal(t, uint64(2), n)
	_, n = streamConfig(t, js, "CAPSTAN_AUDIT")
	require.Equal(t, uint64(1), n, "audit records are kept")

	// A second component finds everything in place.
	c2 := bustest.Conn(t, url, "")
	require.NoError(t, c2.EnsureTopology(ctxT(t)))
}

// TestVersionOneCallsStopTheMigration: a call of version 1 waiting in the
// calls stream cannot be answered by a worker of version 2; the component
// changes nothing and says how to migrate.
func TestVersionOneCallsStopTheMigration(t *testing.T) {
	t.Parallel()
	url, js := versionOneServer(t, map[string]string{
		"capstan.call.default.echo": `{"call_id":"old1","tool":"echo","args":{},"session_id":"s"}`,
		"capstan.result.b1.c1":      `{"call_id":"c1"}`,
	})
	before := map[string]jetstream.StreamConfig{}
	for _, name := range capstanStreams {
		before[name], _ = streamConfig(t, js, name)
	}
	_, err := bus.Connect(ctxT(t), bus.Config{URL: url, Creds: bustest.Creds(url)})
	var me *bus.MigrationError
	require.ErrorAs(t, err, &me)
	require.ElementsMatch(t, capstanStreams, me.Streams)
	msg := err.Error()
	for _, want := range []string{
		"were created by Capstan protocol version 1",
		"CAPSTAN_CALLS holds 1 version-1 calls (subjects capstan.call.<pool>.<tool>)",
		"To migrate: stop every worker and client of version 1",
		`docs/protocol.md, "Migrating from version 1"`,
	} {
		require.Contains(t, msg, want)
	}
	for _, name := range capstanStreams {
		cfg, _ := streamConfig(t, js, name)
		require.True(t, maps.Equal(before[name].Metadata, cfg.Metadata), "%s unchanged", name)
		require.Equal(t, before[name].AllowDirect, cfg.AllowDirect, "%s unchanged", name)
	}
	_, n := streamConfig(t, js, "CAPSTAN_RESULTS")
	require.Equal(t, uint64(1), n, "nothing removed")
}

// TestNewerProtocolVersionIsReported: streams of a newer version are not
// touched; the error says to upgrade.
func TestNewerProtocolVersionIsReported(t *testing.T) {
	t.Parallel()
	url, js := versionOneServer(t, nil)
	s, err := js.Stream(ctxT(t), "CAPSTAN_AUDIT")
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.Metadata = map[string]string{"capstan_protocol": "3"}
	_, err = js.UpdateStream(ctxT(t), cfg)
	require.NoError(t, err)

	_, err = bus.Connect(ctxT(t), bus.Config{URL: url, Creds: bustest.Creds(url)})
	var ve *bus.VersionError
	require.ErrorAs(t, err, &ve)
	require.Contains(t, err.Error(), "stream CAPSTAN_AUDIT was created for Capstan protocol version 3; this component speaks version 2: upgrade it")
}
