package mcphost

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/internal/telemetry/telemetrytest"
	"github.com/capstanhq/capstan/tool"
)

// rogueDef is a definition of the rogue server that may read granted.
func rogueDef(t *testing.T, name string, read ...string) *Definition {
	return &Definition{Name: name, Command: []string{rogue(t)}, Read: read, Untrusted: true,
		ProgressAudience: tool.AudienceUser, Timeout: time.Minute}
}

// listener accepts TCP connections on loopback until the test ends and
// counts them.
func listener(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	accepted = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	return ln.Addr().String(), accepted
}

// A server that ignores its roots and its arguments reaches only what its
// definition declares: Landlock refuses the file outside fs_reach, and the
// network namespace (and the seccomp filter, without a network grant; the
// egress proxy's Landlock port rule, with one) refuses TCP to a port it did
// not declare. The results say so.
func TestRogueServerIsConfinedToItsDeclaration(t *testing.T) {
	t.Parallel()
	requireConfined(t)
	granted, outside := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(granted, "ok.txt"), []byte("granted content"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("must not leak"), 0o600))
	addr, accepted := listener(t)

	withNet := rogueDef(t, "rogue-net", granted)
	withNet.Network = []string{"api.example.com"} // a grant, but not this port
	th := startHost(t, Config{}, rogueDef(t, "rogue", granted), withNet)
	for _, server := range []string{"rogue", "rogue-net"} {
		t.Run(server, func(t *testing.T) {
			res, _, err := th.call(ctxT(t), "mcp__"+server+"__read_path", `{"path":"`+filepath.Join(granted, "ok.txt")+`"}`)
			require.NoError(t, err)
			require.True(t, res.OK, "the declared path is readable: %+v", res)
			require.Equal(t, "granted content", res.Value)

			res, _, err = th.call(ctxT(t), "mcp__"+server+"__read_path", `{"path":"`+filepath.Join(outside, "secret.txt")+`"}`)
			require.NoError(t, err)
			require.False(t, res.OK)
			require.Equal(t, tool.CodeExecutionFailed, res.Code)
			require.Contains(t, res.Error, "permission denied", "Landlock refused the read")
			require.NotContains(t, res.Error, "must not leak")

			res, _, err = th.call(ctxT(t), "mcp__"+server+"__dial", `{"addr":"`+addr+`"}`)
			require.NoError(t, err)
			require.False(t, res.OK, "the undeclared port is unreachable: %+v", res)
			require.Equal(t, tool.CodeExecutionFailed, res.Code)
			require.Regexp(t, "operation not permitted|permission denied|connection refused", res.Error)
		})
	}
	require.Zero(t, accepted.Load(), "no connection reached the test's listener")
}

// Secret values given to a server in secret_env never come back: not in
// results, not in its stderr as logged by the worker.
func TestSecretEnvIsRedacted(t *testing.T) {
	t.Parallel()
	const value = "s3cr3t-value-of-the-token"
	env := map[string]string{"CAPSTAN_SECRET_PROVIDERS_X_TOKEN": value}
	d := rogueDef(t, "rogue")
	d.SecretEnv = map[string]string{"X_TOKEN": "providers/x/token"}
	d.Env = map[string]string{"PLAIN": "visible"}
	d.Secrets = []string{"providers/x/*"}
	th := startHost(t, Config{Secrets: secrets.NewEnv("", func(k string) string { return env[k] })}, d)

	res, _, err := th.call(ctxT(t), "mcp__rogue__env", `{"name":"X_TOKEN"}`)
	require.NoError(t, err)
	require.True(t, res.OK, "%+v", res)
	require.Equal(t, "X_TOKEN=[REDACTED]", res.Value)
	res, _, err = th.call(ctxT(t), "mcp__rogue__env", `{"name":"PLAIN"}`)
	require.NoError(t, err)
	require.Equal(t, "PLAIN=visible", res.Value)
	res, _, err = th.call(ctxT(t), "mcp__rogue__env", `{"name":"CAPSTAN_SECRET_PROVIDERS_X_TOKEN"}`)
	require.NoError(t, err)
	require.Equal(t, "CAPSTAN_SECRET_PROVIDERS_X_TOKEN is not set", res.Value, "the worker's environment is not the child's")
	require.Eventually(t, func() bool { return strings.Contains(th.logs.String(), "env X_TOKEN=[REDACTED]") }, 10*time.Second, 10*time.Millisecond,
		"the server's stderr line is logged, redacted")
	require.NotContains(t, th.logs.String(), value)
}

