package worker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/internal/telemetry/telemetrytest"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

type streamConfig = jetstream.StreamConfig

const discardNew = jetstream.DiscardNew

// js returns a raw JetStream handle on the env's server, for the changes
// an operator (or an accident) makes behind Capstan's back.
func (e *env) js() jetstream.JetStream {
	e.t.Helper()
	auth, err := nats.NkeyOptionFromSeed(bustest.Creds(e.url))
	require.NoError(e.t, err)
	nc, err := nats.Connect(e.url, auth)
	require.NoError(e.t, err)
	e.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(e.t, err)
	return js
}

// setStream changes the configuration of stream name.
func (e *env) setStream(name string, change func(*streamConfig)) {
	e.t.Helper()
	js := e.js()
	s, err := js.Stream(ctxT(e.t), name)
	require.NoError(e.t, err)
	cfg := s.CachedInfo().Config
	change(&cfg)
	_, err = js.UpdateStream(ctxT(e.t), cfg)
	require.NoError(e.t, err)
}

// deleteStream deletes stream name.
func (e *env) deleteStream(name string) {
	e.t.Helper()
	require.NoError(e.t, e.js().DeleteStream(ctxT(e.t), name))
}

// newStockEnv is newEnv on a server with nats-server's stock max payload
// (1 MiB), the limit of a plain "nats-server -js" and of hosted NATS.
func newStockEnv(t *testing.T) *env {
	t.Helper()
	url := bustest.Server(t, bustest.MaxPayload(bustest.StockMaxPayload))
	c := bustest.Conn(t, url, "")
	e := &env{t: t, url: url, conn: c, names: c.Names()}
	e.putPersonality("default", "id: default\n")
	return e
}

// resultMsg waits for the stored result message of a call.
func (e *env) resultMsg(batch, call string) *bus.Msg {
	e.t.Helper()
	return recv(e.t, e.tail(e.names.ResultsStream(), e.resultFilter(batch, call)))
}

// messageSize is a stored message's size against the server's max payload.
func messageSize(m *bus.Msg) int {
	h := m.Header.Clone()
	return bus.MessageSize(len(m.Data), h, "")
}

// readBlob reads a blob and checks it against its reference.
func (e *env) readBlob(ref *protocol.BlobRef) []byte {
	e.t.Helper()
	var b bytes.Buffer
	require.NoError(e.t, e.conn.ReadBlob(ctxT(e.t), ref, func(p []byte) error { _, err := b.Write(p); return err }))
	sum := sha256.Sum256(b.Bytes())
	require.Equal(e.t, ref.SHA256, hex.EncodeToString(sum[:]))
	require.Equal(e.t, ref.Size, int64(b.Len()))
	return b.Bytes()
}

// bigStructured returns ok "small" with a 5 MB structured payload.
func bigStructured() tool.Tool {
	return tool.Tool{Name: "big_structured", Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
		r := tool.OK("small")
		r.Structured = map[string]any{"data": strings.Repeat("s", 5_000_000)}
		return r, nil
	}}
}

