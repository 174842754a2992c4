package worker_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry/telemetrytest"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// echoSecret is the secret of the encoded-forms tests (security.md section
// 4): the worker must remove it, and its encodings, from everything that
// leaves it.
const echoSecret = "Bearer SENTINELSECRET-7731"

// echoedForms returns the encodings of echoSecret a hostile server would
// echo back, as one text; that text as the worker must redact it; and the
// strings of it that must not leave the worker. Base64 comes after one byte
// of something else, so not on a 3-byte boundary: what must go is the run
// of characters that hold bits of the secret.
func echoedForms() (text, want string, needles []string) {
	b64 := base64.StdEncoding.EncodeToString([]byte("\x00" + echoSecret + "!"))
	first, last := 8/6, (8*(1+len(echoSecret))+5)/6 // the characters with bits of the secret
	rev := []byte(echoSecret)
	slices.Reverse(rev)
	var every strings.Builder
	for _, c := range []byte(echoSecret) {
		fmt.Fprintf(&every, `\u%04x`, c)
	}
	needles = []string{
		echoSecret, b64[first+1 : last-1],
		strings.ToUpper(hex.EncodeToString([]byte(echoSecret))),
		url.QueryEscape(echoSecret), every.String(), string(rev),
		strings.Join(strings.Split(echoSecret, ""), " "),
	}
	others := needles[2:]
	text = "base64 " + b64 + " | " + strings.Join(others, " | ")
	want = "base64 " + b64[:first] + "[REDACTED]" + b64[last:] + strings.Repeat(" | [REDACTED]", len(others))
	return text, want, needles
}

// explosiveValue panics, quoting the secret's encodings, when encoded.
type explosiveValue struct{ msg string }

func (e explosiveValue) MarshalJSON() ([]byte, error) { panic("cannot encode " + e.msg) }

