package bus_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// nkey is the option that authenticates a raw connection to the bustest
// server at url.
func nkey(t *testing.T, url string) nats.Option {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(bustest.Creds(url))
	require.NoError(t, err)
	return opt
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEnsureTopologyIsIdempotent(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	c1 := bustest.Conn(t, url, "")
	require.NoError(t, c1.EnsureTopology(ctxT(t)))
	c2 := bustest.Conn(t, url, "") // a second component finds everything in place
	require.NoError(t, c2.EnsureTopology(ctxT(t)))
	n, err := c2.StreamMsgs(ctxT(t), "CAPSTAN_CALLS")
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestIncompatibleStreamIsReportedNotChanged(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	nc, err := nats.Connect(url, nkey(t, url))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(ctxT(t), jetstream.StreamConfig{Name: "CAPSTAN_CALLS", Subjects: []string{"capstan.call.>"}, Retention: jetstream.LimitsPolicy})
	require.NoError(t, err)

	_, err = bus.Connect(ctxT(t), bus.Config{URL: url, Creds: bustest.Creds(url)})
	var inc *bus.IncompatibleError
	require.ErrorAs(t, err, &inc)
	require.Equal(t, "CAPSTAN_CALLS", inc.Name)
	require.Contains(t, err.Error(), "retention is Limits, want WorkQueue")
	require.Contains(t, err.Error(), "stream CAPSTAN_CALLS exists with an incompatible configuration")

	s, err := js.Stream(ctxT(t), "CAPSTAN_CALLS")
	require.NoError(t, err)
	require.Equal(t, jetstream.LimitsPolicy, s.CachedInfo().Config.Retention, "existing stream must not be changed")
}

func TestIncompatibleBucketIsReported(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	nc, err := nats.Connect(url, nkey(t, url))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateKeyValue(ctxT(t), jetstream.KeyValueConfig{Bucket: "capstan_completions", TTL: time.Hour})
	require.NoError(t, err)
	_, err = bus.Connect(ctxT(t), bus.Config{URL: url, Creds: bustest.Creds(url)})
	require.ErrorContains(t, err, "bucket capstan_completions exists with an incompatible configuration: ttl is 1h0m0s, want 24h0m0s")
}

func TestPrefixesShareAnAccount(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	a := bustest.Conn(t, url, "alpha")
	b := bustest.Conn(t, url, "beta")
	require.Equal(t, "ALPHA_CALLS", a.Names().CallsStream())
	require.Equal(t, "beta_tools", b.Names().ToolsBucket())
}

func TestPublishDeduplicatesByMsgID(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	dup, err := c.Publish(ctxT(t), "capstan.call.default.echo", []byte(`{}`), nil, "c1")
	require.NoError(t, err)
	require.False(t, dup)
	dup, err = c.Publish(ctxT(t), "capstan.call.default.echo", []byte(`{}`), nil, "c1")
	require.NoError(t, err)
	require.True(t, dup)
	n, err := c.StreamMsgs(ctxT(t), "CAPSTAN_CALLS")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// TestPublishFirstStoresOnlyTheFirstMessageOfASubject: a second message
// on the subject is refused with ErrSubjectTaken however it comes; other
// subjects are not affected; a purge makes room again.
func TestPublishFirstStoresOnlyTheFirstMessageOfASubject(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	hdr := bus.Header{"Capstan-Protocol": {"2"}}
	const subject = "capstan.result.p.b.c1"
	require.NoError(t, c.PublishFirst(ctxT(t), subject, []byte(`{"n":1}`), hdr))
	err := c.PublishFirst(ctxT(t), subject, []byte(`{"n":2}`), hdr)
	require.ErrorIs(t, err, bus.ErrSubjectTaken)
	require.ErrorContains(t, err, subject)
	require.NoError(t, c.PublishFirst(ctxT(t), "capstan.result.p.b.c2", []byte(`{"n":1}`), hdr))
	m, err := c.LastMsg(ctxT(t), "CAPSTAN_RESULTS", subject)
	require.NoError(t, err)
	require.JSONEq(t, `{"n":1}`, string(m.Data), "the first message stays")
	require.NoError(t, c.PurgeSubject(ctxT(t), "CAPSTAN_RESULTS", subject))
	require.NoError(t, c.PublishFirst(ctxT(t), subject, []byte(`{"n":3}`), hdr), "a purged subject takes a first message again")
}

func TestFetchNeverPullsMoreThanAsked(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	for i := range 5 {
		_, err := c.Publish(ctxT(t), "capstan.call.default.echo", []byte{byte('0' + i)}, bus.Header{"Capstan-Protocol": {"1"}}, "")
		require.NoError(t, err)
	}
	cons, err := c.PoolConsumer(ctxT(t), "default", 5, bus.DefaultAckWait)
	require.NoError(t, err)
	msgs := fetch(t, cons, 2, time.Second)
	require.Len(t, msgs, 2)
	require.Equal(t, "1", msgs[0].Header.Get("Capstan-Protocol"))
	require.EqualValues(t, 1, msgs[0].Deliveries)
	_, unacked, err := cons.Pending(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 2, unacked, "only the two fetched calls are out")
	for _, m := range msgs {
		require.NoError(t, m.Ack(ctxT(t)))
	}
	// Nak redelivers with an incremented delivery count (not necessarily
	// before the calls still waiting).
	msgs = fetch(t, cons, 1, time.Second)
	naked := msgs[0].StreamSeq
	require.NoError(t, msgs[0].Nak(0))
	require.Eventually(t, func() bool {
		for _, m := range fetch(t, cons, 3, time.Second) {
			if m.StreamSeq == naked {
				return m.Deliveries == 2
			}
		}
		return false
	}, 20*time.Second, time.Millisecond)
}

func TestPoolConsumerWithOtherMaxDeliverIsReported(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	_, err := c.PoolConsumer(ctxT(t), "default", 5, bus.DefaultAckWait)
	require.NoError(t, err)
	_, err = c.PoolConsumer(ctxT(t), "default", 5, bus.DefaultAckWait)
	require.NoError(t, err)
	_, err = c.PoolConsumer(ctxT(t), "default", 3, bus.DefaultAckWait)
	require.ErrorContains(t, err, "max deliver is 5, want 3")
}

func TestKVCreateUpdateConflict(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	kv, err := c.KV(ctxT(t), bus.Leases)
	require.NoError(t, err)
	rev, err := kv.Create(ctxT(t), "call1", []byte("w1"), 0)
	require.NoError(t, err)
	_, err = kv.Create(ctxT(t), "call1", []byte("w2"), 0)
	require.ErrorIs(t, err, bus.ErrKeyExists)
	rev2, err := kv.Update(ctxT(t), "call1", []byte("w1"), rev)
	require.NoError(t, err)
	_, err = kv.Update(ctxT(t), "call1", []byte("w2"), rev)
	require.ErrorIs(t, err, bus.ErrConflict)
	e, found, err := kv.Get(ctxT(t), "call1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, rev2, e.Revision)
	require.NoError(t, kv.Delete(ctxT(t), "call1"))
	_, found, err = kv.Get(ctxT(t), "call1")
	require.NoError(t, err)
	require.False(t, found)
	_, err = kv.Create(ctxT(t), "call1", []byte("w3"), 0)
	require.NoError(t, err, "a deleted key can be created again")
}

func TestKVPerKeyTTL(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	kv, err := c.KV(ctxT(t), bus.RateLimits)
	require.NoError(t, err)
	_, err = kv.Create(ctxT(t), "k", []byte("1"), time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, found, err := kv.Get(ctxT(t), "k")
		return err == nil && !found
	}, 10*time.Second, 100*time.Millisecond)
}

func TestKVWatchSeesCurrentThenChanges(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	kv, err := c.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	_, err = kv.Put(ctxT(t), "a", []byte("1"))
	require.NoError(t, err)
	var mu sync.Mutex
	seen := map[string]string{}
	stop, err := kv.Watch(ctxT(t), func(e bus.Entry) {
		mu.Lock()
		defer mu.Unlock()
		if e.Deleted {
			delete(seen, e.Key)
			return
		}
		seen[e.Key] = string(e.Value)
	})
	require.NoError(t, err)
	defer stop()
	mu.Lock()
	require.Equal(t, map[string]string{"a": "1"}, seen, "current values are seen before Watch returns")
	mu.Unlock()
	_, err = kv.Put(ctxT(t), "b", []byte("2"))
	require.NoError(t, err)
	require.NoError(t, kv.Delete(ctxT(t), "a"))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 1 && seen["b"] == "2"
	}, 10*time.Second, 20*time.Millisecond)
}

func TestTailFromStartAndLastMsg(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	for _, s := range []string{"capstan.result.b1.c1", "capstan.result.b1.c2", "capstan.result.b2.c3"} {
		_, err := c.Publish(ctxT(t), s, []byte(s), nil, "")
		require.NoError(t, err)
	}
	got := make(chan string, 10)
	stop, err := c.Tail(ctxT(t), "CAPSTAN_RESULTS", []string{"capstan.result.b1.>"}, bus.FromStart, func(m *bus.Msg) { got <- m.Subject })
	require.NoError(t, err)
	defer stop()
	require.Equal(t, "capstan.result.b1.c1", <-got)
	require.Equal(t, "capstan.result.b1.c2", <-got)
	m, err := c.LastMsg(ctxT(t), "CAPSTAN_RESULTS", "capstan.result.*.c3")
	require.NoError(t, err)
	require.Equal(t, "capstan.result.b2.c3", string(m.Data))
	first, err := c.FirstMsg(ctxT(t), "CAPSTAN_RESULTS", "capstan.result.b1.*")
	require.NoError(t, err)
	require.Equal(t, "capstan.result.b1.c1", first.Subject)
	_, err = c.FirstMsg(ctxT(t), "CAPSTAN_RESULTS", "capstan.result.*.nope")
	require.True(t, errors.Is(err, bus.ErrNotFound))
	_, err = c.LastMsg(ctxT(t), "CAPSTAN_RESULTS", "capstan.result.*.nope")
	require.True(t, errors.Is(err, bus.ErrNotFound))
}

func TestMaxDeliveriesAdvisoryIsKeptUntilHandled(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	_, err := c.Publish(ctxT(t), "capstan.call.default.echo", []byte("x"), nil, "")
	require.NoError(t, err)
	cons, err := c.PoolConsumer(ctxT(t), "default", 2, bus.DefaultAckWait)
	require.NoError(t, err)
	for range 2 {
		msgs := fetch(t, cons, 1, 5*time.Second)
		require.Len(t, msgs, 1)
		require.NoError(t, msgs[0].Nak(0))
	}
	// The server sends the advisory when it would deliver a third time;
	// nobody listens yet, the advisories stream keeps it.
	_ = fetch(t, cons, 1, 500*time.Millisecond)
	require.Eventually(t, func() bool {
		n, err := c.StreamMsgs(ctxT(t), "CAPSTAN_ADVISORIES")
		return err == nil && n == 1
	}, 10*time.Second, 20*time.Millisecond)

	ab, err := c.AbandonedConsumer(ctxT(t), "default")
	require.NoError(t, err)
	msgs := fetch(t, ab, 1, 5*time.Second)
	require.Len(t, msgs, 1)
	a, err := bus.ParseMaxDeliveries(msgs[0].Data)
	require.NoError(t, err)
	require.EqualValues(t, 1, a.StreamSeq)
	require.EqualValues(t, 2, a.Deliveries)
	m, err := c.GetMsg(ctxT(t), "CAPSTAN_CALLS", a.StreamSeq)
	require.NoError(t, err)
	require.Equal(t, "x", string(m.Data))
	require.NoError(t, c.DeleteMsg(ctxT(t), "CAPSTAN_CALLS", a.StreamSeq))
	require.NoError(t, msgs[0].Ack(ctxT(t)))
	_, err = bus.ParseMaxDeliveries([]byte("{}"))
	require.Error(t, err)
}

func fetch(t *testing.T, cons *bus.PoolConsumer, n int, wait time.Duration) []*bus.Msg {
	t.Helper()
	var msgs []*bus.Msg
	got, err := cons.Fetch(ctxT(t), n, wait, func(m *bus.Msg) { msgs = append(msgs, m) })
	require.NoError(t, err)
	require.Equal(t, len(msgs), got)
	return msgs
}

func TestFetchPassesEachCallAsItArrives(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	cons, err := c.PoolConsumer(ctxT(t), "default", 5, bus.DefaultAckWait)
	require.NoError(t, err)
	_, err = c.Publish(ctxT(t), "capstan.call.default.echo", []byte("1"), nil, "")
	require.NoError(t, err)
	first := make(chan *bus.Msg, 1)
	done := make(chan int, 1)
	go func() {
		got, _ := cons.Fetch(ctxT(t), 10, 20*time.Second, func(m *bus.Msg) { first <- m })
		done <- got
	}()
	select {
	case m := <-first:
		require.Equal(t, "1", string(m.Data), "a call is handed over before the batch of 10 fills or the wait ends")
	case <-done:
		t.Fatal("fetch ended before passing the call")
	case <-time.After(15 * time.Second):
		t.Fatal("call not passed while the fetch was still waiting")
	}
}

func TestFlushWithoutDeadline(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	require.NoError(t, c.PublishCore("capstan.cancel.x", nil, nil))
	require.NoError(t, c.Flush(context.Background()), "a context without deadline is bounded by Flush itself")
}

func TestKVUpdateTTLKeepsExpiringAndIsFenced(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	kv, err := c.KV(ctxT(t), bus.Leases)
	require.NoError(t, err)
	rev, err := kv.Create(ctxT(t), "lease", []byte("w1"), time.Second)
	require.NoError(t, err)
	rev2, err := kv.UpdateTTL(ctxT(t), "lease", []byte("w1"), rev, time.Second)
	require.NoError(t, err)
	require.Greater(t, rev2, rev)
	_, err = kv.UpdateTTL(ctxT(t), "lease", []byte("w2"), rev, time.Second)
	require.ErrorIs(t, err, bus.ErrConflict, "a stale revision must not refresh the lease")
	// The refreshed value still expires (a plain Update would drop the TTL).
	require.Eventually(t, func() bool {
		_, found, err := kv.Get(ctxT(t), "lease")
		return err == nil && !found
	}, 10*time.Second, 50*time.Millisecond)
	_, err = kv.UpdateTTL(ctxT(t), "lease", []byte("w1"), rev2, time.Second)
	require.ErrorIs(t, err, bus.ErrConflict, "an expired lease cannot be refreshed")
	_, err = kv.Create(ctxT(t), "lease", []byte("w2"), time.Second)
	require.NoError(t, err, "an expired lease can be taken")
}

func TestKVDeleteRevIsFenced(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	kv, err := c.KV(ctxT(t), bus.Leases)
	require.NoError(t, err)
	rev, err := kv.Create(ctxT(t), "lease", []byte("w1"), time.Minute)
	require.NoError(t, err)
	_, err = kv.Put(ctxT(t), "lease", []byte("w2"))
	require.NoError(t, err)
	require.ErrorIs(t, kv.DeleteRev(ctxT(t), "lease", rev), bus.ErrConflict)
	e, found, err := kv.Get(ctxT(t), "lease")
	require.NoError(t, err)
	require.True(t, found, "another holder's lease must survive")
	require.NoError(t, kv.DeleteRev(ctxT(t), "lease", e.Revision))
	_, found, err = kv.Get(ctxT(t), "lease")
	require.NoError(t, err)
	require.False(t, found)
	require.ErrorIs(t, kv.DeleteRev(ctxT(t), "never", 1), bus.ErrConflict)
}

func TestMessagesAndPurgeSubject(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	msgs, err := c.Messages(ctxT(t), "CAPSTAN_DLQ", "capstan.dlq.>")
	require.NoError(t, err)
	require.Empty(t, msgs)
	for i := range 300 {
		subject := "capstan.dlq.a"
		if i%2 == 1 {
			subject = "capstan.dlq.b"
		}
		_, err := c.Publish(ctxT(t), subject, []byte{byte(i)}, nil, "")
		require.NoError(t, err)
	}
	msgs, err = c.Messages(ctxT(t), "CAPSTAN_DLQ", "capstan.dlq.>")
	require.NoError(t, err)
	require.Len(t, msgs, 300)
	for i, m := range msgs {
		require.Equal(t, byte(i), m.Data[0], "oldest first")
	}
	msgs, err = c.Messages(ctxT(t), "CAPSTAN_DLQ", "capstan.dlq.b")
	require.NoError(t, err)
	require.Len(t, msgs, 150)
	require.NoError(t, c.PurgeSubject(ctxT(t), "CAPSTAN_DLQ", "capstan.dlq.b"))
	msgs, err = c.Messages(ctxT(t), "CAPSTAN_DLQ", "capstan.dlq.>")
	require.NoError(t, err)
	require.Len(t, msgs, 150)
	for _, m := range msgs {
		require.Equal(t, "capstan.dlq.a", m.Subject)
	}
}

func TestTimingIsDerivedFromAckWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ackWait, heartbeat, lease time.Duration
	}{
		{30 * time.Second, 10 * time.Second, 20 * time.Second},
		{3 * time.Second, time.Second, 2 * time.Second},
		{4 * time.Second, 4 * time.Second / 3, 2 * time.Second},
		{2 * time.Minute, 40 * time.Second, 80 * time.Second},
	} {
		tm := bus.Timing{AckWait: tc.ackWait}
		require.Equal(t, tc.heartbeat, tm.Heartbeat(), tc.ackWait)
		require.Equal(t, tc.lease, tm.LeaseTTL(), tc.ackWait)
		require.Less(t, tm.LeaseTTL(), tc.ackWait, "a lease must expire before its call is redelivered")
	}
}

