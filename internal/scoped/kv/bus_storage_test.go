package kv_test

// Tests of the bus additions this accessor relies on (internal/bus/storage.go
// and the Storage bucket), kept here with their only user.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/stretchr/testify/require"
)

func TestStorageBucketHasPerKeyTTLs(t *testing.T) {
	t.Parallel()
	b := storage(t)
	_, err := b.Create(ctxT(t), "k", []byte("v"), time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, found, err := b.Get(ctxT(t), "k")
		return err == nil && !found
	}, 10*time.Second, 50*time.Millisecond)
}

func TestStorageBucketPerPrefix(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	alpha, err := bustest.Conn(t, url, "alpha").KV(ctxT(t), bus.Storage)
	require.NoError(t, err)
	beta, err := bustest.Conn(t, url, "beta").KV(ctxT(t), bus.Storage)
	require.NoError(t, err)
	_, err = alpha.Put(ctxT(t), "k", []byte("a"))
	require.NoError(t, err)
	_, found, err := beta.Get(ctxT(t), "k")
	require.NoError(t, err)
	require.False(t, found, "each prefix has its own storage bucket")
	// A second component finds the bucket in place and compatible.
	require.NoError(t, bustest.Conn(t, url, "alpha").EnsureTopology(ctxT(t)))
}

func TestEntriesWithPrefix(t *testing.T) {
	t.Parallel()
	b := storage(t)
	ctx := ctxT(t)
	for _, k := range []string{"s1.a", "s1.b", "s1.x.y", "s1", "s10.a", "s2.a", "s1.del", "s1.purged"} {
		_, err := b.Put(ctx, k, []byte("v:"+k))
		require.NoError(t, err)
	}
	_, err := b.Put(ctx, "s1.a", []byte("v:s1.a2"))
	require.NoError(t, err)
	require.NoError(t, b.Delete(ctx, "s1.del"))
	require.NoError(t, b.Purge(ctx, "s1.purged", 0, bus.StorageMarkerTTL))

	entries, err := b.EntriesWithPrefix(ctx, "s1")
	require.NoError(t, err)
	got := map[string]string{}
	for _, e := range entries {
		got[e.Key] = string(e.Value)
		require.NotZero(t, e.Revision)
	}
	require.Equal(t, map[string]string{"s1.a": "v:s1.a2", "s1.b": "v:s1.b", "s1.x.y": "v:s1.x.y"}, got,
		"only keys below the prefix, latest values, no deleted or purged keys")

	entries, err = b.EntriesWithPrefix(ctx, "s1.x")
	require.NoError(t, err)
	require.Len(t, entries, 1)

	entries, err = b.EntriesWithPrefix(ctx, "nothing")
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestEntriesWithPrefixRefusesPatterns(t *testing.T) {
	t.Parallel()
	b := storage(t)
	for _, p := range []string{"", ".", ".a", "a.", "a..b", "*", ">", "a.*", "a.>", "a b", "a\tb"} {
		_, err := b.EntriesWithPrefix(ctxT(t), p)
		require.ErrorContains(t, err, "invalid key prefix", "%q", p)
	}
}

func TestEntriesWithPrefixHonoursContext(t *testing.T) {
	t.Parallel()
	b := storage(t)
	for i := range 600 { // more than the watcher's buffer
		_, err := b.Put(ctxT(t), "s."+string(rune('a'+i%26))+string(rune('a'+i/26)), make([]byte, 16))
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.EntriesWithPrefix(ctx, "s")
	require.ErrorIs(t, err, context.Canceled)

	entries, err := b.EntriesWithPrefix(ctxT(t), "s")
	require.NoError(t, err)
	require.Len(t, entries, 600)
	keys := make([]string, 0, len(entries))
	for _, e := range entries {
		keys = append(keys, e.Key)
	}
	slices.Sort(keys)
	require.Len(t, slices.Compact(keys), 600, "no duplicates")
}

func TestPurgeRevision(t *testing.T) {
	t.Parallel()
	b := storage(t)
	ctx := ctxT(t)
	require.NoError(t, b.Purge(ctx, "missing", 0, bus.StorageMarkerTTL), "purging a missing key is not an error")
	r1, err := b.Put(ctx, "k", []byte("1"))
	require.NoError(t, err)
	_, err = b.Put(ctx, "k", []byte("2"))
	require.NoError(t, err)
	require.ErrorIs(t, b.Purge(ctx, "k", r1, bus.StorageMarkerTTL), bus.ErrConflict, "a stale revision is not purged")
	e, found, err := b.Get(ctx, "k")
	require.NoError(t, err)
	require.True(t, found)
	require.NoError(t, b.Purge(ctx, "k", e.Revision, bus.StorageMarkerTTL))
	_, found, err = b.Get(ctx, "k")
	require.NoError(t, err)
	require.False(t, found)
	_, err = b.Create(ctx, "k", []byte("3"), time.Second)
	require.NoError(t, err, "a purged key can be created again, with a TTL")
}

func TestUpdateTTL(t *testing.T) {
	t.Parallel()
	b := storage(t)
	ctx := ctxT(t)
	r1, err := b.Create(ctx, "u.k", []byte("1"), time.Hour)
	require.NoError(t, err)
	r2, err := b.UpdateTTL(ctx, "u.k", []byte("2"), r1, time.Second)
	require.NoError(t, err)
	require.Greater(t, r2, r1)
	_, err = b.UpdateTTL(ctx, "u.k", []byte("stale"), r1, time.Second)
	require.ErrorIs(t, err, bus.ErrConflict, "a stale revision is refused")
	_, err = b.UpdateTTL(ctx, "u.missing", []byte("x"), 7, 0)
	require.ErrorIs(t, err, bus.ErrConflict, "a key without that revision is refused")
	e, found, err := b.Get(ctx, "u.k")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "2", string(e.Value))
	require.Eventually(t, func() bool {
		_, found, err := b.Get(ctx, "u.k")
		return err == nil && !found
	}, 15*time.Second, 50*time.Millisecond, "the update's own TTL removes the key")

	for _, k := range []string{"", "a.*", "a.>", "a b", ".a", "a..b"} {
		_, err := b.UpdateTTL(ctx, k, []byte("x"), 1, 0)
		require.ErrorContains(t, err, "invalid key", "%q", k)
	}
}