// TestEncodedSecretsNeverLeave runs tools that get a secret and hand its
// encodings back every way a tool can: result value and structured, error
// result, returned error, panic, progress, an infrastructure fault (retried,
// then abandoned to the DLQ) and a structured value whose encoding panics
// (the worker's own fault, dead-lettered too). No encoding of the secret
// is then in any result, progress event, audit record, dead letter, log
// line or span.
func TestEncodedSecretsNeverLeave(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	text, want, needles := echoedForms()
	get := func(ctx context.Context, tc *tool.Context) string {
		v, err := tc.Secrets.Secret(ctx, "providers/github/token")
		require.NoError(t, err)
		return v
	}
	caps := tool.Capabilities{Secrets: []string{"providers/github/*"}, SecretsRaw: []string{"providers/github/*"}}
	tools := []tool.Tool{
		{Name: "echo_back", Capabilities: caps, Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			_ = get(ctx, tc)
			if err := tc.Emit(tool.Progress{Message: "server said " + text}); err != nil {
				return tool.Result{}, err
			}
			return tool.Result{OK: true, Value: "server said " + text, Structured: map[string]any{
				"echo": text, text: []string{text}, "header": struct{ Auth string }{text},
			}}, nil
		}},
		{Name: "fail_back", Capabilities: caps, Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			_ = get(ctx, tc)
			return tool.Fail(tool.CodeExecutionFailed, "upstream rejected "+text), nil
		}},
		{Name: "error_back", Capabilities: caps, Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			_ = get(ctx, tc)
			return tool.Result{}, fmt.Errorf("upstream rejected %s", text)
		}},
		{Name: "panic_back", Capabilities: caps, Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			_ = get(ctx, tc)
			panic("upstream rejected " + text)
		}},
		{Name: "flaky_back", Capabilities: caps, Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			_ = get(ctx, tc)
			return tool.Result{}, fmt.Errorf("%w: upstream answered %s", tool.ErrUnavailable, text)
		}},
		{Name: "poison_back", Capabilities: caps, Execute: func(ctx context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			_ = get(ctx, tc)
			return tool.Result{OK: true, Value: "v", Structured: map[string]any{"x": explosiveValue{msg: text}}}, nil
		}},
	}
	tp, spans := telemetrytest.Tracing(t)
	logs := &syncBuffer{}
	env := map[string]string{"CAPSTAN_SECRET_PROVIDERS_GITHUB_TOKEN": echoSecret}
	progress := e.tail(e.names.ProgressStream(), e.names.Prefix()+".progress.>")
	audit := e.tail(e.names.AuditStream(), e.names.Prefix()+".audit.>")
	dlq := e.tail(e.names.DLQStream(), e.names.Prefix()+".dlq.>")
	e.start(worker.Config{
		WorkerID: "w1", Getenv: func(k string) string { return env[k] }, MaxDeliver: 2,
		TracerProvider: tp, Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}, tools...)

	clean := func(where, s string) {
		t.Helper()
		for _, n := range needles {
			require.NotContains(t, s, n, where)
		}
	}
	results := map[string]protocol.Result{}
	for _, tl := range tools {
		e.call(protocol.Call{CallID: tl.Name, Tool: tl.Name})
	}
	for _, tl := range tools {
		r := e.result(tl.Name, tl.Name)
		results[tl.Name] = r
		clean("result value of "+tl.Name, r.Value)
		clean("result error of "+tl.Name, r.Error)
		clean("result structured of "+tl.Name, string(r.Structured))
	}

	require.Equal(t, "server said "+want, results["echo_back"].Value)
	var structured map[string]any
	require.NoError(t, json.Unmarshal(results["echo_back"].Structured, &structured))
	require.Equal(t, map[string]any{"echo": want, want: []any{want}, "header": map[string]any{"Auth": want}}, structured)
	require.Equal(t, "upstream rejected "+want, results["fail_back"].Error)
	require.Equal(t, "upstream rejected "+want, results["error_back"].Error)
	require.Equal(t, "tool panic_back panicked: upstream rejected "+want, results["panic_back"].Error)
	require.Equal(t, "call abandoned after 2 deliveries: capability backend unavailable: upstream answered "+want, results["flaky_back"].Error)
	require.Equal(t, "call abandoned after 2 deliveries: worker panicked while handling the call: cannot encode "+want, results["poison_back"].Error)

	m := recv(t, progress)
	clean("progress event", string(m.Data))
	var ev protocol.Progress
	require.NoError(t, json.Unmarshal(m.Data, &ev))
	require.Equal(t, "server said "+want, ev.Message)

	// Dead letters: the original call (which holds no secret) and the
	// failure reason in a header.
	for range 2 {
		m := recv(t, dlq)
		clean("dead letter "+m.Subject, string(m.Data))
		for k, vs := range m.Header {
			clean("dead letter header "+k, strings.Join(vs, " "))
		}
		require.Contains(t, m.Header.Get(protocol.HeaderDeadReason), "[REDACTED]")
	}
	// The failure reasons kept for the abandonment messages.
	failures, err := e.conn.KV(ctxT(t), bus.Failures)
	require.NoError(t, err)
	for _, name := range []string{"flaky_back", "poison_back"} {
		entry, found, err := failures.Get(ctxT(t), name)
		require.NoError(t, err)
		require.True(t, found, name)
		clean("failure record of "+name, string(entry.Value))
		require.Contains(t, string(entry.Value), "[REDACTED]")
	}

	// Audit records carry ids, codes and a hash of the arguments only.
	deadline := time.After(30 * time.Second)
	for seen := map[string]bool{}; len(seen) < len(tools); {
		select {
		case m := <-audit:
			recs, err := protocol.DecodeAuditRecords(m.Data)
			require.NoError(t, err)
			for _, rec := range recs {
				seen[rec.CallID] = true
			}
			clean("audit records", string(m.Data))
		case <-deadline:
			t.Fatal("not every call was audited in 30s")
		}
	}

	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), `"msg":"call abandoned"`) && strings.Count(logs.String(), `"msg":"call abandoned"`) == 2
	}, 30*time.Second, 20*time.Millisecond)
	require.Contains(t, logs.String(), "infrastructure fault; call will be redelivered")
	require.Contains(t, logs.String(), "call handler panicked")
	clean("logs", logs.String())
	requireClean(t, spans.Ended(), needles...)
}
