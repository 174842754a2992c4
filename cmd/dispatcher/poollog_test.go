package main

import (
	"encoding/json"
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

// TestJSONForPeopleKeepsAngleBrackets: results printed as JSON (call
// --json, batch, tools --json) show <, > and & as they are.
func TestJSONForPeopleKeepsAngleBrackets(t *testing.T) {
	t.Parallel()
	noServer := func(a *app) { a.probeURL = "nats://127.0.0.1:1" }
	dataDir := t.TempDir()
	env := map[string]string{"CAPSTAN_DATA_DIR": dataDir, "CAPSTAN_CONCURRENCY": "2", "CAPSTAN_TOOLS": "echo"}
	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
	}{
		{"call --json", []string{"call", "echo", "--json", "--args", `{"text":"<b> & </b>"}`}, ""},
		{"batch", []string{"batch", "-"}, `{"tool":"echo","args":{"text":"<b> & </b>"}}` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runApp(t, ctxT(t), noServer, env, tc.stdin, tc.args...)
			require.Equal(t, exitOK, code, stderr)
			require.Contains(t, stdout, `<b> & </b>`)
			require.NotContains(t, stdout, `\u003c`)
			require.NotContains(t, stdout, `\u0026`)
			require.True(t, strings.HasSuffix(stdout, "}\n"), "one line per result: %q", stdout)
		})
	}
}

func TestMarshalJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		indent bool
		want   string
	}{
		{false, "{\"v\":\"<untrusted> & </untrusted>\"}\n"},
		{true, "{\n  \"v\": \"<untrusted> & </untrusted>\"\n}\n"},
	} {
		got, err := marshalJSON(map[string]string{"v": "<untrusted> & </untrusted>"}, tc.indent)
		require.NoError(t, err)
		require.Equal(t, tc.want, string(got))
	}
}

func TestUnescapeHTML(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"v":"\u003cb\u003e \u0026"}`: `{"v":"<b> &"}`,
		`{"v":"\\u003c"}`:              `{"v":"\\u003c"}`, // the text \u003c, escaped backslash
		`{"v":"\\\u003c"}`:             `{"v":"\\<"}`,
		`{"v":"\u00e9 \n \" \u003e"}`:  `{"v":"\u00e9 \n \" >"}`,
		`{"v":"plain"}`:                `{"v":"plain"}`,
		`{"v":"\u2028"}`:               `{"v":"\u2028"}`,
	} {
		require.Equal(t, want, string(unescapeHTML([]byte(in))), in)
		var a, b any
		require.NoError(t, json.Unmarshal([]byte(in), &a))
		require.NoError(t, json.Unmarshal(unescapeHTML([]byte(in)), &b))
		require.Equal(t, a, b, "same value after unescaping: %s", in)
	}
}
