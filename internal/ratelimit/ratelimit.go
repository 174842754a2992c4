// Package ratelimit enforces fleet-wide call limits per personality and tool
// with fixed-window counters in a JetStream KV bucket. Increments use
// compare-and-set, so several workers share one exact count; a refused call
// does not count.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
)

// Store is the KV subset the limiter needs (bus.KV implements it).
type Store interface {
	Get(ctx context.Context, key string) (bus.Entry, bool, error)
	Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error)
	UpdateTTL(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error)
}

// Limiter counts calls in windows aligned on the Unix epoch.
type Limiter struct {
	store Store
	now   func() time.Time
}

// New returns a limiter over store; now defaults to time.Now.
func New(store Store, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{store: store, now: now}
}

// Decision is the outcome of Allow.
type Decision struct {
	Allowed bool
	// RetryAfter is the time until the window ends, rounded up to whole seconds.
	RetryAfter time.Duration
}

const maxAttempts = 50

// Allow counts one call of tool for personality against requests per window,
// unless the window is full.
func (l *Limiter) Allow(ctx context.Context, personality, tool string, requests int, window time.Duration) (Decision, error) {
	if requests < 1 || window <= 0 {
		return Decision{}, fmt.Errorf("rate limit %d per %s is not positive", requests, window)
	}
	now := l.now()
	start := now.Truncate(window)
	key := personality + "." + tool + "." + strconv.FormatInt(start.Unix(), 10)
	// A counter lives until a minute after its window; every increment
	// carries the rest of that time, so the server removes it then (a plain
	// update would drop the TTL and keep the counter forever).
	expires := start.Add(window + time.Minute)
	for range maxAttempts {
		e, found, err := l.store.Get(ctx, key)
		if err != nil {
			return Decision{}, fmt.Errorf("rate limit: %w", err)
		}
		if !found {
			_, err := l.store.Create(ctx, key, []byte("1"), ttlUntil(expires, now))
			if errors.Is(err, bus.ErrKeyExists) {
				continue
			}
			if err != nil {
				return Decision{}, fmt.Errorf("rate limit: %w", err)
			}
			return Decision{Allowed: true}, nil
		}
		n, err := strconv.Atoi(string(e.Value))
		if err != nil {
			return Decision{}, fmt.Errorf("rate limit: counter %s holds %q", key, e.Value)
		}
		if n >= requests {
			return Decision{RetryAfter: roundUpSeconds(start.Add(window).Sub(now))}, nil
		}
		_, err = l.store.UpdateTTL(ctx, key, []byte(strconv.Itoa(n+1)), e.Revision, ttlUntil(expires, now))
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil {
			return Decision{}, fmt.Errorf("rate limit: %w", err)
		}
		return Decision{Allowed: true}, nil
	}
	return Decision{}, fmt.Errorf("rate limit: counter %s too contended", key)
}

// ttlUntil is the TTL that makes a key written at now expire at t: whole
// seconds (the server's granularity), at least one.
func ttlUntil(t, now time.Time) time.Duration { return roundUpSeconds(t.Sub(now)) }

func roundUpSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Second
	}
	return ((d + time.Second - 1) / time.Second) * time.Second
}

// Message is the refusal text of tools.md step 7.
func Message(tool string, requests int, windowText, personality string, retryAfter time.Duration) string {
	return fmt.Sprintf("RATE_LIMITED: %s allows %d calls per %s for personality %s; retry in %s", tool, requests, windowText, personality, retryAfter)
}
