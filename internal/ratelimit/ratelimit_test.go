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
