package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// workerWithEmbeddedServer runs a worker the way cmd/worker does without
// CAPSTAN_NATS_URL (its own embedded server, store and credentials in a temp
// data dir), on a free loopback port instead of 4222, with the personality
// "default" stored. It returns the server's URL and the data dir.
func workerWithEmbeddedServer(t *testing.T) (url, dataDir string) {
	t.Helper()
	dataDir, personalities := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(personalities, "default.yaml"), []byte("id: default\ntoolset: [echo]\n"), 0o600))
	port := bustest.FreePort(t)
	w, err := worker.New(worker.Config{DataDir: dataDir, EmbeddedPort: port, WorkerID: "embedded-w", PersonalitiesDir: personalities,
		ShutdownGrace: time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, builtin.All()...)
	require.NoError(t, err)
	workertest.Run(t, w, nil)
	return "nats://127.0.0.1:" + strconv.Itoa(port), dataDir
}

// writeSeed writes a new NKey user seed, in the embedded.creds format, to
// dir/embedded.creds: credentials of some other server.
func writeSeed(t *testing.T, dir string) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	p := filepath.Join(dir, "embedded.creds")
	require.NoError(t, os.WriteFile(p, append(seed, '\n'), 0o600))
	return p
}

// TestDispatcherFindsTheWorkersEmbeddedCredentials: against a worker's
// embedded server, the dispatcher authenticates with
// <CAPSTAN_DATA_DIR>/embedded.creds, whether it found the server by probing
// or was given a loopback CAPSTAN_NATS_URL.
func TestDispatcherFindsTheWorkersEmbeddedCredentials(t *testing.T) {
	t.Parallel()
	url, dataDir := workerWithEmbeddedServer(t)
	probe := func(a *app) { a.probeURL = url }

	t.Run("probe", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runApp(t, ctxT(t), probe, map[string]string{"CAPSTAN_DATA_DIR": dataDir}, "", "call", "echo", "--args", `{"text":"hi"}`)
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, "hi\n", stdout)
		require.Empty(t, stderr, "no local mode")
	})
	t.Run("relative data dir", func(t *testing.T) {
		t.Parallel()
		cwd, err := os.Getwd()
		require.NoError(t, err)
		rel, err := filepath.Rel(cwd, dataDir)
		require.NoError(t, err)
		code, stdout, stderr := runApp(t, ctxT(t), probe, map[string]string{"CAPSTAN_DATA_DIR": rel}, "", "call", "echo", "--args", `{"text":"rel"}`)
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, "rel\n", stdout)
	})
	for _, u := range []string{url, strings.Replace(url, "127.0.0.1", "localhost", 1)} {
		t.Run("loopback url "+u, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"CAPSTAN_NATS_URL": u, "CAPSTAN_DATA_DIR": dataDir}
			code, stdout, stderr := runT(t, env, "", "call", "echo", "--args", `{"text":"url"}`)
			require.Equal(t, exitOK, code, stderr)
			require.Equal(t, "url\n", stdout)
		})
	}
	t.Run("explicit creds win", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bus.EmbeddedCredsFile(dataDir), "CAPSTAN_DATA_DIR": t.TempDir()}
		code, stdout, stderr := runT(t, env, "", "call", "echo", "--args", `{"text":"explicit"}`)
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, "explicit\n", stdout)
	})
}

