package kv

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// TestServerTTLSurvivesUpdate looks at the bucket itself: an entry written
// over an existing revision keeps a server-side TTL of its own, so the
// server removes it (a plain update would leave it forever, read as expired
// but never reclaimed); an entry rewritten without expiry stays.
func TestServerTTLSurvivesUpdate(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := bustest.Conn(t, bustest.Server(t), "").KV(ctx, bus.Storage)
	require.NoError(t, err)
	a := New(b, &capability.StorageGrant{Scope: tool.ScopeSession, ScopeID: "session:ttl"}, nil)
	raw := func(key string) bool {
		_, found, err := b.Get(ctx, encodeKey(a.scope, key))
		require.NoError(t, err)
		return found
	}
	gone := func(key string) func() bool { return func() bool { return !raw(key) } }

	tests := []struct {
		name   string
		writes []time.Duration // the ttl of each Set, in order
		expire bool            // the server removes the key in the end
	}{
		{name: "ttl, then ttl again", writes: []time.Duration{time.Second, time.Second}, expire: true},
		{name: "no ttl, then ttl", writes: []time.Duration{0, time.Second}, expire: true},
		{name: "ttl, then many updates with ttl", writes: []time.Duration{time.Hour, time.Hour, time.Hour, time.Second}, expire: true},
		{name: "ttl, then no ttl", writes: []time.Duration{time.Second, 0}, expire: false},
	}
	for _, tt := range tests {
		for i, ttl := range tt.writes {
			require.NoError(t, a.Set(ctx, tt.name, []byte{byte(i)}, ttl), tt.name)
		}
		require.True(t, raw(tt.name), tt.name)
	}
	for _, tt := range tests {
		if tt.expire {
			require.Eventually(t, gone(tt.name), 30*time.Second, 50*time.Millisecond, "%s: the server removes the key", tt.name)
		}
	}
	// Every key written with a ttl is gone by now; the one last written
	// without is still there, a second after its first ttl ran out.
	for _, tt := range tests {
		if !tt.expire {
			require.True(t, raw(tt.name), "%s: the key stays", tt.name)
			v, found, err := a.Get(ctx, tt.name)
			require.NoError(t, err)
			require.True(t, found)
			require.Equal(t, []byte{byte(len(tt.writes) - 1)}, v)
		}
	}
}
