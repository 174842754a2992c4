package secrets

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
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
// returned as they are and not cached. Concurrent misses on one ref may each
// ask the backend.
func (c *Cache) Resolve(ctx context.Context, ref string) (string, error) {
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[ref]
	if ok && now.Before(e.expires) {
		c.mu.Unlock()
		c.hits.Add(1)
		return e.value, nil
	}
	if ok {
		delete(c.entries, ref)
	}
	c.mu.Unlock()

	c.misses.Add(1)
	v, err := c.next.Resolve(ctx, ref)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	c.entries[ref] = cacheEntry{value: v, expires: c.now().Add(c.ttl)}
	c.mu.Unlock()
	return v, nil
}

// Stats returns how many Resolve calls were answered from the cache (hits)
// and how many asked the wrapped backend (misses), since the Cache was made.
func (c *Cache) Stats() (hits, misses uint64) {
	return c.hits.Load(), c.misses.Load()
}