// TestOversizedOutputsAreAnsweredOnceUnderTheLimit: on a server with the
// stock 1 MiB max payload, outputs of several MB from run_process,
// terminal, fetch_url, read_file and a tool with a 5 MB structured payload
// are each answered exactly once, in a message under the limit, with the
// full output stored as a blob. Before, such a result was retried for
// ever, its slot never freed.
func TestOversizedOutputsAreAnsweredOnceUnderTheLimit(t *testing.T) {
	t.Parallel()
	e := newStockEnv(t)
	dir := t.TempDir()
	// read_file: 50 lines of 100,000 characters (5 MB, no reducer cut).
	line := strings.Repeat("r", 100_000)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big.txt"), []byte(strings.Repeat(line+"\n", 50)), 0o600))
	// fetch_url: a 5 MB text page.
	page := strings.Repeat("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.\n", 78125)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(srv.Close)
	doc := fmt.Sprintf(`id: big
fs_reach: {workdir: %q, read: ["${WORKDIR}"], write: ["${WORKDIR}"]}
safety: {network: {allow: ["127.0.0.1:*"], allow_private_urls: true}}
process: {allow: [bash]}
budget: {result_chars: 2000000}
`, dir)
	e.putPersonality("big", doc)
	e.putPersonality("noblobs", strings.Replace(strings.Replace(doc, "id: big", "id: noblobs", 1), "result_chars: 2000000}", "result_chars: 2000000, blobs: false}", 1))
	e.start(worker.Config{Concurrency: 8}, append(builtin.All(), bigStructured())...)
	audit := e.tail(e.names.AuditStream(), e.names.Prefix()+".audit.big_structured")

	nul := strings.Repeat("\x00", process.DefaultMaxOutputBytes) + process.TruncatedMarker
	calls := []struct {
		id, personality, tool, args string
		part                        string // "" = no blob
		full                        string // the blob's content, when known
	}{
		// 3 MB of NUL bytes: 1 MiB captured, six bytes each in JSON.
		{"rp", "big", "run_process", `{"binary":"bash","args":["-c","head -c 3000000 /dev/zero"]}`, protocol.BlobPartValue,
			"exit code 0\n--- stdout ---\n" + nul + "\n--- stderr ---\n"},
		{"term", "big", "terminal", `{"command":"head -c 3000000 /dev/zero | tr '\\0' x"}`, protocol.BlobPartValue,
			strings.Repeat("x", process.DefaultMaxOutputBytes) + process.TruncatedMarker},
		{"fetch", "big", "fetch_url", fmt.Sprintf(`{"url":%q}`, srv.URL+"/page"), protocol.BlobPartValue,
			"URL: " + srv.URL + "/page\nContent-Type: text/plain\n\n" + page},
		{"read", "big", "read_file", `{"path":"big.txt"}`, protocol.BlobPartValue,
			"[" + filepath.Join(dir, "big.txt") + "] 51 lines\n\n" + strings.Repeat(line+"\n", 50)},
		{"struct", "big", "big_structured", `{}`, protocol.BlobPartStructured, `{"data":"` + strings.Repeat("s", 5_000_000) + `"}`},
		// The same without blobs: the personality forbids them.
		{"rp-nb", "noblobs", "run_process", `{"binary":"bash","args":["-c","head -c 3000000 /dev/zero"]}`, "", ""},
		{"struct-nb", "noblobs", "big_structured", `{}`, "", ""},
	}
	start := time.Now()
	for _, c := range calls {
		e.call(protocol.Call{CallID: c.id, Tool: c.tool, PersonalityID: c.personality, Args: json.RawMessage(c.args)})
	}
	for _, c := range calls {
		t.Run(c.id, func(t *testing.T) {
			m := e.resultMsg(c.id, c.id)
			require.LessOrEqual(t, messageSize(m), bustest.StockMaxPayload)
			var r protocol.Result
			require.NoError(t, json.Unmarshal(m.Data, &r))
			require.True(t, r.OK, "%s: %s", r.Code, r.Error)
			require.Equal(t, 1, e.resultsOn(c.id, c.id), "answered exactly once")
			if c.part == "" {
				require.Nil(t, r.Blob)
				return
			}
			require.NotNil(t, r.Blob, "a blob holds the full output")
			require.Equal(t, c.part, r.Blob.Part)
			require.Equal(t, "capstan_blobs", r.Blob.Bucket)
			require.Equal(t, c.personality+"/"+c.id, r.Blob.Name)
			require.True(t, strings.HasPrefix(r.Blob.NUID, c.personality+"."), r.Blob.NUID)
			got := e.readBlob(r.Blob)
			require.Equal(t, len(c.full), len(got))
			require.True(t, c.full == string(got), "the blob holds the whole output")
		})
	}
	t.Logf("7 oversized calls answered in %s", time.Since(start).Round(time.Millisecond))

	// What each result carries.
	rp := e.result("rp", "rp")
	require.True(t, rp.Truncated)
	require.Equal(t, utf8.RuneCountInString(calls[0].full), rp.OriginalChars)
	require.True(t, strings.HasSuffix(rp.Value, fmt.Sprintf("\n[truncated — %d chars total]", rp.OriginalChars)), "cut as the budget trim cuts")
	require.NotNil(t, rp.Structured, "run_process's structured payload (32 KiB of each stream) fits beside the value")
	var st map[string]any
	require.NoError(t, json.Unmarshal(rp.Structured, &st))
	require.Equal(t, true, st["stdout_truncated"])
	require.EqualValues(t, len(nul), st["stdout_bytes"])
	s := e.result("struct", "struct")
	require.Equal(t, "small", s.Value)
	require.Nil(t, s.Structured)
	require.True(t, s.StructuredOmitted)
	require.Equal(t, protocol.BlobTypeJSON, s.Blob.ContentType)
	snb := e.result("struct-nb", "struct-nb")
	require.True(t, snb.StructuredOmitted)
	require.Nil(t, snb.Blob)
	f := e.result("fetch", "fetch")
	require.Contains(t, f.Value, "[truncated at max_chars: 40000 of 5000000 characters shown]")
	require.Equal(t, protocol.BlobTypeText, f.Blob.ContentType)

	// The audit record counts the blob: its size and digest, not its content.
	rec, _ := auditOn(t, audit, "struct")
	require.Equal(t, s.Blob.Size, rec.BlobBytes)
	require.Equal(t, s.Blob.SHA256, rec.BlobSHA256)
	require.Positive(t, rec.ResultBytes)
	require.Less(t, rec.ResultBytes, 4096)
	e.waitCallsDrained()
}

