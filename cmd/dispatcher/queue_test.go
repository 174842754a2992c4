package main

import (
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

// queueFixture stores, on the server at url, calls in pool default of
// personalities batch (3, a scheduling section, a consumer as the
// scheduler makes it, one call delivered and not yet acknowledged), broken
// (1, an invalid document) and ghost (1, not stored), and audit records of
// the last minute: 3 starts of batch, 1 of ghost, and a refusal of broken.
func queueFixture(t *testing.T, url string) {
	t.Helper()
	conn := bustest.Conn(t, url, "")
	docs, err := conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	_, err = docs.Put(ctxT(t), "batch", []byte("id: batch\nscheduling:\n  priority: 1\n  weight: 3\n  max_concurrency: 4\n"))
	require.NoError(t, err)
	_, err = docs.Put(ctxT(t), "broken", []byte("id: broken\nscheduling: {weight: 0}\n"))
	require.NoError(t, err)
	for personality, n := range map[string]int{"batch": 3, "broken": 1, "ghost": 1} {
		subject, err := conn.Names().CallSubject(protocol.DefaultPool, personality, "echo")
		require.NoError(t, err)
		for range n {
			_, err := conn.Publish(ctxT(t), subject, []byte(`{}`), nil, "")
			require.NoError(t, err)
		}
	}
	cons, err := conn.PersonalityConsumer(ctxT(t), protocol.DefaultPool, "batch", 5, bus.DefaultAckWait, 4)
	require.NoError(t, err)
	got, _, err := cons.FetchNoWait(ctxT(t), 1, func(*bus.Msg) {})
	require.NoError(t, err)
	require.Equal(t, 1, got)
	var data []byte
	for _, r := range []struct {
		personality, decision string
	}{{"batch", protocol.DecisionAllowed}, {"batch", protocol.DecisionAllowed}, {"batch", protocol.DecisionAllowed},
		{"ghost", protocol.DecisionAllowed}, {"broken", protocol.DecisionPermission}} {
		rec := protocol.AuditRecord{Time: time.Now().UTC(), CallID: "c", BatchID: "c", PersonalityID: r.personality, Tool: "echo",
			Decision: r.decision, OK: r.decision == protocol.DecisionAllowed, DurationMS: 2, WorkerID: "w"}
		data, err = protocol.EncodeAuditRecord(data, &rec)
		require.NoError(t, err)
	}
	subject, err := conn.Names().AuditSubject("echo")
	require.NoError(t, err)
	_, err = conn.Publish(ctxT(t), subject, data, bus.Header{protocol.HeaderAuditRecords: {"5"}}, "")
	require.NoError(t, err)
}

const brokenNote = "capstan: queue: personality broken: invalid personality document: scheduling.weight: must be an integer from 1 to 1000; its scheduling shows the defaults\n"

func TestQueue(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	queueFixture(t, url)
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}

	t.Run("json", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runT(t, env, "", "queue", "--json")
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, brokenNote, stderr)
		require.JSONEq(t, `[
			{"personality":"batch","waiting":2,"running":1,"priority":1,"weight":3,"max_concurrency":4,"share_last_minute":0.75},
			{"personality":"broken","waiting":1,"running":0,"priority":3,"weight":1,"max_concurrency":0,"share_last_minute":0},
			{"personality":"ghost","waiting":1,"running":0,"priority":3,"weight":1,"max_concurrency":0,"share_last_minute":0.25}
		]`, stdout)
	})
	t.Run("table", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runT(t, env, "", "queue", "--pool", "default")
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, brokenNote, stderr)
		require.Equal(t, ""+
			"PERSONALITY  WAITING  RUNNING  PRIORITY  WEIGHT  MAX_CONCURRENCY  SHARE_1M\n"+
			"batch        2        1        1         3       4                75.0%\n"+
			"broken       1        0        3         1       none             0.0%\n"+
			"ghost        1        0        3         1       none             25.0%\n", stdout)
	})
	t.Run("a pool with nothing queued", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runT(t, env, "", "queue", "--pool", "gpu", "--json")
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, "[]\n", stdout)
		require.Empty(t, stderr)
		code, stdout, stderr = runT(t, env, "", "queue", "--pool", "gpu")
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, "PERSONALITY  WAITING  RUNNING  PRIORITY  WEIGHT  MAX_CONCURRENCY  SHARE_1M\n", stdout)
		require.Equal(t, "capstan: queue: pool gpu has no personality with a consumer or calls waiting\n", stderr)
	})
}

func TestQueueUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad pool", []string{"queue", "--pool", "a.b"}, `capstan: queue: --pool "a.b" must match`},
		{"an argument", []string{"queue", "default"}, `capstan: queue: unexpected argument "default"`},
		{"unknown flag", []string{"queue", "--personality", "x"}, "flag provided but not defined: -personality"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runT(t, nil, "", tc.args...)
			require.Equal(t, exitUsage, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
		})
	}
}

func TestQueueUnreachableServerExits2(t *testing.T) {
	t.Parallel()
	code, _, stderr := runT(t, map[string]string{"CAPSTAN_NATS_URL": "nats://127.0.0.1:1"}, "", "queue")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "capstan: client: bus: connect to nats://127.0.0.1:1")
}
