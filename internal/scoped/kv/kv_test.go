package kv_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/kv"
	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const keyInvalidMsg = "KV_KEY_INVALID: key must be 1 to 1024 bytes of UTF-8"

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// storage returns the Storage bucket of a fresh embedded server.
func storage(t *testing.T) *bus.KV {
	t.Helper()
	c := bustest.Conn(t, bustest.Server(t), "")
	b, err := c.KV(ctxT(t), bus.Storage)
	require.NoError(t, err)
	return b
}

func grant(scopeID string) *capability.StorageGrant {
	return &capability.StorageGrant{Scope: tool.ScopeToolPrivate, ScopeID: scopeID}
}

func mustGet(t *testing.T, a *kv.Accessor, key string) (string, bool) {
	t.Helper()
	v, found, err := a.Get(ctxT(t), key)
	require.NoError(t, err)
	return string(v), found
}

func mustList(t *testing.T, a *kv.Accessor, prefix string) []string {
	t.Helper()
	keys, err := a.List(ctxT(t), prefix)
	require.NoError(t, err)
	return keys
}

func TestScopesFromScopeIDAreIsolated(t *testing.T) {
	t.Parallel()
	b := storage(t)
	ids := map[string]string{
		"tool t1":          capability.ScopeID(tool.ScopeToolPrivate, "t1", "s1", "p1"),
		"tool t2":          capability.ScopeID(tool.ScopeToolPrivate, "t2", "s1", "p1"),
		"session s1":       capability.ScopeID(tool.ScopeSession, "t1", "s1", "p1"),
		"session s2":       capability.ScopeID(tool.ScopeSession, "t1", "s2", "p1"),
		"personality p1":   capability.ScopeID(tool.ScopePersonality, "t1", "s1", "p1"),
		"personality p2":   capability.ScopeID(tool.ScopePersonality, "t1", "s1", "p2"),
		"personality none": capability.ScopeID(tool.ScopePersonality, "t1", "s3", ""),
	}
	for name, id := range ids {
		require.NoError(t, kv.New(b, grant(id), nil).Set(ctxT(t), "k", []byte(name), 0), name)
	}
	for name, id := range ids {
		a := kv.New(b, grant(id), nil)
		v, found := mustGet(t, a, "k")
		require.True(t, found, name)
		require.Equal(t, name, v, name)
		require.Equal(t, []string{"k"}, mustList(t, a, ""), name)
	}

	// Tools of one session share its scope, and so does a personality-scoped
	// tool in a call without personality.
	a1 := kv.New(b, grant(capability.ScopeID(tool.ScopeSession, "t1", "s9", "")), nil)
	a2 := kv.New(b, grant(capability.ScopeID(tool.ScopePersonality, "t2", "s9", "")), nil)
	require.NoError(t, a1.Set(ctxT(t), "shared", []byte("x"), 0))
	v, found := mustGet(t, a2, "shared")
	require.True(t, found)
	require.Equal(t, "x", v)
}