// TestSlotsFullOfOversizedCallsStillServe fills every slot with a call
// whose output is far larger than the server's max payload, then sends
// ordinary calls: all are answered.
func TestSlotsFullOfOversizedCallsStillServe(t *testing.T) {
	t.Parallel()
	e := newStockEnv(t)
	e.putPersonality("big", "id: big\nprocess: {allow: [bash]}\nbudget: {result_chars: 2000000}\n")
	e.start(worker.Config{Concurrency: 2, Blobs: worker.BlobConfig{Off: true}}, builtin.All()...)
	var ids []string
	for i := range 2 {
		id := fmt.Sprintf("big%d", i)
		ids = append(ids, id)
		e.call(protocol.Call{CallID: id, Tool: "run_process", PersonalityID: "big",
			Args: json.RawMessage(`{"binary":"bash","args":["-c","head -c 3000000 /dev/zero"]}`)})
	}
	for i := range 4 {
		id := fmt.Sprintf("small%d", i)
		ids = append(ids, id)
		e.call(protocol.Call{CallID: id, Tool: "echo", Args: json.RawMessage(fmt.Sprintf(`{"text":"hi %d"}`, i))})
	}
	for i, id := range ids {
		m := e.resultMsg(id, id)
		require.LessOrEqual(t, messageSize(m), bustest.StockMaxPayload)
		var r protocol.Result
		require.NoError(t, json.Unmarshal(m.Data, &r))
		require.True(t, r.OK, "%s: %s %s", id, r.Code, r.Error)
		if i >= 2 {
			require.Equal(t, fmt.Sprintf("hi %d", i-2), r.Value)
		} else {
			require.True(t, r.Truncated)
			require.Nil(t, r.Blob, "blobs are off")
		}
	}
	e.waitCallsDrained()
}

// TestResultTooLargeForTheStreamIsReplaced: a results stream whose maximum
// message size is below the result (an operator's max_msg_size) refuses
// it; the worker answers at once with execution_failed naming the limit.
func TestResultTooLargeForTheStreamIsReplaced(t *testing.T) {
	t.Parallel()
	e := newStockEnv(t)
	e.setStream(e.names.ResultsStream(), func(c *streamConfig) { c.MaxMsgSize = 8 << 10 })
	e.start(worker.Config{}, echo.Tool())
	text := strings.Repeat("t", 20_000)
	e.call(protocol.Call{CallID: "huge", Tool: "echo", Args: json.RawMessage(`{"text":"` + text + `"}`)})
	r := e.result("huge", "huge")
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Regexp(t, `^result of 20\.\d kB exceeds the results stream's maximum message size; the output was dropped$`, r.Error)
	require.Equal(t, 1, e.resultsOn("huge", "huge"))
	e.waitCallsDrained()
}

// TestUnpublishableResultIsDeadLetteredAtOnce: a result that retrying
// cannot publish (here the results stream is gone) dead-letters its call
// within seconds, and the worker serves the next calls.
func TestUnpublishableResultIsDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	e := newStockEnv(t)
	mp, reader := telemetrytest.Metrics(t)
	w := e.start(worker.Config{Concurrency: 1, MeterProvider: mp}, echo.Tool())
	dlq := e.tail(e.names.DLQStream(), e.names.Prefix()+".dlq.echo")
	e.deleteStream(e.names.ResultsStream())
	start := time.Now()
	e.call(protocol.Call{CallID: "lost", Tool: "echo", Args: json.RawMessage(`{"text":"x"}`)})
	d := recv(t, dlq)
	require.Less(t, time.Since(start), 20*time.Second, "within seconds, not never")
	require.Regexp(t, `^result not publishable: publish result: bus: publish capstan\.result\.default\.lost\.lost: no stream answered the publish`, d.Header.Get(protocol.HeaderDeadReason))
	e.waitCallsDrained()
	code, rd := readiness(t, w.Handler())
	require.Equal(t, "ok", rd.Checks["slots"], "%d %+v", code, rd)
	// Counted once, by kind and reason: a permanent failure is not retried.
	require.Equal(t, 1.0, publishFailures(t, reader, "result", "no_stream"))
}