// A lease released with a fenced delete leaves a marker the leases bucket
// keeps for ever; a fenced purge with a marker TTL leaves nothing behind.
func TestKVFencedPurgeLeavesNoMarker(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	kv, err := c.KV(ctxT(t), bus.Leases)
	require.NoError(t, err)
	rev, err := kv.Create(ctxT(t), "deleted", []byte("w1"), time.Minute)
	require.NoError(t, err)
	require.NoError(t, kv.DeleteRev(ctxT(t), "deleted", rev))
	rev, err = kv.Create(ctxT(t), "purged", []byte("w1"), time.Minute)
	require.NoError(t, err)
	require.ErrorIs(t, kv.Purge(ctxT(t), "purged", rev+100, time.Second), bus.ErrConflict, "fenced by revision")
	require.NoError(t, kv.Purge(ctxT(t), "purged", rev, time.Second))
	_, found, err := kv.Get(ctxT(t), "purged")
	require.NoError(t, err)
	require.False(t, found)
	_, err = kv.Create(ctxT(t), "purged", []byte("w2"), time.Minute)
	require.NoError(t, err, "a purged lease can be taken again at once")
	e, _, err := kv.Get(ctxT(t), "purged")
	require.NoError(t, err)
	require.NoError(t, kv.Purge(ctxT(t), "purged", e.Revision, time.Second))
	require.Eventually(t, func() bool {
		n, err := c.StreamMsgs(ctxT(t), "KV_capstan_leases")
		return err == nil && n == 1 // the delete marker of "deleted" only
	}, 20*time.Second, 50*time.Millisecond)
}

func TestStreamStates(t *testing.T) {
	t.Parallel()
	c := bustest.Conn(t, bustest.Server(t), "")
	for _, s := range []string{"capstan.result.p.b.c1", "capstan.result.p.b.c2"} {
		require.NoError(t, c.PublishFirst(ctxT(t), s, []byte(`{}`), bus.Header{"Capstan-Protocol": {"2"}}))
	}
	states, err := c.StreamStates(ctxT(t))
	require.NoError(t, err)
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = s.Name
		if s.Name == "CAPSTAN_RESULTS" {
			require.EqualValues(t, 2, s.Msgs)
			require.Equal(t, 2, s.Subjects)
			require.Positive(t, s.Bytes)
		}
	}
	require.Contains(t, names, "CAPSTAN_RESULTS")
	require.True(t, slices.IsSorted(names), "sorted by name: %v", names)
}
