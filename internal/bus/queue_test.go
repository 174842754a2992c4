package bus_test

import (
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

// publishCalls stores n calls of personality's tool in pool.
func publishCalls(t *testing.T, c *bus.Conn, pool, personality, tool string, n int) {
	t.Helper()
	subject, err := c.Names().CallSubject(pool, personality, tool)
	require.NoError(t, err)
	for range n {
		_, err := c.Publish(ctxT(t), subject, []byte(`{}`), nil, "")
		require.NoError(t, err)
	}
}

// publishAudit stores recs as one audit message of tool, as a worker
// batches them.
func publishAudit(t *testing.T, c *bus.Conn, tool string, recs ...protocol.AuditRecord) {
	t.Helper()
	subject, err := c.Names().AuditSubject(tool)
	require.NoError(t, err)
	var data []byte
	for i := range recs {
		data, err = protocol.EncodeAuditRecord(data, &recs[i])
		require.NoError(t, err)
	}
	_, err = c.Publish(ctxT(t), subject, data, bus.Header{protocol.HeaderAuditRecords: {"1"}}, "")
	require.NoError(t, err)
}

func rec(personality, decision string, ago time.Duration, durationMS int64) protocol.AuditRecord {
	return protocol.AuditRecord{
		Time: time.Now().Add(-ago).UTC(), CallID: "c", BatchID: "c", PersonalityID: personality,
		Tool: "echo", Decision: decision, OK: decision == protocol.DecisionAllowed, DurationMS: durationMS, WorkerID: "w",
	}
}

func TestPoolQueue(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	c := bustest.Conn(t, url, "")
	// The pool is empty: no consumer, nothing stored, no audit record.
	q, err := c.PoolQueue(ctxT(t), "default")
	require.NoError(t, err)
	require.Empty(t, q)

	// The scheduler's consumers.
	alice, err := c.PersonalityConsumer(ctxT(t), "default", "alice", 5, bus.DefaultAckWait, 0)
	require.NoError(t, err)
	_, err = c.PersonalityConsumer(ctxT(t), "default", "carol", 5, bus.DefaultAckWait, 2) // nothing waiting
	require.NoError(t, err)
	_, err = c.PersonalityConsumer(ctxT(t), "other", "dave", 5, bus.DefaultAckWait, 0) // another pool's
	require.NoError(t, err)
	publishCalls(t, c, "default", "alice", "echo", 2)
	publishCalls(t, c, "default", "alice", "sleep", 1)
	publishCalls(t, c, "default", "bob", "echo", 2) // bob has no consumer yet
	publishCalls(t, c, "default", "bob", "fetch", 1)
	publishCalls(t, c, "other", "eve", "echo", 4)

	// One of alice's calls runs: delivered, not acknowledged.
	got, _, err := alice.FetchNoWait(ctxT(t), 1, func(*bus.Msg) {})
	require.NoError(t, err)
	require.Equal(t, 1, got)

	publishAudit(t, c, "echo",
		rec("alice", protocol.DecisionAllowed, 5*time.Second, 100),
		rec("alice", protocol.DecisionAllowed, 20*time.Second, 30_000),  // started 50 s ago
		rec("alice", protocol.DecisionAllowed, 10*time.Second, 120_000), // started before the window
		rec("alice", protocol.DecisionToolset, time.Second, 0),          // refused: nothing ran
		rec("bob", protocol.DecisionAllowed, time.Second, 5),
		rec("carol", protocol.DecisionAbandoned, time.Second, 50), // ran, result not published
		rec("carol", protocol.DecisionAbandoned, time.Second, 0),  // never ran
		rec("carol", protocol.DecisionAnswered, time.Second, 0),   // answered from the stored result
		rec("dave", protocol.DecisionAllowed, time.Second, 1),     // not a personality of the pool
		rec("carol", protocol.DecisionDryRun, time.Second, 0),
		rec("bob", protocol.DecisionCancelled, time.Second, 0),
		rec("bob", protocol.DecisionDeadline, 2*time.Minute, 0),
		rec("alice", protocol.DecisionAllowed, 2*time.Minute, 0), // long ago
		rec("bob", protocol.DecisionAllowed, 45*time.Second, 0),
		rec("bob", protocol.DecisionAllowed, 90*time.Second, 0), // outside
	)
	publishAudit(t, c, "sleep", rec("alice", protocol.DecisionAllowed, time.Second, 3))

	q, err = c.PoolQueue(ctxT(t), "default")
	require.NoError(t, err)
	require.Equal(t, []bus.QueueEntry{
		{Personality: "alice", Waiting: 2, Running: 1, StartsLastMinute: 3, ShareLastMinute: 0.5},
		{Personality: "bob", Waiting: 3, Running: 0, StartsLastMinute: 2, ShareLastMinute: 2.0 / 6},
		{Personality: "carol", Waiting: 0, Running: 0, StartsLastMinute: 1, ShareLastMinute: 1.0 / 6},
	}, q)

	q, err = c.PoolQueue(ctxT(t), "other")
	require.NoError(t, err)
	require.Equal(t, []bus.QueueEntry{
		{Personality: "dave", StartsLastMinute: 1, ShareLastMinute: 1},
		{Personality: "eve", Waiting: 4},
	}, q)

	_, err = c.PoolQueue(ctxT(t), "no.such")
	require.ErrorContains(t, err, `bus: queue of pool "no.such": pool`)
}

func TestStartsSinceWithoutRecordsInTheWindow(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	c := bustest.Conn(t, url, "")
	starts, err := c.StartsSince(ctxT(t), time.Now().Add(-time.Minute))
	require.NoError(t, err)
	require.Empty(t, starts)

	publishAudit(t, c, "echo", rec("alice", protocol.DecisionAllowed, 0, 0))
	starts, err = c.StartsSince(ctxT(t), time.Now().Add(time.Hour)) // stored before since
	require.NoError(t, err)
	require.Empty(t, starts)
	starts, err = c.StartsSince(ctxT(t), time.Now().Add(-time.Minute))
	require.NoError(t, err)
	require.Equal(t, map[string]int{"alice": 1}, starts)
}

func TestRan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		decision string
		duration int64
		want     bool
	}{
		{"allowed", protocol.DecisionAllowed, 0, true},
		{"abandoned after its run", protocol.DecisionAbandoned, 10, true},
		{"abandoned before any run", protocol.DecisionAbandoned, 0, false},
		{"answered", protocol.DecisionAnswered, 10, false},
		{"dry run", protocol.DecisionDryRun, 0, false},
		{"cancelled before start", protocol.DecisionCancelled, 0, false},
		{"deadline before start", protocol.DecisionDeadline, 0, false},
		{"refused", protocol.DecisionPermission, 0, false},
		{"rate limited", protocol.DecisionRateLimit, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := protocol.AuditRecord{Decision: tc.decision, DurationMS: tc.duration}
			require.Equal(t, tc.want, bus.Ran(&r))
		})
	}
}

// BenchmarkStartsSince reads a minute of audit records: 1,000 messages of
// 50 records each (a busy pool's minute), counted per personality.
func BenchmarkStartsSince(b *testing.B) {
	url := bustest.Server(b)
	c := bustest.Conn(b, url, "")
	subject, err := c.Names().AuditSubject("echo")
	require.NoError(b, err)
	ctx := b.Context()
	var data []byte
	for i := range 50 {
		r := rec([]string{"alice", "bob", "carol"}[i%3], protocol.DecisionAllowed, time.Second, 10)
		r.ArgsSHA256 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		data, err = protocol.EncodeAuditRecord(data, &r)
		require.NoError(b, err)
	}
	for range 1000 {
		_, err := c.Publish(ctx, subject, data, nil, "")
		require.NoError(b, err)
	}
	b.SetBytes(int64(1000 * len(data)))
	for b.Loop() {
		starts, err := c.StartsSince(ctx, time.Now().Add(-time.Minute))
		require.NoError(b, err)
		require.Equal(b, 50_000, starts["alice"]+starts["bob"]+starts["carol"])
	}
}
