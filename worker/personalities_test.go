package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

func TestPersonalitiesDirIsLoadedAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "narrow.yaml"), []byte("id: narrow\ntoolset: []\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a personality"), 0o600))
	e.start(worker.Config{PersonalitiesDir: dir})
	kv, err := e.conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	_, found, err := kv.Get(ctxT(t), "narrow")
	require.NoError(t, err)
	require.True(t, found)
	e.call(protocol.Call{CallID: "n1", Tool: "echo", PersonalityID: "narrow", Args: json.RawMessage(`{"text":"x"}`)})
	require.Equal(t, "Tool echo is not permitted for this personality", e.result("n1", "n1").Error)
}

func TestInvalidPersonalityFileStopsTheWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("id: bad\ntoolsett: [echo]\nbudget: {result_chars: -1}\n"), 0o600))
	fetcher := tool.Tool{Name: "gh", Execute: echo.Tool().Execute,
		Capabilities: tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"api.github.com"}}}}
	deny := filepath.Join(dir, "strict.yaml")
	require.NoError(t, os.WriteFile(deny, []byte("id: strict\nsafety:\n  network:\n    allow: [example.org]\n"), 0o600))

	w, err := worker.New(worker.Config{NATSURL: e.url, NATSCreds: bustest.Creds(e.url), PersonalitiesDir: dir, Logger: quietLogger()}, echo.Tool(), fetcher)
	require.NoError(t, err)
	err = w.Run(context.Background())
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, "personality file "+bad+" is invalid")
	require.Contains(t, msg, "toolsett")
	require.Contains(t, msg, "result_chars")
	require.Contains(t, msg, "personality file "+deny+" (id strict) fails validation")
	require.Contains(t, msg, `tool gh, network: host "api.github.com" is not in personality network allow list`)
}

func TestExamplePersonalitiesAreValid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(worker.Config{PersonalitiesDir: filepath.Join("..", "examples", "personalities")})
	kv, err := e.conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	keys, err := kv.Keys(ctxT(t))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"batch", "coder", "default", "interactive", "payments", "researcher"}, keys)
	e.call(protocol.Call{CallID: "ex", Tool: "echo", PersonalityID: "researcher", Args: json.RawMessage(`{"text":"ok"}`)})
	require.Equal(t, "ok", e.result("ex", "ex").Value)
}

func TestMissingDefaultPersonalityIsWarnedAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // stores "default"
	for _, tc := range []struct {
		name, personality string
		warned            bool
	}{
		{"missing", "nobody", true},
		{"present", "default", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &lockedBuffer{}
			e.start(worker.Config{DefaultPersonality: tc.personality, WorkerID: "warn-" + tc.name,
				Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if !tc.warned {
				require.NotContains(t, logs.String(), "no personality")
				return
			}
			require.Contains(t, logs.String(), `level=WARN msg="no personality \"nobody\" exists: calls that name no personality will be refused with \"Unknown personality: nobody\"; add one: put a file with \"id: nobody\" in the personalities directory (Config.PersonalitiesDir, CAPSTAN_PERSONALITIES_DIR`)
		})
	}
}
