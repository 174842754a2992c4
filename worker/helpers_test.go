package worker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// env is one embedded server with a test-side connection speaking the raw
// wire protocol.
type env struct {
	t     *testing.T
	url   string
	conn  *bus.Conn
	names protocol.Names
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := bustest.Server(t)
	c := bustest.Conn(t, url, "")
	e := &env{t: t, url: url, conn: c, names: c.Names()}
	e.putPersonality("default", "id: default\n")
	return e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) putPersonality(id, doc string) {
	e.t.Helper()
	kv, err := e.conn.KV(ctxT(e.t), bus.Personalities)
	require.NoError(e.t, err)
	_, err = kv.Put(ctxT(e.t), id, []byte(doc))
	require.NoError(e.t, err)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// start runs a worker until the test ends and waits until it is ready.
func (e *env) start(cfg worker.Config, tools ...tool.Tool) *worker.Worker {
	e.t.Helper()
	w, stop := e.startStoppable(cfg, tools...)
	e.t.Cleanup(stop)
	return w
}

func (e *env) startStoppable(cfg worker.Config, tools ...tool.Tool) (*worker.Worker, func()) {
	e.t.Helper()
	cfg.NATSURL, cfg.NATSCreds = e.url, bustest.Creds(e.url)
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 2 * time.Second
	}
	if len(tools) == 0 {
		tools = []tool.Tool{echo.Tool()}
	}
	w, err := worker.New(cfg, tools...)
	require.NoError(e.t, err)
	return w, e.runStoppable(w)
}

// run runs a worker built by the test until the test ends and waits until
// it is ready.
func (e *env) run(w *worker.Worker) {
	e.t.Helper()
	e.t.Cleanup(e.runStoppable(w))
}

// runStoppable runs w, waits until it is ready and returns the function
// that stops it.
func (e *env) runStoppable(w *worker.Worker) func() {
	e.t.Helper()
	return workertest.Start(e.t, w, nil)
}

func (e *env) call(c protocol.Call) protocol.Call {
	e.t.Helper()
	if c.SessionID == "" {
		c.SessionID = "s1"
	}
	if c.Args == nil {
		c.Args = json.RawMessage(`{}`)
	}
	body, err := json.Marshal(c)
	require.NoError(e.t, err)
	e.publishAs("default", cmp.Or(c.PersonalityID, "default"), c.Tool, body, c.CallID)
	return c
}

// publishRaw publishes body as a call of personality "default".
func (e *env) publishRaw(pool, toolName string, body []byte, msgID string) {
	e.t.Helper()
	e.publishAs(pool, "default", toolName, body, msgID)
}

// publishAs publishes body on <p>.call.<pool>.<personality>.<tool>.
func (e *env) publishAs(pool, personality, toolName string, body []byte, msgID string) {
	e.t.Helper()
	subject := e.names.Prefix() + ".call." + pool + "." + personality + "." + toolName
	_, err := e.conn.Publish(ctxT(e.t), subject, body, bus.Header{protocol.HeaderProtocol: {protocol.Version}}, msgID)
	require.NoError(e.t, err)
}

// resultFilter is <p>.result.*.<batch>.<call>: a call's result under any
// personality (the tests of personality_subject_test.go check the token).
func (e *env) resultFilter(batch, call string) string {
	e.t.Helper()
	subject, err := e.names.ResultSubject("any", batch, call)
	require.NoError(e.t, err)
	return strings.Replace(subject, ".result.any.", ".result.*.", 1)
}

// result waits for the result of a call on <p>.result.*.<batch>.<call>.
func (e *env) result(batch, call string) protocol.Result {
	e.t.Helper()
	subject := e.resultFilter(batch, call)
	got := make(chan *bus.Msg, 4)
	stop, err := e.conn.Tail(ctxT(e.t), e.names.ResultsStream(), []string{subject}, bus.FromStart, func(m *bus.Msg) { got <- m })
	require.NoError(e.t, err)
	defer stop()
	select {
	case m := <-got:
		var r protocol.Result
		require.NoError(e.t, json.Unmarshal(m.Data, &r))
		require.Equal(e.t, protocol.Version, m.Header.Get(protocol.HeaderProtocol))
		return r
	case <-time.After(30 * time.Second):
		e.t.Fatalf("no result for %s", subject)
		return protocol.Result{}
	}
}

// resultsOn counts stored messages on a result subject.
func (e *env) resultsOn(batch, call string) int {
	e.t.Helper()
	subject := e.resultFilter(batch, call)
	n := 0
	done := make(chan struct{})
	marker := e.names.Prefix() + ".result.marker." + batch + "." + call + "-end-" + strconv.FormatUint(markerSeq.Add(1), 10)
	stop, err := e.conn.Tail(ctxT(e.t), e.names.ResultsStream(), []string{subject, marker}, bus.FromStart, func(m *bus.Msg) {
		if m.Subject == marker {
			close(done)
			return
		}
		n++
	})
	require.NoError(e.t, err)
	defer stop()
	_, err = e.conn.Publish(ctxT(e.t), marker, []byte("x"), nil, "")
	require.NoError(e.t, err)
	<-done
	return n
}

// markerSeq makes every end marker of resultsOn unique.
var markerSeq atomic.Uint64

// waitCallsDrained waits until the calls stream holds no message (all acked).
func (e *env) waitCallsDrained() {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		n, err := e.conn.StreamMsgs(ctxT(e.t), e.names.CallsStream())
		return err == nil && n == 0
	}, 30*time.Second, 20*time.Millisecond)
}

// tail collects messages of a stream filter from the start.
func (e *env) tail(stream string, filter string) <-chan *bus.Msg {
	e.t.Helper()
	ch := make(chan *bus.Msg, 100)
	stop, err := e.conn.Tail(ctxT(e.t), stream, []string{filter}, bus.FromStart, func(m *bus.Msg) { ch <- m })
	require.NoError(e.t, err)
	e.t.Cleanup(stop)
	return ch
}

func recv(t *testing.T, ch <-chan *bus.Msg) *bus.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message in 30s")
		return nil
	}
}

var errBoom = errors.New("boom")

// auditOn returns the audit record of callID from the audit messages of ch
// (batches: one record per line), skipping the records of other calls,
// and the raw line of the record.
func auditOn(t *testing.T, ch <-chan *bus.Msg, callID string) (protocol.AuditRecord, string) {
	t.Helper()
	for {
		m := recv(t, ch)
		recs, err := protocol.DecodeAuditRecords(m.Data)
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(len(recs)), m.Header.Get(protocol.HeaderAuditRecords), "the header counts the records")
		lines := strings.Split(strings.TrimSuffix(string(m.Data), "\n"), "\n")
		for i, rec := range recs {
			if rec.CallID == callID {
				return rec, lines[i]
			}
		}
	}
}
