package bus_test

import (
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestPersonalityConsumers: each personality's consumer carries its cap as
// MaxAckPending (changed when the cap changes, the default without one),
// refuses a worker whose max deliver differs, and cannot live beside the
// pool's single consumer of the versions before scheduling, which
// RetirePoolConsumer removes.
func TestPersonalityConsumers(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	c := bustest.Conn(t, url, "")
	nc, err := nats.Connect(url, nkey(t, url))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	maxAckPending := func(name string) int {
		cons, err := js.Consumer(ctxT(t), "CAPSTAN_CALLS", name)
		require.NoError(t, err)
		return cons.CachedInfo().Config.MaxAckPending
	}

	_, err = c.PoolConsumer(ctxT(t), "default", 5, bus.DefaultAckWait)
	require.NoError(t, err)
	_, err = c.PersonalityConsumer(ctxT(t), "default", "a", 5, bus.DefaultAckWait, 2)
	require.Error(t, err, "a work queue allows no overlapping consumers")
	retired, err := c.RetirePoolConsumer(ctxT(t), "default")
	require.NoError(t, err)
	require.True(t, retired)
	retired, err = c.RetirePoolConsumer(ctxT(t), "default")
	require.NoError(t, err)
	require.False(t, retired, "nothing left to retire")

	p, err := c.PersonalityConsumer(ctxT(t), "default", "a", 5, bus.DefaultAckWait, 2)
	require.NoError(t, err)
	require.Equal(t, "default~a", p.Name())
	require.Equal(t, 2, maxAckPending("default~a"))
	_, err = c.PersonalityConsumer(ctxT(t), "default", "a", 5, bus.DefaultAckWait, 7)
	require.NoError(t, err)
	require.Equal(t, 7, maxAckPending("default~a"), "a changed cap updates the consumer")
	_, err = c.PersonalityConsumer(ctxT(t), "default", "a", 5, bus.DefaultAckWait, 0)
	require.NoError(t, err)
	require.Equal(t, bus.MaxAckPending, maxAckPending("default~a"), "no cap")

	_, err = c.PersonalityConsumer(ctxT(t), "default", "a", 3, bus.DefaultAckWait, 0)
	require.ErrorContains(t, err, "consumer CAPSTAN_CALLS/default~a exists with an incompatible configuration: max deliver is 5, want 3 (CAPSTAN_MAX_DELIVER must be the same on every worker of a pool)")
	_, err = c.PersonalityConsumer(ctxT(t), "default", "a.b", 5, bus.DefaultAckWait, 0)
	require.Error(t, err)
	_, err = c.PersonalityConsumer(ctxT(t), "default", "b", 5, time.Second, 0)
	require.ErrorContains(t, err, "ack wait must be at least")
}

// TestPersonalityConsumerStateInMemory: a personality's consumer keeps its
// state in the server's memory (the work-queue stream is the durable
// record); a fetch from a consumer the server no longer has is
// ErrConsumerGone, and opening the consumer again delivers the calls the
// stream still holds.
func TestPersonalityConsumerStateInMemory(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	c := bustest.Conn(t, url, "")
	nc, err := nats.Connect(url, nkey(t, url))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	p, err := c.PersonalityConsumer(ctxT(t), "default", "m", 5, bus.DefaultAckWait, 0)
	require.NoError(t, err)
	cons, err := js.Consumer(ctxT(t), "CAPSTAN_CALLS", "default~m")
	require.NoError(t, err)
	require.True(t, cons.CachedInfo().Config.MemoryStorage)
	require.Equal(t, bus.LaneInactiveThreshold, cons.CachedInfo().Config.InactiveThreshold, "the server deletes it when idle")

	_, err = c.Publish(ctxT(t), "capstan.call.default.m.echo", []byte(`{}`), nil, "gone-1")
	require.NoError(t, err)
	require.NoError(t, js.DeleteConsumer(ctxT(t), "CAPSTAN_CALLS", "default~m"))
	_, _, err = p.FetchNoWait(ctxT(t), 1, func(*bus.Msg) {})
	require.ErrorIs(t, err, bus.ErrConsumerGone)
	_, err = p.Fetch(ctxT(t), 1, time.Second, func(*bus.Msg) {})
	require.ErrorIs(t, err, bus.ErrConsumerGone)

	p, err = c.PersonalityConsumer(ctxT(t), "default", "m", 5, bus.DefaultAckWait, 0)
	require.NoError(t, err)
	got, err := p.Fetch(ctxT(t), 1, 10*time.Second, func(m *bus.Msg) { require.NoError(t, m.Ack(ctxT(t))) })
	require.NoError(t, err)
	require.Equal(t, 1, got, "the call the stream held is delivered by the consumer opened again")
}

// TestCappedConsumerPullsNoMoreThanItsRoom: a pull from a personality's
// consumer with a cap asks for no more calls than the cap leaves across
// the pool, and says it stopped at the cap (not that nothing waits).
func TestCappedConsumerPullsNoMoreThanItsRoom(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	c := bustest.Conn(t, url, "")
	p, err := c.PersonalityConsumer(ctxT(t), "default", "capped", 5, bus.DefaultAckWait, 2)
	require.NoError(t, err)
	// Another worker of the pool: the same durable consumer, bound again.
	other, err := c.PersonalityConsumer(ctxT(t), "default", "capped", 5, bus.DefaultAckWait, 2)
	require.NoError(t, err)
	publishCalls(t, c, "default", "capped", "echo", 5)

	var first []*bus.Msg
	got, capped, err := p.FetchNoWait(ctxT(t), 1, func(m *bus.Msg) { first = append(first, m) })
	require.NoError(t, err)
	require.Equal(t, 1, got)
	require.False(t, capped, "one of two in flight")

	got, capped, err = other.FetchNoWait(ctxT(t), 5, func(m *bus.Msg) { first = append(first, m) })
	require.NoError(t, err)
	require.Equal(t, 1, got, "the cap leaves room for one more across the pool")
	require.True(t, capped, "stopped at the cap, with calls still waiting")

	got, capped, err = p.FetchNoWait(ctxT(t), 3, func(*bus.Msg) {})
	require.NoError(t, err)
	require.Zero(t, got)
	require.True(t, capped, "at the cap")

	require.NoError(t, first[0].Ack(ctxT(t)))
	got, capped, err = p.FetchNoWait(ctxT(t), 3, func(m *bus.Msg) { require.NoError(t, m.Ack(ctxT(t))) })
	require.NoError(t, err)
	require.Equal(t, 1, got, "an ended call frees one place")
	require.True(t, capped)
}
