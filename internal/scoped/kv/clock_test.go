package kv

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

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

// TestExpiryIsExactWhateverTheServer uses a fake clock far ahead of the
// server's: the server still holds the entries, yet an expired one is never
// returned, from the exact expiry instant on.
func TestExpiryIsExactWhateverTheServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := bustest.Conn(t, bustest.Server(t), "")
	b, err := c.KV(ctx, bus.Storage)
	require.NoError(t, err)
	clk := &fakeClock{t: time.Now()}
	newAcc := func(def time.Duration) *Accessor {
		a := New(b, &capability.StorageGrant{Scope: tool.ScopeToolPrivate, ScopeID: "tool:clock", TTLDefault: def}, nil)
		a.now = clk.now
		return a
	}
	a := newAcc(10 * time.Second)
	forever := newAcc(0)

	require.NoError(t, a.Set(ctx, "default", []byte("d"), 0))                      // expires at +10s
	require.NoError(t, a.Set(ctx, "explicit", []byte("e"), time.Hour))             // expires at +1h
	require.NoError(t, forever.Set(ctx, "forever", []byte("f"), 0))                // never
	require.NoError(t, forever.Set(ctx, "explicit2", []byte("x"), 20*time.Second)) // +20s

	type want struct {
		advance time.Duration
		listed  []string
	}
	steps := []want{
		{0, []string{"default", "explicit", "explicit2", "forever"}},
		{10*time.Second - time.Nanosecond, []string{"default", "explicit", "explicit2", "forever"}},
		{time.Nanosecond, []string{"explicit", "explicit2", "forever"}},
		{10 * time.Second, []string{"explicit", "forever"}},
		{time.Hour, []string{"forever"}},
		{100 * 365 * 24 * time.Hour, []string{"forever"}},
	}
	all := []string{"default", "explicit", "explicit2", "forever"}
	for i, s := range steps {
		clk.advance(s.advance)
		keys, err := a.List(ctx, "")
		require.NoError(t, err, "step %d", i)
		require.Equal(t, s.listed, keys, "step %d", i)
		for _, k := range all {
			_, found, err := a.Get(ctx, k)
			require.NoError(t, err)
			require.Equal(t, slices.Contains(s.listed, k), found, "step %d key %s", i, k)
		}
	}
}

func TestServerTTL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want time.Duration
	}{
		{0, 0},
		{-time.Second, 0},
		{time.Nanosecond, 2 * time.Second},
		{300 * time.Millisecond, 2 * time.Second},
		{time.Second, 2 * time.Second},
		{time.Second + time.Nanosecond, 3 * time.Second},
		{time.Hour, time.Hour + time.Second},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, serverTTL(tc.in), "serverTTL(%s)", tc.in)
	}
}