func TestAwkwardKeysAndScopesNeverCollide(t *testing.T) {
	t.Parallel()
	b := storage(t)
	// Scope ids and keys chosen so that naive "scope.key" subjects would
	// collide or act as wildcards: ("tool:a", "b.c") vs ("tool:a.b", "c"), etc.
	scopes := []string{"tool:a", "tool:a.b", "tool:a.>", "tool:*", "session:x y", "personality:ü", "tool:a.b.c", "session:"}
	keys := []string{"c", "b.c", ".", "..", "*", ">", "a.>", "a/b", "/", "with space", "tab\tnl\n", "ünïcödé", "日本語", "😀", "=", "-", "_", "$KV", "a..b", ".leading", "trailing.", "\x00nul"}
	ctx := ctxT(t)
	for _, s := range scopes {
		a := kv.New(b, grant(s), nil)
		for _, k := range keys {
			require.NoError(t, a.Set(ctx, k, []byte(s+"|"+k), 0), "%q %q", s, k)
		}
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for _, s := range scopes {
		a := kv.New(b, grant(s), nil)
		for _, k := range keys {
			v, found := mustGet(t, a, k)
			require.True(t, found, "%q %q", s, k)
			require.Equal(t, s+"|"+k, v, "%q %q", s, k)
		}
		require.Equal(t, sorted, mustList(t, a, ""), s)
	}
	// Deleting in one scope leaves the same key in the others.
	require.NoError(t, kv.New(b, grant("tool:a"), nil).Delete(ctx, "b.c"))
	_, found := mustGet(t, kv.New(b, grant("tool:a"), nil), "b.c")
	require.False(t, found)
	v, found := mustGet(t, kv.New(b, grant("tool:a.b"), nil), "b.c")
	require.True(t, found)
	require.Equal(t, "tool:a.b|b.c", v)
}

func TestKeyValidation(t *testing.T) {
	t.Parallel()
	b := storage(t)
	var mu sync.Mutex
	var denials []error
	a := kv.New(b, grant("tool:v"), func(err error) {
		mu.Lock()
		defer mu.Unlock()
		denials = append(denials, err)
	})
	ctx := ctxT(t)
	bad := []struct{ name, key string }{
		{"empty", ""},
		{"1025 bytes", strings.Repeat("k", 1025)},
		{"1025 bytes of multi-byte runes", strings.Repeat("€", 341) + "ab"},
		{"invalid UTF-8", "ok\xff"},
		{"truncated rune", "\xe2\x82"},
	}
	ops := map[string]func(key string) error{
		"get":    func(k string) error { _, _, err := a.Get(ctx, k); return err },
		"set":    func(k string) error { return a.Set(ctx, k, []byte("v"), 0) },
		"delete": func(k string) error { return a.Delete(ctx, k) },
	}
	for _, tc := range bad {
		for op, fn := range ops {
			err := fn(tc.key)
			require.EqualError(t, err, keyInvalidMsg, "%s %s", op, tc.name)
			require.ErrorIs(t, err, tool.ErrKVKeyInvalid)
			code, ok := tool.DenialCode(err)
			require.True(t, ok)
			require.Equal(t, "KV_KEY_INVALID", code)
		}
	}
	mu.Lock()
	require.Len(t, denials, len(bad)*len(ops), "every denial is reported")
	mu.Unlock()

	// List prefixes: empty is every key; too long or not UTF-8 is refused.
	for _, p := range []string{strings.Repeat("p", 1025), "\xff"} {
		_, err := a.List(ctx, p)
		require.EqualError(t, err, keyInvalidMsg)
	}

	good := []string{"k", strings.Repeat("k", 1024), strings.Repeat("€", 341) + "a", strings.Repeat("😀", 256)}
	for _, k := range good {
		require.LessOrEqual(t, len(k), kv.MaxKeyBytes)
		require.NoError(t, a.Set(ctx, k, []byte(k), 0), "len %d", len(k))
		v, found := mustGet(t, a, k)
		require.True(t, found)
		require.Equal(t, k, v)
	}
	require.ElementsMatch(t, good, mustList(t, a, ""))
	require.Equal(t, []string{strings.Repeat("k", 1024)}, mustList(t, a, strings.Repeat("k", 1024)))
}

func TestTTLExpiryOnGetAndList(t *testing.T) {
	t.Parallel()
	a := kv.New(storage(t), grant("tool:ttl"), nil)
	ctx := ctxT(t)
	require.NoError(t, a.Set(ctx, "short", []byte("s"), 2*time.Second))
	require.NoError(t, a.Set(ctx, "long", []byte("l"), time.Hour))
	require.NoError(t, a.Set(ctx, "forever", []byte("f"), 0))
	_, found := mustGet(t, a, "short")
	require.True(t, found, "not expired yet")
	require.Equal(t, []string{"forever", "long", "short"}, mustList(t, a, ""))

	require.Eventually(t, func() bool {
		_, found, err := a.Get(ctx, "short")
		return err == nil && !found
	}, 15*time.Second, 50*time.Millisecond)
	require.Equal(t, []string{"forever", "long"}, mustList(t, a, ""), "an expired entry is never listed")

	// The key can be written again after it expired.
	require.NoError(t, a.Set(ctx, "short", []byte("again"), 0))
	v, found := mustGet(t, a, "short")
	require.True(t, found)
	require.Equal(t, "again", v)
}

func TestTTLOnOverwriteIsHonoured(t *testing.T) {
	t.Parallel()
	a := kv.New(storage(t), grant("tool:ttl2"), nil)
	ctx := ctxT(t)
	// Created without expiry, then overwritten with a short ttl: the server
	// TTL cannot change on an overwrite, the envelope expiry still holds.
	require.NoError(t, a.Set(ctx, "k", []byte("v1"), 0))
	require.NoError(t, a.Set(ctx, "k", []byte("v2"), 300*time.Millisecond))
	require.Eventually(t, func() bool {
		keys, err := a.List(ctx, "")
		return err == nil && len(keys) == 0
	}, 15*time.Second, 50*time.Millisecond)
	_, found := mustGet(t, a, "k")
	require.False(t, found)

	// Created with a short ttl, then overwritten without: it stays.
	require.NoError(t, a.Set(ctx, "k2", []byte("v1"), time.Second))
	require.NoError(t, a.Set(ctx, "k2", []byte("v2"), time.Hour))
	require.NoError(t, a.Set(ctx, "probe", []byte("p"), 3*time.Second))
	require.Eventually(t, func() bool { // once a later key that outlives k2's first ttl is gone...
		_, found, err := a.Get(ctx, "probe")
		return err == nil && !found
	}, 15*time.Second, 50*time.Millisecond)
	v, found := mustGet(t, a, "k2") // ...the overwritten one is still there
	require.True(t, found)
	require.Equal(t, "v2", v)
}

func TestTTLDefaultAndExplicitTTL(t *testing.T) {
	t.Parallel()
	b := storage(t)
	ctx := ctxT(t)
	withDefault := kv.New(b, &capability.StorageGrant{Scope: tool.ScopeSession, ScopeID: "session:d", TTLDefault: time.Second}, nil)
	require.NoError(t, withDefault.Set(ctx, "default", []byte("d"), 0))
	require.NoError(t, withDefault.Set(ctx, "explicit", []byte("e"), time.Hour))
	require.Eventually(t, func() bool {
		keys, err := withDefault.List(ctx, "")
		return err == nil && len(keys) == 1 && keys[0] == "explicit"
	}, 15*time.Second, 50*time.Millisecond, "ttl 0 uses the default; an explicit ttl overrides it")
	_, found := mustGet(t, withDefault, "default")
	require.False(t, found)
	_, found = mustGet(t, withDefault, "explicit")
	require.True(t, found)
}

func TestNegativeTTLIsRefused(t *testing.T) {
	t.Parallel()
	a := kv.New(storage(t), grant("tool:neg"), nil)
	err := a.Set(ctxT(t), "k", []byte("v"), -time.Second)
	require.ErrorContains(t, err, "ttl must not be negative")
	_, found := mustGet(t, a, "k")
	require.False(t, found)
}

func TestListPrefixAndSort(t *testing.T) {
	t.Parallel()
	b := storage(t)
	a := kv.New(b, grant("tool:list"), nil)
	ctx := ctxT(t)
	for _, k := range []string{"b", "a", "ab", "a/x", "B", "é", "a.", "aa"} {
		require.NoError(t, a.Set(ctx, k, []byte(k), 0))
	}
	tests := []struct {
		prefix string
		want   []string
	}{
		{"", []string{"B", "a", "a.", "a/x", "aa", "ab", "b", "é"}},
		{"a", []string{"a", "a.", "a/x", "aa", "ab"}},
		{"a/", []string{"a/x"}},
		{"a.", []string{"a."}},
		{"ab", []string{"ab"}},
		{"abc", []string{}},
		{"\xc3", nil}, // not UTF-8: refused below
		{"é", []string{"é"}},
		{"zzz", []string{}},
	}
	for _, tc := range tests {
		got, err := a.List(ctx, tc.prefix)
		if tc.want == nil {
			require.EqualError(t, err, keyInvalidMsg)
			continue
		}
		require.NoError(t, err, tc.prefix)
		require.NotNil(t, got, "an empty list is [] not nil")
		require.Equal(t, tc.want, got, "prefix %q", tc.prefix)
	}
	empty := kv.New(b, grant("tool:empty"), nil)
	got, err := empty.List(ctx, "")
	require.NoError(t, err)
	require.Equal(t, []string{}, got)
}

func TestDeleteIsIdempotent(t *testing.T) {
	t.Parallel()
	a := kv.New(storage(t), grant("tool:del"), nil)
	ctx := ctxT(t)
	require.NoError(t, a.Delete(ctx, "never-set"))
	require.NoError(t, a.Set(ctx, "k", []byte("v"), 0))
	require.NoError(t, a.Delete(ctx, "k"))
	_, found := mustGet(t, a, "k")
	require.False(t, found)
	require.NoError(t, a.Delete(ctx, "k"))
	require.Equal(t, []string{}, mustList(t, a, ""))
	require.NoError(t, a.Set(ctx, "k", []byte("v2"), 0), "a deleted key can be set again")
	v, found := mustGet(t, a, "k")
	require.True(t, found)
	require.Equal(t, "v2", v)
}

func TestValuesRoundTrip(t *testing.T) {
	t.Parallel()
	a := kv.New(storage(t), grant("tool:vals"), nil)
	ctx := ctxT(t)
	tests := []struct {
		name  string
		value []byte
	}{
		{"empty", []byte{}},
		{"nil", nil},
		{"binary", []byte{0, 1, 0xff, 0xfe, '"', '\\'}},
		{"json-looking", []byte(`{"v":"x","exp":1}`)},
		{"large", []byte(strings.Repeat("x", 256<<10))},
	}
	for _, tc := range tests {
		require.NoError(t, a.Set(ctx, tc.name, tc.value, 0))
		v, found, err := a.Get(ctx, tc.name)
		require.NoError(t, err)
		require.True(t, found)
		require.NotNil(t, v, "a found value is never nil")
		require.Equal(t, append([]byte{}, tc.value...), v, tc.name)
	}
	require.NoError(t, a.Set(ctx, "binary", []byte("overwritten"), 0))
	v, _ := mustGet(t, a, "binary")
	require.Equal(t, "overwritten", v)
}

func TestWithoutGrantOrBucket(t *testing.T) {
	t.Parallel()
	b := storage(t)
	ctx := ctxT(t)
	var denials int
	for name, a := range map[string]*kv.Accessor{
		"nil grant":      kv.New(b, nil, func(error) { denials++ }),
		"empty scope id": kv.New(b, &capability.StorageGrant{Scope: tool.ScopeSession}, func(error) { denials++ }),
	} {
		_, _, err := a.Get(ctx, "k")
		require.ErrorIs(t, err, kv.ErrNotDeclared, name)
		require.EqualError(t, err, "storage is not declared for this tool")
		require.ErrorIs(t, a.Set(ctx, "k", []byte("v"), 0), kv.ErrNotDeclared, name)
		require.ErrorIs(t, a.Delete(ctx, "k"), kv.ErrNotDeclared, name)
		_, err = a.List(ctx, "")
		require.ErrorIs(t, err, kv.ErrNotDeclared, name)
		_, _, err = a.Get(ctx, "") // the grant is checked before the key
		require.ErrorIs(t, err, kv.ErrNotDeclared, name)
	}
	require.Equal(t, 10, denials)

	a := kv.New(nil, grant("tool:x"), nil)
	_, _, err := a.Get(ctx, "k")
	require.ErrorIs(t, err, kv.ErrNoBackend)
	_, err = a.List(ctx, "")
	require.ErrorIs(t, err, kv.ErrNoBackend)
}

func TestConcurrentSetsOnOneKey(t *testing.T) {
	t.Parallel()
	a := kv.New(storage(t), grant("tool:race"), nil)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 10 {
				if err := a.Set(ctx, "k", fmt.Appendf(nil, "%d-%d", i, j), 0); err != nil {
					t.Errorf("set: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	v, found := mustGet(t, a, "k")
	require.True(t, found)
	require.Regexp(t, `^\d-9$`, v, "the last write of some writer wins")
}
