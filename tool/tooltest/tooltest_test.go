package tooltest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tool/tooltest"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/wire"
	"github.com/stretchr/testify/require"
)

func builtinTool(t *testing.T, name string) tool.Tool {
	t.Helper()
	tl, ok := builtin.ByName(name)
	require.True(t, ok, name)
	return tl
}

func TestGatesRefuseAsTheWorkerDoes(t *testing.T) {
	t.Parallel()
	echo := builtinTool(t, "echo")
	for _, tc := range []struct {
		name, args, personality string
		decision                string
		code                    tool.Code
		msg                     string
	}{
		{"toolset", `{"text":"x"}`, "id: narrow\ntoolset: []\n", "toolset", tool.CodeNotAvailable, "Tool echo is not permitted for this personality"},
		{"schema", `{"txt":"x"}`, "", "schema", tool.CodeInputInvalid, "invalid arguments: args.text is required (required); args.txt is not allowed (additionalProperties)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var opts []tooltest.Option
			if tc.personality != "" {
				opts = append(opts, tooltest.Personality(tc.personality))
			}
			out := tooltest.Run(t, echo, tc.args, opts...)
			require.Equal(t, tc.decision, out.Decision)
			require.False(t, out.Result.OK)
			require.Equal(t, tc.code, out.Result.Code)
			require.Equal(t, tc.msg, out.Result.Error)
		})
	}
}

func TestProgressAndBudget(t *testing.T) {
	t.Parallel()
	out := tooltest.Run(t, builtinTool(t, "echo"), `{"text":"`+strings.Repeat("a", 100)+`","progress":[{"message":"half","percent":50,"audience":"user"},{"message":"internal"}]}`,
		tooltest.Call(tooltestCall(40)))
	require.Equal(t, "allowed", out.Decision)
	require.True(t, out.Result.OK, out.Result.Error)
	require.True(t, out.Result.Truncated)
	require.Equal(t, 100, out.Result.OriginalChars)
	require.Len(t, out.Progress, 2)
	require.Equal(t, tool.AudienceUser, out.Progress[0].Audience)
	require.Equal(t, tool.AudienceInternal, out.Progress[1].Audience)
}

// TestFilesUnderTheReach runs read_file with a real scoped file accessor
// on a temp dir: inside the reach it reads, outside it is refused.
func TestFilesUnderTheReach(t *testing.T) {
	t.Parallel()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("one\ntwo\n"), 0o600))
	p := "id: reader\ntoolset: [read_file]\nfs_reach:\n  workdir: " + dir + "\n  read: [\"${WORKDIR}\"]\n"
	out := tooltest.Run(t, builtinTool(t, "read_file"), `{"path":"notes.txt"}`, tooltest.Personality(p))
	require.True(t, out.Result.OK, out.Result.Error)
	require.Contains(t, out.Result.Value, "two")

	out = tooltest.Run(t, builtinTool(t, "read_file"), `{"path":"/etc/hostname"}`, tooltest.Personality(p))
	require.False(t, out.Result.OK)
	require.Contains(t, out.Result.Error, "outside this personality's fs_reach allowlist")
}

// TestFetchThroughTheGrant runs a custom tool against a loopback server
// under a host name the personality allows, with a secret injected at
// egress and redacted from the result.
func TestFetchThroughTheGrant(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("token was " + r.Header.Get("Authorization")))
	}))
	defer srv.Close()
	type args struct {
		Path string `json:"path"`
	}
	get := tool.Tool{
		Name:   "get_api",
		Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
		Capabilities: tool.Capabilities{
			Network: &tool.Network{AllowedHosts: []string{"api.test:*"}},
			Secrets: []string{"api/token"},
		},
		Execute: tool.Typed(func(ctx context.Context, a args, tc *tool.Context) (tool.Result, error) {
			resp, err := tc.Fetch.Fetch(ctx, tool.Request{Method: "GET", URL: "http://api.test:" + strings.Split(srv.Listener.Addr().String(), ":")[1] + a.Path,
				SecretHeaders: map[string]string{"Authorization": "Bearer {{api/token}}"}})
			if err != nil {
				return tool.Result{}, err
			}
			return tool.OK(string(resp.Body)), nil
		}),
	}
	p := "id: api\ntoolset: [get_api]\nsafety:\n  network:\n    allow: [\"api.test:*\"]\n    allow_private_urls: true\nsecrets:\n  allow: [\"api/*\"]\n  send_to:\n    \"api/*\": [\"api.test:*\"]\n"
	out := tooltest.Run(t, get, `{"path":"/x"}`, tooltest.Personality(p), tooltest.Resolve("api.test", srv.Listener.Addr().String()),
		tooltest.Secrets(map[string]string{"api/token": "s3cr3t-value"}))
	require.True(t, out.Result.OK, out.Result.Error)
	require.Equal(t, "token was Bearer [REDACTED]", out.Result.Value)

	// A host the personality does not allow: the fetcher refuses.
	p = strings.Replace(p, `allow: ["api.test:*"]`, `allow: ["other.test:*"]`, 1)
	out = tooltest.Run(t, get, `{"path":"/x"}`, tooltest.Personality(p), tooltest.Resolve("api.test", srv.Listener.Addr().String()))
	require.False(t, out.Result.OK)
	require.Equal(t, "capability", out.Decision, out.Result.Error)
}

func TestPanicBecomesExecutionFailed(t *testing.T) {
	t.Parallel()
	boom := tool.Tool{Name: "boom", Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) { panic("oops") }}
	out := tooltest.Run(t, boom, `{}`)
	require.Equal(t, tool.CodeExecutionFailed, out.Result.Code)
	require.Equal(t, "tool boom panicked: oops", out.Result.Error)
}

func tooltestCall(budget int64) (c wire.Call) {
	c.ResultBudgetChars = budget
	return c
}