// TestDispatcherRefusedProbeSaysWhatToSet: a server that answers on the
// probe URL but refuses the dispatcher's connection does not send it into
// local mode; it stops with one message naming the variables to set.
func TestDispatcherRefusedProbeSaysWhatToSet(t *testing.T) {
	t.Parallel()
	url, _ := workerWithEmbeddedServer(t)
	probe := func(a *app) { a.probeURL = url }
	wantSet := "set CAPSTAN_NATS_CREDS to its credentials file, or CAPSTAN_DATA_DIR to the data dir of the worker that started it (its embedded.creds is used), or CAPSTAN_NATS_URL to another server\n"

	cases := []struct {
		name   string
		env    func(t *testing.T, dataDir string) map[string]string
		refuse func(dataDir string) string
	}{
		{"no credentials", func(t *testing.T, d string) map[string]string { return map[string]string{"CAPSTAN_DATA_DIR": d} },
			func(string) string { return "a connection without credentials" }},
		{"stale credentials in the data dir", func(t *testing.T, d string) map[string]string {
			writeSeed(t, d)
			return map[string]string{"CAPSTAN_DATA_DIR": d}
		}, func(d string) string {
			return "the credentials in " + filepath.Join(d, "embedded.creds") + " (CAPSTAN_DATA_DIR's embedded server credentials"
		}},
		{"wrong CAPSTAN_NATS_CREDS", func(t *testing.T, d string) map[string]string {
			other := filepath.Join(t.TempDir(), "x")
			require.NoError(t, os.Mkdir(other, 0o700))
			return map[string]string{"CAPSTAN_DATA_DIR": d, "CAPSTAN_NATS_CREDS": writeSeed(t, other)}
		}, func(string) string { return "(CAPSTAN_NATS_CREDS)" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dataDir := t.TempDir()
			code, stdout, stderr := runApp(t, ctxT(t), probe, tc.env(t, dataDir), "", "call", "echo")
			require.Equal(t, exitUsage, code)
			require.Empty(t, stdout)
			require.True(t, strings.HasPrefix(stderr, "capstan: a NATS server answers at "+url+" but refuses "), stderr)
			require.Contains(t, stderr, tc.refuse(dataDir))
			require.True(t, strings.HasSuffix(stderr, wantSet), stderr)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one message")
			require.NotContains(t, stderr, "local mode")
			entries, err := os.ReadDir(dataDir)
			require.NoError(t, err)
			for _, e := range entries {
				require.Equal(t, "embedded.creds", e.Name(), "no local-mode server was started in the data dir")
			}
		})
	}

	t.Run("loopback url without credentials", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_DATA_DIR": t.TempDir()}
		code, _, stderr := runT(t, env, "", "call", "echo")
		require.Equal(t, exitUsage, code)
		require.Equal(t, "capstan: a NATS server answers at "+url+" but refuses a connection without credentials; "+wantSet, stderr)
	})
}

// TestLeftoverCredentialsDoNotBreakAPlainServer: a server without
// authorization (nats-server -js) on a loopback address is used without
// credentials even when CAPSTAN_DATA_DIR holds an embedded.creds left by an
// earlier embedded run.
func TestLeftoverCredentialsDoNotBreakAPlainServer(t *testing.T) {
	t.Parallel()
	url := bustest.PlainServer(t)
	dataDir := t.TempDir()
	writeSeed(t, dataDir)
	env := map[string]string{"CAPSTAN_DATA_DIR": dataDir}
	code, _, stderr := runApp(t, ctxT(t), func(a *app) { a.probeURL = url }, env, "", "personality", "list")
	require.Equal(t, exitOK, code, stderr)
	require.Empty(t, stderr, "no local mode")

	env["CAPSTAN_NATS_URL"] = url
	code, _, stderr = runT(t, env, "", "personality", "list")
	require.Equal(t, exitOK, code, stderr)
}

func TestLoopbackOnly(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		"nats://127.0.0.1:4222":                          true,
		"nats://localhost:4222,nats://127.0.0.2:4223":    true,
		"nats://[::1]:4222":                              true,
		"127.0.0.1:4222":                                 true,
		"tls://user:pw@127.0.0.1:4222":                   true,
		"nats://127.0.0.1:4222,nats://nats.example:4222": false,
		"nats://10.0.0.1:4222":                           false,
		"nats://localhost.example:4222":                  false,
		"":                                               false,
		" , ":                                            false,
	} {
		require.Equal(t, want, loopbackOnly(in), in)
	}
}