// publishFailures is the capstan.publish.failures count of kind and reason.
func publishFailures(t *testing.T, reader *sdkmetric.ManualReader, kind, reason string) float64 {
	t.Helper()
	return telemetrytest.Sum(t, reader, telemetry.MetricPublishFailures,
		telemetry.AttrPublishKind.String(kind), telemetry.AttrPublishReason.String(reason))
}

// TestUnpublishableResultTurnsReadinessRedThenGivesUp: a result whose
// publish keeps failing for a reason that may pass (the results stream is
// full: its max_bytes, discard new, refuses the 20 kB result) makes /readyz
// name the stuck call after 5s, and is given up after the retry limit with
// a dead letter and the abandonment result (small enough for the stream);
// each failed attempt is counted by kind and reason, and the slot is then
// free again.
func TestUnpublishableResultTurnsReadinessRedThenGivesUp(t *testing.T) {
	t.Parallel()
	e := newStockEnv(t)
	mp, reader := telemetrytest.Metrics(t)
	w, err := worker.New(worker.Config{NATSURL: e.url, NATSCreds: bustest.Creds(e.url), Concurrency: 1, Logger: quietLogger(),
		ShutdownGrace: 2 * time.Second, MeterProvider: mp}, echo.Tool())
	require.NoError(t, err)
	worker.SetResultRetryLimit(w, 12*time.Second)
	e.run(w)
	dlq := e.tail(e.names.DLQStream(), e.names.Prefix()+".dlq.echo")
	e.setStream(e.names.ResultsStream(), func(c *streamConfig) { c.MaxBytes, c.Discard = 8<<10, discardNew })

	start := time.Now()
	text := strings.Repeat("t", 20_000)
	e.call(protocol.Call{CallID: "stuck", Tool: "echo", Args: json.RawMessage(`{"text":"` + text + `"}`)})
	require.Eventually(t, func() bool {
		_, rd := readiness(t, w.Handler())
		return rd.Status == "not_ready" && strings.HasPrefix(rd.Checks["slots"], "1 of 1 slots held by calls that cannot finish: call stuck (echo): result unpublishable for ")
	}, 30*time.Second, 100*time.Millisecond)
	d := recv(t, dlq)
	require.Regexp(t, `^result not published within 12s: publish result: `, d.Header.Get(protocol.HeaderDeadReason))
	r := e.result("stuck", "stuck")
	require.False(t, r.OK)
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Regexp(t, `^call abandoned after 1 deliveries: result not published within 12s: publish result: `, r.Error)
	require.Less(t, time.Since(start), 40*time.Second, "given up, not retried for ever")
	require.Equal(t, 1, e.resultsOn("stuck", "stuck"))
	e.waitCallsDrained()
	require.Eventually(t, func() bool {
		_, rd := readiness(t, w.Handler())
		return rd.Checks["slots"] == "ok"
	}, 10*time.Second, 100*time.Millisecond)
	// Every attempt was counted (backoff 100 ms doubling to 5 s: several
	// in 12 s), as a failure retrying may cure.
	require.GreaterOrEqual(t, publishFailures(t, reader, "result", "unavailable"), 4.0)
	require.Zero(t, publishFailures(t, reader, "result", "too_large"), "a full stream is not a message too large")
}

// TestBlobConfigNarrowsWhichOutputsAreStored: a worker's BlobConfig
// (CAPSTAN_BLOB_TOOLS, CAPSTAN_BLOB_MIN_BYTES) decides which cut outputs
// become blobs: only the tools it lists, and only outputs of at least
// MinBytes; the others are answered with their cut alone.
func TestBlobConfigNarrowsWhichOutputsAreStored(t *testing.T) {
	t.Parallel()
	e := newStockEnv(t)
	e.start(worker.Config{Blobs: worker.BlobConfig{Tools: []string{"echo"}, MinBytes: 300_000}}, echo.Tool(), bigStructured())
	for _, c := range []struct {
		id, tool, args string
		blob           bool
	}{
		{"small", "echo", `{"text":"` + strings.Repeat("a", 200_000) + `"}`, false}, // cut at the 80,000-character budget, under MinBytes
		{"large", "echo", `{"text":"` + strings.Repeat("b", 400_000) + `"}`, true},
		{"unlisted", "big_structured", `{}`, false},
	} {
		e.call(protocol.Call{CallID: c.id, Tool: c.tool, Args: json.RawMessage(c.args)})
		r := e.result(c.id, c.id)
		require.True(t, r.OK, "%s: %s: %s", c.id, r.Code, r.Error)
		require.True(t, r.Truncated || r.StructuredOmitted, c.id)
		if !c.blob {
			require.Nil(t, r.Blob, c.id)
			continue
		}
		require.NotNil(t, r.Blob, c.id)
		require.Equal(t, int64(400_000), r.Blob.Size)
	}
	e.waitCallsDrained()
}

