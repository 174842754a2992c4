package secrets

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// DefaultCacheTTL is the default of CAPSTAN_SECRET_CACHE_TTL.
const DefaultCacheTTL = 60 * time.Second

// Cache is a Backend that reuses values resolved by another Backend for a
// while. Errors are never cached. It is safe for concurrent use.
type Cache struct {
	next Backend
	ttl  time.Duration
	now  func() time.Time

	mu      sync.Mutex
	entries map[string]cacheEntry
	group   singleflight.Group

	hits, misses atomic.Uint64
}

var _ Backend = (*Cache)(nil)

type cacheEntry struct {
	value   string
	expires time.Time
}

// NewCache returns a Cache in front of b that reuses a resolved value for ttl
// (ttl <= 0 means DefaultCacheTTL), reading the time from now (nil means
// time.Now).
func NewCache(b Backend, ttl time.Duration, now func() time.Time) *Cache {
	if ttl <= 0 {
		ttl = DefaultCacheTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Cache{next: b, ttl: ttl, now: now, entries: make(map[string]cacheEntry)}
}

// Resolve returns the cached value of ref while it is younger than the TTL,
// otherwise asks the wrapped backend and caches a value it returns. Errors are
// returned as they are and not cached. Concurrent misses on one ref share one
// request to the wrapped backend (single-flight); each caller still returns
// as soon as its own ctx is done. The shared request runs under the first
// caller's values but not its cancellation, so that one caller giving up
// does not fail the others; the backend bounds its own requests.
func (c *Cache) Resolve(ctx context.Context, ref string) (string, error) {
	if ctx.Err() != nil {
		return "", context.Cause(ctx)
	}
	if v, ok := c.lookup(ref); ok {
		c.hits.Add(1)
		return v, nil
	}
	// asked is set only in the caller whose closure runs (the flight's
	// owner), and read after the flight's result arrives.
	asked := false
	ch := c.group.DoChan(ref, func() (any, error) {
		// Another flight may have filled the entry between lookup and DoChan.
		if v, ok := c.lookup(ref); ok {
			return v, nil
		}
		asked = true
		v, err := c.next.Resolve(context.WithoutCancel(ctx), ref)
		if err != nil {
			return "", err
		}
		c.mu.Lock()
		c.entries[ref] = cacheEntry{value: v, expires: c.now().Add(c.ttl)}
		c.mu.Unlock()
		return v, nil
	})
	select {
	case <-ctx.Done():
		return "", context.Cause(ctx)
	case r := <-ch:
		if asked {
			c.misses.Add(1)
		} else {
			c.hits.Add(1)
		}
		if r.Err != nil {
			return "", r.Err
		}
		return r.Val.(string), nil
	}
}

// lookup returns the live cached value of ref, dropping an expired one.
func (c *Cache) lookup(ref string) (string, bool) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[ref]
	if ok && now.Before(e.expires) {
		return e.value, true
	}
	if ok {
		delete(c.entries, ref)
	}
	return "", false
}

// Stats returns how many Resolve calls were answered from the cache or from
// another caller's request in flight (hits) and how many asked the wrapped
// backend (misses), since the Cache was made. A caller whose ctx ended
// before the answer counts in neither.
func (c *Cache) Stats() (hits, misses uint64) {
	return c.hits.Load(), c.misses.Load()
}

// Health reports the wrapped backend's health when it can tell (the vault
// backend); otherwise nil.
func (c *Cache) Health(ctx context.Context) error {
	if h, ok := c.next.(interface{ Health(context.Context) error }); ok {
		return h.Health(ctx)
	}
	return nil
}