// A server whose secret cannot be resolved does not start: it is down, its
// calls answer not_available naming the variable (never the value), and it
// is started again until the secret exists.
func TestServerDownWhileSecretMissing(t *testing.T) {
	t.Parallel()
	var env atomic.Value
	env.Store(map[string]string{})
	d := rogueDef(t, "rogue")
	d.SecretEnv = map[string]string{"X_TOKEN": "providers/x/token"}
	d.Secrets = []string{"providers/x/token"}
	th := startHost(t, Config{Secrets: secrets.NewEnv("", func(k string) string { return env.Load().(map[string]string)[k] })}, d)
	st := th.waitState("rogue", StateDown)
	require.Equal(t, "secret_env.X_TOKEN: secret not found", st.Reason)
	require.NotNil(t, st.NextStart)
	require.Equal(t, "MCP server rogue is not available: secret_env.X_TOKEN: secret not found", th.h.Unavailable("mcp__rogue__env"))
	require.Empty(t, th.h.Unavailable("mcp__other__env"), "not a hosted server")
	require.Empty(t, th.h.Unavailable("read_file"))

	env.Store(map[string]string{"CAPSTAN_SECRET_PROVIDERS_X_TOKEN": "now-it-exists"})
	th.waitState("rogue", StateUp)
	res, _, err := th.call(ctxT(t), "mcp__rogue__env", `{"name":"X_TOKEN"}`)
	require.NoError(t, err)
	require.Equal(t, "X_TOKEN=[REDACTED]", res.Value)
}

// A server that cannot start is down with the reason, retried with backoff.
func TestServerThatCannotStart(t *testing.T) {
	t.Parallel()
	d := &Definition{Name: "missing", Command: []string{"/nonexistent/mcp-server"}, Timeout: time.Minute}
	th := startHost(t, Config{}, d)
	st := th.waitState("missing", StateDown)
	require.Contains(t, st.Reason, "/nonexistent/mcp-server")
	require.Contains(t, th.h.Unavailable("mcp__missing__anything"), "MCP server missing is not available: ")
}

// A server that crashes during a call: the call is handed back (an
// infrastructure fault), the server is restarted with a new process, and
// the next call works.
func TestCrashDuringCallIsAnInfrastructureFaultAndTheServerRestarts(t *testing.T) {
	t.Parallel()
	th := startHost(t, Config{}, rogueDef(t, "rogue"))
	first := th.waitState("rogue", StateUp)
	_, _, err := th.call(ctxT(t), "mcp__rogue__crash", `{}`)
	require.ErrorIs(t, err, tool.ErrUnavailable)
	require.Regexp(t, `MCP server rogue: connection lost during the call: exited with status 3; last stderr line: .*crashing on request$`, err.Error(),
		"the reason is the child's exit status and the last line it wrote")
	var st Status
	require.Eventually(t, func() bool {
		st = th.status("rogue")
		return st.State == StateUp && st.PID != first.PID
	}, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, st.Restarts)
	require.Equal(t, "", st.Reason)
	res, _, err := th.call(ctxT(t), "mcp__rogue__env", `{"name":"HOME"}`)
	require.NoError(t, err)
	require.True(t, res.OK)
	require.Eventually(t, func() bool {
		logs := th.logs.String()
		return strings.Contains(logs, "crashing on request") && strings.Contains(logs, "exited with status 3")
	}, 10*time.Second, 10*time.Millisecond, "stderr and the exit status reach the log:\n%s", th.logs.String())
}

// A server that stops answering (here: stopped with SIGSTOP) fails its
// pings and is restarted.
func TestHungServerIsRestarted(t *testing.T) {
	t.Parallel()
	th := startHost(t, Config{PingInterval: 200 * time.Millisecond, PingTimeout: time.Second}, rogueDef(t, "rogue"))
	first := th.waitState("rogue", StateUp)
	// Our own child (the test started it, through the host), still running.
	require.NotZero(t, first.PID, "never signal pid 0: that is our own process group")
	require.Equal(t, first.PID, th.waitState("rogue", StateUp).PID)
	require.NoError(t, syscall.Kill(first.PID, syscall.SIGSTOP))
	require.Eventually(t, func() bool {
		st := th.status("rogue")
		return st.State == StateUp && st.PID != first.PID
	}, 30*time.Second, 10*time.Millisecond)
	require.Contains(t, th.logs.String(), "hung: no answer to 2 pings in a row")
}

