package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLocalModeKeepsThePoolLogsOutOfTheAnswer: a failed call in local mode
// prints the CLI's own lines only; the pool's log line goes to its file in
// the data dir, or to stderr with --pool-logs.
func TestLocalModeKeepsThePoolLogsOutOfTheAnswer(t *testing.T) {
	t.Parallel()
	noServer := func(a *app) { a.probeURL = "nats://127.0.0.1:1" } // keep the test off a real local server
	for _, tc := range []struct {
		name     string
		args     []string
		onStderr bool
	}{
		{"to the log file", []string{"call", "read_file", "--args", `{"path":"missing.txt"}`}, false},
		{"with --pool-logs", []string{"--pool-logs", "call", "read_file", "--args", `{"path":"missing.txt"}`}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dataDir, personalities, work := t.TempDir(), t.TempDir(), t.TempDir()
			doc := "id: default\ntoolset: [read_file]\nfs_reach:\n  workdir: " + work + "\n  read: [\"${WORKDIR}\"]\n"
			require.NoError(t, os.WriteFile(filepath.Join(personalities, "default.yaml"), []byte(doc), 0o600))
			env := map[string]string{"CAPSTAN_DATA_DIR": dataDir, "CAPSTAN_CONCURRENCY": "2", "CAPSTAN_PERSONALITIES_DIR": personalities,
				"CAPSTAN_LOG_FORMAT": "json"}
			code, stdout, stderr := runApp(t, ctxT(t), noServer, env, "", tc.args...)
			require.Equal(t, exitFailed, code, stderr)
			require.Empty(t, stdout)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			require.True(t, strings.HasPrefix(lines[0], "capstan: local mode: "), stderr)
			logFile := filepath.Join(dataDir, poolLogFile)
			logs, _ := os.ReadFile(logFile)
			if tc.onStderr {
				require.Contains(t, stderr, `"msg":"call finished"`)
				require.NotContains(t, string(logs), "call finished")
				return
			}
			require.Len(t, lines, 2, "the local mode line and the call's error, nothing else: %s", stderr)
			require.Contains(t, lines[0], logFile)
			require.True(t, strings.HasPrefix(lines[1], "execution_failed: ") || strings.HasPrefix(lines[1], "input_invalid: "), lines[1])
			require.Contains(t, string(logs), `"msg":"call finished"`)
			fi, err := os.Stat(logFile)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
		})
	}
}
