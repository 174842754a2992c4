package workercmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

func TestConfigErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"concurrency not a number", map[string]string{"CAPSTAN_CONCURRENCY": "abc"}, `invalid configuration: CAPSTAN_CONCURRENCY: "abc" is not an integer`},
		{"concurrency zero", map[string]string{"CAPSTAN_CONCURRENCY": "0"}, `CAPSTAN_CONCURRENCY must be at least 1, got 0`},
		{"grace", map[string]string{"CAPSTAN_SHUTDOWN_GRACE": "soon"}, `CAPSTAN_SHUTDOWN_GRACE: "soon" is not a duration`},
		{"timeout", map[string]string{"CAPSTAN_CALL_TIMEOUT": "-1s"}, `CAPSTAN_CALL_TIMEOUT must be positive, got -1s`},
		{"pool", map[string]string{"CAPSTAN_POOL": "a.b"}, `CAPSTAN_POOL "a.b" must match ^[A-Za-z0-9_-]{1,128}$`},
		{"tools", map[string]string{"CAPSTAN_TOOLS": "echo,nope"}, `CAPSTAN_TOOLS names "nope", which is not a known tool`},
		{"secrets backend", map[string]string{"CAPSTAN_SECRETS_BACKEND": "s3"}, `CAPSTAN_SECRETS_BACKEND "s3" must be vault, file, env or none`},
		{"vault without login", map[string]string{"CAPSTAN_SECRETS_BACKEND": "vault"}, `invalid configuration: CAPSTAN_SECRETS_BACKEND "vault": VAULT_TOKEN or VAULT_ROLE_ID (with VAULT_SECRET_ID) must be set`},
		{"vault skip verify", map[string]string{"CAPSTAN_SECRETS_BACKEND": "vault", "VAULT_TOKEN": "t", "VAULT_SKIP_VERIFY": "true"}, `VAULT_SKIP_VERIFY is not supported: the worker always verifies Vault's TLS certificate (give its CA with VAULT_CACERT)`},
		{"vault skip verify garbage", map[string]string{"VAULT_SKIP_VERIFY": "maybe"}, `VAULT_SKIP_VERIFY is not supported`},
		{"vault mount empty", map[string]string{"CAPSTAN_SECRETS_BACKEND": "vault", "VAULT_TOKEN": "t", "CAPSTAN_VAULT_MOUNT": "/"}, `CAPSTAN_VAULT_MOUNT must not be empty`},
		{"vault role without secret", map[string]string{"CAPSTAN_SECRETS_BACKEND": "vault", "VAULT_ROLE_ID": "r"}, `VAULT_SECRET_ID must be set with VAULT_ROLE_ID`},
		{"log level", map[string]string{"CAPSTAN_LOG_LEVEL": "loud"}, `CAPSTAN_LOG_LEVEL: "loud" must be debug, info, warn or error`},
		{"max deliver", map[string]string{"CAPSTAN_MAX_DELIVER": "x"}, `CAPSTAN_MAX_DELIVER: "x" is not an integer`},
		{"max deliver zero", map[string]string{"CAPSTAN_MAX_DELIVER": "0"}, `CAPSTAN_MAX_DELIVER must be at least 1, got 0`},
		{"negative grace", map[string]string{"CAPSTAN_SHUTDOWN_GRACE": "-1s"}, `CAPSTAN_SHUTDOWN_GRACE must not be negative, got -1s`},
		{"timeout zero", map[string]string{"CAPSTAN_CALL_TIMEOUT": "0s"}, `CAPSTAN_CALL_TIMEOUT must be positive, got 0s`},
		{"replicas zero", map[string]string{"CAPSTAN_STREAM_REPLICAS": "0"}, `CAPSTAN_STREAM_REPLICAS must be 1 to 5, got 0`},
		{"process network", map[string]string{"CAPSTAN_PROCESS_NETWORK": "open"}, `CAPSTAN_PROCESS_NETWORK "open" must be confined or unconfined`},
		{"min free disk", map[string]string{"CAPSTAN_MIN_FREE_DISK": "lots"}, `CAPSTAN_MIN_FREE_DISK "lots" is not a size (use a number with a unit, such as 2GiB or 500MB; 0 turns the check off)`},
		{"replicas too many", map[string]string{"CAPSTAN_STREAM_REPLICAS": "7"}, `CAPSTAN_STREAM_REPLICAS must be 1 to 5, got 7`},
		{"log format", map[string]string{"CAPSTAN_LOG_FORMAT": "xml"}, `CAPSTAN_LOG_FORMAT: "xml" must be text or json`},
		{"otel exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, `OTEL_TRACES_EXPORTER "zipkin" must be otlp or none`},
		{"otel protocol", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, `OTEL_EXPORTER_OTLP_PROTOCOL "http/json" must be http/protobuf or grpc`},
		{"ack wait zero", map[string]string{"CAPSTAN_ACK_WAIT": "0s"}, `CAPSTAN_ACK_WAIT must be at least 3s, got 0s`},
		{"ack wait short", map[string]string{"CAPSTAN_ACK_WAIT": "2s"}, `CAPSTAN_ACK_WAIT must be at least 3s, got 2s`},
		{"ack wait not a duration", map[string]string{"CAPSTAN_ACK_WAIT": "30"}, `CAPSTAN_ACK_WAIT: "30" is not a duration`},
		{"blobs", map[string]string{"CAPSTAN_BLOBS": "maybe"}, `CAPSTAN_BLOBS "maybe" must be on or off`},
		{"blob tools", map[string]string{"CAPSTAN_BLOB_TOOLS": "echo,nope"}, `CAPSTAN_BLOB_TOOLS names "nope", which this worker does not host`},
		{"blob min negative", map[string]string{"CAPSTAN_BLOB_MIN_BYTES": "-5"}, `CAPSTAN_BLOB_MIN_BYTES must not be negative, got -5`},
		{"blob max too large", map[string]string{"CAPSTAN_BLOB_MAX_BYTES": "2000000000"}, `CAPSTAN_BLOB_MAX_BYTES must be 1 to 1073741824, got 2000000000`},
		{"blob max zero", map[string]string{"CAPSTAN_BLOB_MAX_BYTES": "0"}, `CAPSTAN_BLOB_MAX_BYTES must be 1 to 1073741824, got 0`},
		{"blob min over max", map[string]string{"CAPSTAN_BLOB_MIN_BYTES": "100", "CAPSTAN_BLOB_MAX_BYTES": "50"}, `CAPSTAN_BLOB_MIN_BYTES (100) must not exceed CAPSTAN_BLOB_MAX_BYTES (50)`},
		{"result max small", map[string]string{"CAPSTAN_RESULT_MAX_BYTES": "100"}, `CAPSTAN_RESULT_MAX_BYTES must be at least 16384, got 100`},
		{"result max zero", map[string]string{"CAPSTAN_RESULT_MAX_BYTES": "0"}, `CAPSTAN_RESULT_MAX_BYTES must be at least 16384, got 0`},
		{"structured max", map[string]string{"CAPSTAN_STRUCTURED_MAX_BYTES": "-1"}, `CAPSTAN_STRUCTURED_MAX_BYTES must be at least 1, got -1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			// Bounded: a config that wrongly passed would start a worker.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := Run(ctx, nil, func(k string) string { return tc.env[k] }, &out, &errb)
			require.ErrorContains(t, err, tc.want)
		})
	}
	err := Run(context.Background(), []string{"extra"}, func(string) string { return "" }, &bytes.Buffer{}, &bytes.Buffer{})
	require.ErrorContains(t, err, `unexpected argument "extra"`)
}

// buildWorker compiles cmd/worker, which is Main.
func buildWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "worker")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/capstanhq/capstan/cmd/worker")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// TestSIGTERMLosesNoCall runs the built binary, fills its slots with calls,
// sends SIGTERM and checks that every call ends with exactly one result:
// short calls finish within the grace, long ones are handed back and run by
// a second worker.
func TestSIGTERMLosesNoCall(t *testing.T) {
	t.Parallel()
	bin := buildWorker(t)
	url := bustest.Server(t)
	conn := bustest.Conn(t, url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pkv, err := conn.KV(ctx, bus.Personalities)
	require.NoError(t, err)
	_, err = pkv.Put(ctx, "default", []byte("id: default\n"))
	require.NoError(t, err)

	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"CAPSTAN_NATS_URL="+url, "CAPSTAN_NATS_CREDS="+bustest.Creds(url), "CAPSTAN_WORKER_ID=term-1", "CAPSTAN_CONCURRENCY=8",
		"CAPSTAN_SHUTDOWN_GRACE=1s", "CAPSTAN_HTTP_ADDR=127.0.0.1:0", "CAPSTAN_LOG_FORMAT=json")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	progress := make(chan string, 64)
	stopTail, err := conn.Tail(ctx, "CAPSTAN_PROGRESS", []string{"capstan.progress.internal.default.term.>"}, bus.FromNew, func(m *bus.Msg) { progress <- m.Subject })
	require.NoError(t, err)
	defer stopTail()

	// Wait until the worker is in the catalog.
	tkv, err := conn.KV(ctx, bus.Tools)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, found, err := tkv.Get(ctx, "echo")
		if err != nil || !found {
			return false
		}
		var ce protocol.CatalogEntry
		return json.Unmarshal(e.Value, &ce) == nil && slices.Contains(ce.Workers, "term-1")
	}, 60*time.Second, 50*time.Millisecond, "worker did not register: %s", &logs)

	var ids []string
	for i := range 8 {
		sleep := 300 // finishes within the grace
		if i%2 == 1 {
			sleep = 4000 // still running when the grace ends: handed back
		}
		id := fmt.Sprintf("t%d", i)
		ids = append(ids, id)
		body := fmt.Sprintf(`{"call_id":%q,"batch_id":"term","tool":"echo","session_id":"s","args":{"text":%q,"sleep_ms":%d,"progress":[{"message":"started"}]}}`, id, id, sleep)
		_, err := conn.Publish(ctx, "capstan.call.default.default.echo", []byte(body), nil, id)
		require.NoError(t, err)
	}
	for range 8 {
		select {
		case <-progress:
		case <-ctx.Done():
			t.Fatalf("calls did not start: %s", &logs)
		}
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "worker exit: %s", &logs)
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("worker did not exit after SIGTERM: %s", &logs)
	}
	require.Contains(t, logs.String(), "handing back in-flight calls")

	// A second worker picks up what was handed back.
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), WorkerID: "term-2", Logger: nil}, builtin.All()...)
	require.NoError(t, err)
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { wcancel(); <-done }()

	results := map[string][]protocol.Result{}
	got := make(chan *bus.Msg, 64)
	stopRes, err := conn.Tail(ctx, "CAPSTAN_RESULTS", []string{"capstan.result.default.term.>"}, bus.FromStart, func(m *bus.Msg) { got <- m })
	require.NoError(t, err)
	defer stopRes()
	for len(results) < len(ids) {
		select {
		case m := <-got:
			var r protocol.Result
			require.NoError(t, json.Unmarshal(m.Data, &r))
			results[r.CallID] = append(results[r.CallID], r)
		case <-ctx.Done():
			t.Fatalf("only %d of %d results", len(results), len(ids))
		}
	}
	// Let stragglers (duplicates) show up, then check exactly one each.
	require.Eventually(t, func() bool {
		n, err := conn.StreamMsgs(ctx, "CAPSTAN_CALLS")
		return err == nil && n == 0
	}, 60*time.Second, 50*time.Millisecond)
	for _, id := range ids {
		rs := results[id]
		require.Len(t, rs, 1, "call %s", id)
		require.True(t, rs[0].OK, "call %s: %s", id, rs[0].Error)
		require.Equal(t, id, rs[0].Value)
	}
	var byFirst, bySecond int
	for _, id := range ids {
		if results[id][0].WorkerID == "term-1" {
			byFirst++
		} else {
			bySecond++
		}
	}
	require.Equal(t, 4, byFirst, "short calls finish within the grace")
	require.Equal(t, 4, bySecond, "long calls are handed back and rerun")
	require.False(t, strings.Contains(logs.String(), `"level":"ERROR"`), "no errors logged: %s", &logs)
}

// TestSIGTERMWithNATSGoneExitsWithinTheGrace runs the built binary with
// calls in flight, stops its NATS server, and sends SIGTERM: the process
// exits within CAPSTAN_SHUTDOWN_GRACE plus exitMargin, however long its bus
// operations would wait for a server that is gone (it used to take about
// 70s with a 30s grace). The bound adds generous slack for a loaded
// machine: it proves the exit does not wait on the bus, not how fast it is.
func TestSIGTERMWithNATSGoneExitsWithinTheGrace(t *testing.T) {
	t.Parallel()
	bin := buildWorker(t)
	srv := bustest.NewRestartable(t)
	url := srv.URL()
	conn := bustest.Conn(t, url, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pkv, err := conn.KV(ctx, bus.Personalities)
	require.NoError(t, err)
	_, err = pkv.Put(ctx, "default", []byte("id: default\n"))
	require.NoError(t, err)

	const grace = 2 * time.Second
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"CAPSTAN_NATS_URL="+url, "CAPSTAN_NATS_CREDS="+bustest.Creds(url), "CAPSTAN_WORKER_ID=gone-1", "CAPSTAN_CONCURRENCY=4",
		"CAPSTAN_SHUTDOWN_GRACE="+grace.String(), "CAPSTAN_HTTP_ADDR=127.0.0.1:0", "CAPSTAN_LOG_FORMAT=json")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	progress := make(chan string, 16)
	stopTail, err := conn.Tail(ctx, "CAPSTAN_PROGRESS", []string{"capstan.progress.internal.default.gone.>"}, bus.FromNew, func(m *bus.Msg) { progress <- m.Subject })
	require.NoError(t, err)
	defer stopTail()
	// Calls that outlast the grace, running when the server goes.
	for i := range 3 {
		id := fmt.Sprintf("g%d", i)
		body := fmt.Sprintf(`{"call_id":%q,"batch_id":"gone","tool":"echo","session_id":"s","args":{"text":"x","sleep_ms":60000,"progress":[{"message":"started"}]}}`, id)
		_, err := conn.Publish(ctx, "capstan.call.default.default.echo", []byte(body), nil, id)
		require.NoError(t, err)
	}
	for range 3 {
		select {
		case <-progress:
		case <-ctx.Done():
			t.Fatalf("calls did not start: %s", &logs)
		}
	}

	srv.Stop()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	sent := time.Now()
	bound := grace + exitMargin + 10*time.Second
	select {
	case err := <-exited:
		require.NoError(t, err, "worker exit: %s", &logs)
	case <-time.After(bound):
		_ = cmd.Process.Kill()
		t.Fatalf("worker still running %s after SIGTERM with NATS gone: %s", bound, &logs)
	}
	t.Logf("exited %s after SIGTERM (grace %s, margin %s)", time.Since(sent).Round(time.Millisecond), grace, exitMargin)
	require.Contains(t, logs.String(), "handing back in-flight calls")
}
