package secrets_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/stretchr/testify/require"
)

// countingBackend answers from values, or with err when set, and counts calls.
type countingBackend struct {
	mu     sync.Mutex
	values map[string]string
	err    error
	calls  int
}

func (b *countingBackend) Resolve(_ context.Context, ref string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	if b.err != nil {
		return "", b.err
	}
	v, ok := b.values[ref]
	if !ok {
		return "", secrets.ErrNotFound
	}
	return v, nil
}

func (b *countingBackend) set(ref, v string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.values[ref] = v
	b.err = err
}

func (b *countingBackend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func TestCacheReusesValuesForTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := &countingBackend{values: map[string]string{"a": "v1"}}
	clk := newFakeClock()
	c := secrets.NewCache(b, 10*time.Second, clk.now)

	steps := []struct {
		name        string
		advance     time.Duration
		want        string
		hits, calls uint64
	}{
		{"first read asks the backend", 0, "v1", 0, 1},
		{"second read is a hit", 0, "v1", 1, 1},
		{"just before the ttl still a hit", 10*time.Second - time.Nanosecond, "v1", 2, 1},
		{"at the ttl the backend is asked again", time.Nanosecond, "v2", 2, 2},
		{"the new value is cached", time.Second, "v2", 3, 2},
	}
	for _, s := range steps {
		clk.advance(s.advance)
		if s.name == "at the ttl the backend is asked again" {
			b.set("a", "v2", nil)
		}
		v, err := c.Resolve(ctx, "a")
		require.NoError(t, err, s.name)
		require.Equal(t, s.want, v, s.name)
		hits, misses := c.Stats()
		require.Equal(t, s.hits, hits, s.name)
		require.Equal(t, s.calls, misses, s.name)
		require.Equal(t, int(s.calls), b.count(), s.name)
	}
}

func TestCacheDefaultTTL(t *testing.T) {
	t.Parallel()
	b := &countingBackend{values: map[string]string{"a": "v"}}
	clk := newFakeClock()
	c := secrets.NewCache(b, 0, clk.now)
	ctx := context.Background()
	_, err := c.Resolve(ctx, "a")
	require.NoError(t, err)
	clk.advance(secrets.DefaultCacheTTL - time.Second)
	_, err = c.Resolve(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 1, b.count(), "within 60s the value is reused")
	clk.advance(time.Second)
	_, err = c.Resolve(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 2, b.count(), "after 60s the backend is asked again")
}

func TestCacheNeverCachesErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := &countingBackend{values: map[string]string{}}
	c := secrets.NewCache(b, time.Minute, newFakeClock().now)

	_, err := c.Resolve(ctx, "a")
	require.ErrorIs(t, err, secrets.ErrNotFound)
	_, err = c.Resolve(ctx, "a")
	require.ErrorIs(t, err, secrets.ErrNotFound)
	require.Equal(t, 2, b.count(), "not found is not cached")

	down := fmt.Errorf("vault: %w", secrets.ErrUnavailable)
	b.set("a", "v", down)
	_, err = c.Resolve(ctx, "a")
	require.ErrorIs(t, err, secrets.ErrUnavailable)
	require.Same(t, down, err, "errors pass through unchanged")

	b.set("a", "v", nil)
	v, err := c.Resolve(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "v", v)
	require.Equal(t, 4, b.count())
	hits, misses := c.Stats()
	require.Zero(t, hits)
	require.Equal(t, uint64(4), misses)
}

func TestCacheKeysByRef(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := &countingBackend{values: map[string]string{"a": "va", "b": "vb"}}
	c := secrets.NewCache(b, time.Minute, newFakeClock().now)
	for range 3 {
		va, err := c.Resolve(ctx, "a")
		require.NoError(t, err)
		vb, err := c.Resolve(ctx, "b")
		require.NoError(t, err)
		require.Equal(t, []string{"va", "vb"}, []string{va, vb})
	}
	require.Equal(t, 2, b.count())
}

func TestCacheConcurrentUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := &countingBackend{values: map[string]string{"a": "va", "b": "vb"}}
	clk := newFakeClock()
	c := secrets.NewCache(b, time.Second, clk.now)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			for j := range 100 {
				ref := []string{"a", "b"}[(i+j)%2]
				v, err := c.Resolve(ctx, ref)
				if err != nil || v != "v"+ref {
					t.Errorf("Resolve(%s) = %q, %v", ref, v, err)
					return
				}
				if j%10 == 0 {
					clk.advance(100 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	hits, misses := c.Stats()
	require.Equal(t, uint64(32*100), hits+misses)
	require.Equal(t, int(misses), b.count())
}

// gatedBackend blocks every Resolve until release is closed, counting calls.
type gatedBackend struct {
	started chan struct{} // receives one value per call
	release chan struct{}
	mu      sync.Mutex
	calls   int
}

func (b *gatedBackend) Resolve(ctx context.Context, ref string) (string, error) {
	b.mu.Lock()
	b.calls++
	b.mu.Unlock()
	b.started <- struct{}{}
	<-b.release
	return "value-of-" + ref, nil
}

func TestCacheSingleFlight(t *testing.T) {
	t.Parallel()
	b := &gatedBackend{started: make(chan struct{}, 64), release: make(chan struct{})}
	c := secrets.NewCache(b, time.Minute, newFakeClock().now)
	const callers = 16
	var wg sync.WaitGroup
	results := make(chan string, callers)
	for range callers {
		wg.Go(func() {
			v, err := c.Resolve(context.Background(), "a")
			if err != nil {
				t.Errorf("Resolve: %v", err)
			}
			results <- v
		})
	}
	<-b.started // the one flight has begun; the others wait on it or on the cache
	close(b.release)
	wg.Wait()
	close(results)
	for v := range results {
		require.Equal(t, "value-of-a", v)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Equal(t, 1, b.calls, "concurrent misses on one ref share one backend request")
	hits, misses := c.Stats()
	require.Equal(t, uint64(1), misses)
	require.Equal(t, uint64(callers-1), hits)
}

func TestCacheCallerCancelDoesNotFailOthers(t *testing.T) {
	t.Parallel()
	b := &gatedBackend{started: make(chan struct{}, 4), release: make(chan struct{})}
	c := secrets.NewCache(b, time.Minute, newFakeClock().now)

	first, cancel := context.WithCancelCause(context.Background())
	firstErr := make(chan error, 1)
	go func() {
		_, err := c.Resolve(first, "a")
		firstErr <- err
	}()
	<-b.started
	second := make(chan string, 1)
	go func() {
		v, err := c.Resolve(context.Background(), "a")
		if err != nil {
			t.Errorf("second Resolve: %v", err)
		}
		second <- v
	}()

	gone := errors.New("caller gave up")
	cancel(gone)
	require.ErrorIs(t, <-firstErr, gone, "a cancelled caller returns at once with its cause")

	close(b.release)
	require.Equal(t, "value-of-a", <-second, "the flight goes on for the callers still waiting")
	v, err := c.Resolve(context.Background(), "a")
	require.NoError(t, err)
	require.Equal(t, "value-of-a", v)
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Equal(t, 1, b.calls, "the value the flight fetched is cached")
}
