package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/ratelimit"
	"github.com/stretchr/testify/require"
)

func store(t *testing.T, url string) *bus.KV {
	c := bustest.Conn(t, url, "")
	kv, err := c.KV(context.Background(), bus.RateLimits)
	require.NoError(t, err)
	return kv
}

func TestLimiterSharedByTwoConnections(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	// Two "workers" with their own connections share one fleet-wide count.
	now := func() time.Time { return time.Date(2026, 1, 1, 10, 47, 30, 0, time.UTC) }
	a := ratelimit.New(store(t, url), now)
	b := ratelimit.New(store(t, url), now)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Go(func() {
			d, err := l.Allow(context.Background(), "researcher", "fetch_url", 10, time.Hour)
			require.NoError(t, err)
			if d.Allowed {
				allowed.Add(1)
			} else {
				require.Equal(t, 12*time.Minute+30*time.Second, d.RetryAfter)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 10, allowed.Load(), "exactly the limit is allowed across both workers")

	// Another tool or personality has its own counter.
	d, err := a.Allow(context.Background(), "researcher", "echo", 10, time.Hour)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = a.Allow(context.Background(), "other", "fetch_url", 10, time.Hour)
	require.NoError(t, err)
	require.True(t, d.Allowed)
}

func TestLimiterNewWindowAndRounding(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	var mu sync.Mutex
	at := time.Date(2026, 1, 1, 10, 0, 59, 200_000_000, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	l := ratelimit.New(store(t, url), now)
	ctx := context.Background()
	d, err := l.Allow(ctx, "p", "t", 1, time.Minute)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = l.Allow(ctx, "p", "t", 1, time.Minute)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, time.Second, d.RetryAfter, "0.8s rounds up to 1s")
	mu.Lock()
	at = at.Add(time.Second)
	mu.Unlock()
	d, err = l.Allow(ctx, "p", "t", 1, time.Minute)
	require.NoError(t, err)
	require.True(t, d.Allowed, "a new window starts empty")
}

func TestMessage(t *testing.T) {
	t.Parallel()
	require.Equal(t, "RATE_LIMITED: fetch_url allows 100 calls per 1h for personality researcher; retry in 12m30s",
		ratelimit.Message("fetch_url", 100, "1h", "researcher", 12*time.Minute+30*time.Second))
}

func TestLimiterRejectsNonPositive(t *testing.T) {
	t.Parallel()
	l := ratelimit.New(nil, nil)
	_, err := l.Allow(context.Background(), "p", "t", 0, time.Hour)
	require.Error(t, err)
}

// ttlRecorder passes every call to a real bucket and records the TTLs given.
type ttlRecorder struct {
	*bus.KV
	mu   sync.Mutex
	ttls []time.Duration
}

func (r *ttlRecorder) Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	r.mu.Lock()
	r.ttls = append(r.ttls, ttl)
	r.mu.Unlock()
	return r.KV.Create(ctx, key, value, ttl)
}

func (r *ttlRecorder) UpdateTTL(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	r.mu.Lock()
	r.ttls = append(r.ttls, ttl)
	r.mu.Unlock()
	return r.KV.UpdateTTL(ctx, key, value, rev, ttl)
}

func TestCountersKeepExpiringAfterIncrements(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	rec := &ttlRecorder{KV: store(t, url)}
	at := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
	l := ratelimit.New(rec, now)
	for _, step := range []time.Duration{0, 10 * time.Minute, 49*time.Minute + 500*time.Millisecond} {
		mu.Lock()
		at = at.Add(step)
		mu.Unlock()
		d, err := l.Allow(context.Background(), "p", "t", 5, time.Hour)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	// Every write, the increments included, expires a minute after the
	// window (10:00–11:00) ends: at 11:01.
	require.Equal(t, []time.Duration{61 * time.Minute, 51 * time.Minute, 2 * time.Minute}, rec.ttls)
}