// Cancelling a call cancels the MCP request (the server sees
// notifications/cancelled); the call returns the context's cause. Progress
// notifications become progress events of the definition's audience.
func TestCancelAndProgress(t *testing.T) {
	t.Parallel()
	d := rogueDef(t, "rogue")
	d.ProgressAudience = tool.AudienceDashboard
	th := startHost(t, Config{}, d)
	ctx, cancel := context.WithCancelCause(ctxT(t))
	var progress []tool.Progress
	tc := &tool.Context{CallID: "c1", EmitFunc: func(p tool.Progress) error {
		progress = append(progress, p)
		cancel(errors.New("cancelled: by request"))
		return nil
	}}
	start := time.Now()
	_, err := th.tool("mcp__rogue__sleep").Execute(ctx, []byte(`{"ms":30000}`), tc)
	require.EqualError(t, err, "cancelled: by request")
	require.Less(t, time.Since(start), 20*time.Second)
	require.Len(t, progress, 1)
	require.Equal(t, "sleeping", progress[0].Message)
	require.Equal(t, tool.AudienceDashboard, progress[0].Audience)
	require.InDelta(t, 50, *progress[0].Percent, 0.001)
	require.Eventually(t, func() bool { return strings.Contains(th.logs.String(), "sleep cancelled: context canceled") }, 10*time.Second, 10*time.Millisecond,
		"the server saw notifications/cancelled")
	th.waitState("rogue", StateUp)
}

// The definition's timeout ends a call that takes longer.
func TestServerTimeout(t *testing.T) {
	t.Parallel()
	d := rogueDef(t, "rogue")
	d.Timeout = 300 * time.Millisecond
	th := startHost(t, Config{}, d)
	res, _, err := th.call(ctxT(t), "mcp__rogue__sleep", `{"ms":20000}`)
	require.NoError(t, err)
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "timed out after 300ms"), res)
	res, _, err = th.call(ctxT(t), "mcp__rogue__sleep", `{"ms":1}`)
	require.NoError(t, err)
	require.Equal(t, "slept 1ms", res.Value, "the server still serves")
}

// Hosted tools carry the server's declaration and schema.
func TestHostedToolDeclaration(t *testing.T) {
	t.Parallel()
	granted := t.TempDir()
	d := rogueDef(t, "rogue", granted)
	d.Untrusted = false
	th := startHost(t, Config{}, d)
	tl := th.tool("mcp__rogue__read_path")
	require.Equal(t, "Reads any file.", tl.Description)
	require.Equal(t, "mcp", tl.Toolset)
	require.False(t, tl.OutputIsUntrusted)
	require.Equal(t, tool.Capabilities{
		FSReach: &tool.FSReach{Read: tool.Paths(granted)},
		Process: &tool.Process{AllowedBinaries: []string{rogue(t)}},
	}, tl.Capabilities)
	require.JSONEq(t, `{"type":"object","required":["path"],"properties":{"path":{"type":"string","description":"file to read"}},"additionalProperties":false}`, string(tl.Schema))
	require.Equal(t, 10, th.status("rogue").Tools)
	require.Equal(t, "stdio", th.status("rogue").Transport)
	require.NotZero(t, th.status("rogue").PID)
}

