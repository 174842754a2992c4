package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// TestAccessorsThroughThePipeline runs tools that declare each capability
// through a real worker and checks that each gets exactly its grant.
func TestAccessorsThroughThePipeline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("pong")) }))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello file"), 0o600))

	fetcher := tool.Tool{Name: "ping", Capabilities: tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"*"}}},
		Execute: func(ctx context.Context, raw json.RawMessage, tc *tool.Context) (tool.Result, error) {
			var a struct{ URL string }
			_ = json.Unmarshal(raw, &a)
			resp, err := tc.Fetch.Fetch(ctx, tool.Request{Method: "GET", URL: a.URL})
			if err != nil {
				return tool.Result{}, err
			}
			return tool.OK(string(resp.Body)), nil
		}}
	reader := tool.Tool{Name: "cat", Capabilities: tool.Capabilities{FSReach: &tool.FSReach{Read: tool.FromPersonality()}},
		Execute: func(ctx context.Context, raw json.RawMessage, tc *tool.Context) (tool.Result, error) {
			var a struct{ Path string }
			_ = json.Unmarshal(raw, &a)
			data, abs, err := tc.FS.ReadFile(ctx, a.Path)
			if err != nil {
				return tool.Result{}, err
			}
			return tool.OK(abs + ": " + string(data)), nil
		}}
	secret := tool.Tool{Name: "leak", Capabilities: tool.Capabilities{Secrets: []string{"providers/github/*"}, SecretsRaw: []string{"providers/github/*"}},
		Execute: func(ctx context.Context, raw json.RawMessage, tc *tool.Context) (tool.Result, error) {
			var a struct{ Ref string }
			_ = json.Unmarshal(raw, &a)
			v, err := tc.Secrets.Secret(ctx, a.Ref)
			if err != nil {
				return tool.Result{}, err
			}
			_ = tc.Emit(tool.Progress{Message: "got " + v})
			return tool.OK("the token is " + v), nil
		}}
	memory := tool.Tool{Name: "remember", Capabilities: tool.Capabilities{Storage: &tool.Storage{Scope: tool.ScopeSession, Kind: "kv"}},
		Execute: func(ctx context.Context, raw json.RawMessage, tc *tool.Context) (tool.Result, error) {
			if err := tc.KV.Set(ctx, "k", []byte(tc.CallID), 0); err != nil {
				return tool.Result{}, err
			}
			v, _, err := tc.KV.Get(ctx, "k")
			return tool.OK(string(v)), err
		}}
	runner := tool.Tool{Name: "run", Capabilities: tool.Capabilities{Process: &tool.Process{AllowedBinaries: []string{"*"}}},
		Execute: func(ctx context.Context, raw json.RawMessage, tc *tool.Context) (tool.Result, error) {
			var a struct{ Bin string }
			_ = json.Unmarshal(raw, &a)
			r, err := tc.Process.Run(ctx, tool.Command{Binary: a.Bin, Args: []string{"hi"}})
			if err != nil {
				return tool.Result{}, err
			}
			return tool.OK(fmt.Sprintf("%d %s", r.ExitCode, r.Stdout)), nil
		}}
	nothing := tool.Tool{Name: "bare", Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) { return tool.OK("x"), nil }}

	env := map[string]string{"CAPSTAN_SECRET_PROVIDERS_GITHUB_TOKEN": "s3cr3t-value"}
	e.putPersonality("agent", fmt.Sprintf(`id: agent
fs_reach:
  workdir: %q
  read: ["${WORKDIR}"]
safety:
  network:
    allow: ["127.0.0.1:*"]
    allow_private_urls: true
process: {allow: [echo]}
`, dir))
	e.start(worker.Config{Getenv: func(k string) string { return env[k] }}, fetcher, reader, secret, memory, runner, nothing)
	audit := e.tail(e.names.AuditStream(), "capstan.audit.ping")
	progress := e.tail(e.names.ProgressStream(), "capstan.progress.internal.>")

	run := func(id, toolName, args string) protocol.Result {
		e.call(protocol.Call{CallID: id, Tool: toolName, PersonalityID: "agent", Args: json.RawMessage(args)})
		return e.result(id, id)
	}
	r := run("f1", "ping", fmt.Sprintf(`{"url":%q}`, srv.URL))
	require.True(t, r.OK, r.Error)
	require.Equal(t, "pong", r.Value)
	auditOn(t, audit, "f1")

	r = run("f2", "ping", `{"url":"http://example.com/"}`)
	require.Equal(t, "HOST_NOT_ALLOWED: example.com is not in the declared allowedHosts", r.Error)
	rec, line := auditOn(t, audit, "f2")
	require.Equal(t, []string{"HOST_NOT_ALLOWED"}, rec.Denials, "capability denials are audited by code")
	require.NotContains(t, line, "example.com", "no argument values in the audit record")

	r = run("r1", "cat", `{"path":"notes.txt"}`)
	require.Equal(t, filepath.Join(dir, "notes.txt")+": hello file", r.Value, "relative paths resolve against the working dir")
	r = run("r2", "cat", `{"path":"/etc/hostname"}`)
	require.Equal(t, "PATH_NOT_REACHABLE: read not permitted for /etc/hostname", r.Error)

	r = run("s1", "leak", `{"ref":"providers/github/token"}`)
	require.Equal(t, "the token is [REDACTED]", r.Value, "resolved secrets never leave the worker")
	m := recv(t, progress)
	require.NotContains(t, string(m.Data), "s3cr3t-value")
	require.Contains(t, string(m.Data), "got [REDACTED]")
	r = run("s2", "leak", `{"ref":"providers/other/token"}`)
	require.Equal(t, "SECRET_NOT_DECLARED: requested secret is not permitted for this tool", r.Error)

	r = run("k1", "remember", `{}`)
	require.Equal(t, "k1", r.Value)

	r = run("p1", "run", `{"bin":"echo"}`)
	require.Equal(t, "0 hi\n", r.Value)
	r = run("p2", "run", `{"bin":"rm"}`)
	require.Equal(t, "BINARY_NOT_ALLOWED: rm is not in the declared allowedBinaries", r.Error)

	r = run("b1", "bare", `{}`)
	require.True(t, r.OK)
}

func TestSecretsFailClosed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		backend, want string
	}{
		{"none", "Tool leak declares capabilities but no capability backends are configured: secrets backend (CAPSTAN_SECRETS_BACKEND=none)"},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ran := false
			leak := tool.Tool{Name: "leak", Capabilities: tool.Capabilities{Secrets: []string{"a/b"}},
				Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
					ran = true
					return tool.OK("x"), nil
				}}
			e.start(worker.Config{SecretsBackend: tc.backend}, leak)
			e.call(protocol.Call{CallID: "fc", Tool: "leak"})
			r := e.result("fc", "fc")
			require.Equal(t, protocol.CodeNotAvailable, r.Code)
			require.Equal(t, tc.want, r.Error)
			require.False(t, ran)
		})
	}
}