// TestBlobsHoldNoSecret: the full output of a call is redacted before it is
// stored, whether it is the tool's value, its Full text or a structured
// payload left out of the message.
func TestBlobsHoldNoSecret(t *testing.T) {
	t.Parallel()
	e := newStockEnv(t)
	const secret = "s3cr3t-blob-value"
	env := map[string]string{"CAPSTAN_SECRET_PROVIDERS_GITHUB_TOKEN": secret}
	leak := tool.Tool{Name: "leak_big", Capabilities: tool.Capabilities{Secrets: []string{"providers/github/*"}, SecretsRaw: []string{"providers/github/*"}},
		Execute: func(ctx context.Context, raw json.RawMessage, tc *tool.Context) (tool.Result, error) {
			v, err := tc.Secrets.Secret(ctx, "providers/github/token")
			if err != nil {
				return tool.Result{}, err
			}
			var a struct{ Part string }
			_ = json.Unmarshal(raw, &a)
			big := strings.Repeat("line with "+v+" in it\n", 20_000) // 600 kB
			switch a.Part {
			case "full":
				r := tool.OK("short view")
				r.Full = big
				return r, nil
			case "structured":
				r := tool.OK("see structured")
				r.Structured = map[string]any{"log": big, v: "as a key too"}
				return r, nil
			}
			return tool.OK(big), nil
		}}
	e.start(worker.Config{Getenv: func(k string) string { return env[k] }}, leak)
	for _, part := range []string{"value", "full", "structured"} {
		id := "leak-" + part
		e.call(protocol.Call{CallID: id, Tool: "leak_big", Args: json.RawMessage(`{"part":"` + part + `"}`)})
		r := e.result(id, id)
		require.True(t, r.OK, "%s: %s", r.Code, r.Error)
		require.NotNil(t, r.Blob, part)
		got := string(e.readBlob(r.Blob))
		require.NotContains(t, got, secret, part)
		require.Contains(t, got, "line with [REDACTED] in it", part)
		require.NotContains(t, r.Value, secret)
	}
}

// TestProgressAndDeadLettersAreBounded: a progress message is cut at
// ProgressMaxChars; a call that nearly fills the server's max payload is
// still dead-lettered, its body cut and the cut recorded.
func TestProgressAndDeadLettersAreBounded(t *testing.T) {
	t.Parallel()
	e := newStockEnv(t)
	chatty := tool.Tool{Name: "chatty", Execute: func(_ context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
		return tool.OK("done"), tc.Emit(tool.Progress{Message: strings.Repeat("p", 500_000)})
	}}
	e.start(worker.Config{}, chatty, echo.Tool())
	progress := e.tail(e.names.ProgressStream(), e.names.Prefix()+".progress.internal.default.chat.chat")
	dlq := e.tail(e.names.DLQStream(), e.names.Prefix()+".dlq.echo")

	e.call(protocol.Call{CallID: "chat", Tool: "chatty"})
	require.True(t, e.result("chat", "chat").OK)
	var ev protocol.Progress
	require.NoError(t, json.Unmarshal(recv(t, progress).Data, &ev))
	require.Equal(t, strings.Repeat("p", worker.ProgressMaxChars)+"\n[truncated — 500000 chars total]", ev.Message)

	// Not JSON, and as large as the server lets the caller publish.
	hdr := bus.Header{protocol.HeaderProtocol: {protocol.Version}}
	body := bytes.Repeat([]byte("x"), bustest.StockMaxPayload-bus.MessageSize(0, hdr, "huge-bad")-10)
	_, err := e.conn.Publish(ctxT(t), e.names.Prefix()+".call.default.default.echo", body, hdr, "huge-bad")
	require.NoError(t, err)
	d := recv(t, dlq)
	require.LessOrEqual(t, messageSize(d), bustest.StockMaxPayload)
	require.Equal(t, fmt.Sprint(len(body)), d.Header.Get(protocol.HeaderDeadBodyTruncated))
	require.Less(t, len(d.Data), len(body))
	require.True(t, bytes.HasPrefix(body, d.Data))
	e.waitCallsDrained()
}