// A server's stderr is logged up to StderrMax bytes per start, then once
// "cap reached", and the rest is read and dropped: a server writing far more
// than a pipe holds never blocks, and a new start has the whole cap again.
func TestStderrIsCappedPerStart(t *testing.T) {
	t.Parallel()
	th := startHost(t, Config{StderrMax: 1000}, rogueDef(t, "rogue"))
	first := th.waitState("rogue", StateUp)
	xs := strings.Repeat("x", 99) // the rogue server's stderr lines: 100 bytes with the newline
	logged := func() int { return strings.Count(th.logs.String(), xs) }
	const capReached = "MCP server stderr cap reached"

	res, _, err := th.call(ctxT(t), "mcp__rogue__stderr", `{"bytes":1048576}`)
	require.NoError(t, err)
	require.True(t, res.OK, "a megabyte of stderr does not block the server: %+v", res)
	require.Eventually(t, func() bool { return strings.Contains(th.logs.String(), capReached) }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 10, logged(), "exactly the lines that fit in 1000 bytes")
	res, _, err = th.call(ctxT(t), "mcp__rogue__env", `{"name":"HOME"}`)
	require.NoError(t, err)
	require.True(t, res.OK, "the server still serves: %+v", res)

	// A new start logs again, up to the cap.
	_, _, err = th.call(ctxT(t), "mcp__rogue__crash", `{}`)
	require.ErrorIs(t, err, tool.ErrUnavailable)
	require.Eventually(t, func() bool {
		st := th.status("rogue")
		return st.State == StateUp && st.PID != first.PID
	}, 30*time.Second, 10*time.Millisecond)
	res, _, err = th.call(ctxT(t), "mcp__rogue__stderr", `{"bytes":1000}`)
	require.NoError(t, err)
	require.True(t, res.OK, "%+v", res)
	require.Eventually(t, func() bool { return logged() == 20 }, 10*time.Second, 10*time.Millisecond, "ten more lines after the restart")
	require.Equal(t, 1, strings.Count(th.logs.String(), capReached), "1000 bytes fit in the new start's cap")
	require.Equal(t, 20, logged())
}

// The client spans of a stdio server follow the OTel MCP conventions:
// network.transport pipe, no session id (stdio has none), and error.type
// tool_error for a result with isError, which becomes execution_failed with
// the server's text.
func TestStdioSpansAndToolErrors(t *testing.T) {
	t.Parallel()
	tp, rec := telemetrytest.Tracing(t)
	th := startHost(t, Config{TracerProvider: tp}, rogueDef(t, "rogue"))
	th.waitState("rogue", StateUp)

	ctx, parent := tp.Tracer("test").Start(ctxT(t), "execute_tool mcp__rogue__env")
	res, _, err := th.call(ctx, "mcp__rogue__env", `{"name":"HOME"}`)
	require.NoError(t, err)
	require.True(t, res.OK, "%+v", res)
	res, _, err = th.call(ctx, "mcp__rogue__fail", `{}`)
	require.NoError(t, err)
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "failing on request"), res)
	parent.End()

	spans := map[string][]attribute.KeyValue{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = s.Attributes()
		switch s.Name() {
		case "tools/call env", "tools/call fail":
			require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID(), "a child of the call's span")
			require.Equal(t, trace.SpanKindClient, s.SpanKind())
		}
		if s.Name() == "tools/call fail" {
			require.Equal(t, codes.Error, s.Status().Code)
		}
	}
	opening := "initialize" // the session's first request: server/discover from protocol 2026-07-28 on
	if _, ok := spans["server/discover"]; ok {
		opening = "server/discover"
	}
	for _, name := range []string{opening, "tools/list", "tools/call env", "tools/call fail"} {
		require.Contains(t, spans, name)
		attrs := attribute.NewSet(spans[name]...)
		method, _, _ := strings.Cut(name, " ")
		for k, want := range map[attribute.Key]string{"mcp.method.name": method, "network.transport": "pipe"} {
			v, ok := attrs.Value(k)
			require.True(t, ok, "%s: attribute %s", name, k)
			require.Equal(t, want, v.AsString(), "%s: attribute %s", name, k)
		}
		_, ok := attrs.Value("mcp.session.id")
		require.False(t, ok, "%s: stdio has no session id", name)
	}
	for name, want := range map[string]string{"tools/call env": "env", "tools/call fail": "fail"} {
		attrs := attribute.NewSet(spans[name]...)
		v, _ := attrs.Value("gen_ai.tool.name")
		require.Equal(t, want, v.AsString())
		v, _ = attrs.Value("mcp.protocol.version")
		require.NotEmpty(t, v.AsString())
	}
	okAttrs, failAttrs := attribute.NewSet(spans["tools/call env"]...), attribute.NewSet(spans["tools/call fail"]...)
	_, ok := okAttrs.Value("error.type")
	require.False(t, ok, "an ok call has no error.type")
	v, _ := failAttrs.Value("error.type")
	require.Equal(t, "tool_error", v.AsString())
}
