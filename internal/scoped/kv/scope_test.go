package kv_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/kv"
	"github.com/capstanhq/capstan/tool"
)

// TestScopeCollisions writes pairs of (scope, key) that a naive
// "<scope>.<key>" subject would merge, or turn into a wildcard, and checks
// that each pair stays two separate entries.
func TestScopeCollisions(t *testing.T) {
	t.Parallel()
	session := func(id string) string { return capability.ScopeID(tool.ScopeSession, "t", id, "p") }
	toolScope := func(name string) string { return capability.ScopeID(tool.ScopeToolPrivate, name, "s", "p") }
	personality := func(id string) string { return capability.ScopeID(tool.ScopePersonality, "t", "s", id) }
	type entry struct{ scope, key string }
	tests := []struct {
		name string
		a, b entry
	}{
		{name: "dot moves from session id to key", a: entry{session("a.b"), "c"}, b: entry{session("a"), "b.c"}},
		{name: "dot moves from tool name to key", a: entry{toolScope("a.b"), "c"}, b: entry{toolScope("a"), "b.c"}},
		{name: "wildcard key beside a plain one", a: entry{session("a"), "*"}, b: entry{session("a"), "x"}},
		{name: "full wildcard key beside a nested one", a: entry{session("a"), ">"}, b: entry{session("a"), "x.y"}},
		{name: "wildcard session id", a: entry{session("*"), "k"}, b: entry{session("x"), "k"}},
		{name: "full wildcard session id", a: entry{session(">"), "k"}, b: entry{session("a.b"), "k"}},
		{name: "space moves from id to key", a: entry{session("a b"), "c"}, b: entry{session("a"), "b c"}},
		{name: "same id, tool and session scopes", a: entry{toolScope("x"), "k"}, b: entry{session("x"), "k"}},
		{name: "same id, personality and session scopes", a: entry{personality("x"), "k"}, b: entry{session("x"), "k"}},
		{name: "key that spells another scope", a: entry{session("a"), "session:b"}, b: entry{session("a:session:b"), "k"}},
		{name: "colon moves from id to key", a: entry{session("a:b"), "c"}, b: entry{session("a"), "b:c"}},
		{name: "composed and decomposed accents", a: entry{session("a"), "\u00e9"}, b: entry{session("a"), "e\u0301"}},
		{name: "dot and dot-dot keys", a: entry{session("a"), "."}, b: entry{session("a"), ".."}},
		{name: "base64 look-alike key", a: entry{session("a"), "YQ"}, b: entry{session("a"), "a"}},
		{name: "longest key and its prefix", a: entry{session("a"), strings.Repeat("k", 1024)}, b: entry{session("a"), strings.Repeat("k", 1023)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := storage(t)
			ctx := ctxT(t)
			aa, ab := kv.New(b, grant(tt.a.scope), nil), kv.New(b, grant(tt.b.scope), nil)
			require.NoError(t, aa.Set(ctx, tt.a.key, []byte("A"), 0))
			_, found := mustGet(t, ab, tt.b.key)
			require.False(t, found, "B sees A's entry")
			require.NoError(t, ab.Set(ctx, tt.b.key, []byte("B"), 0))
			v, found := mustGet(t, aa, tt.a.key)
			require.True(t, found)
			require.Equal(t, "A", v, "B's write reached A")
			v, found = mustGet(t, ab, tt.b.key)
			require.True(t, found)
			require.Equal(t, "B", v)
			if tt.a.scope == tt.b.scope {
				want := []string{tt.a.key, tt.b.key}
				slices.Sort(want)
				require.Equal(t, want, mustList(t, aa, ""))
			} else {
				require.Equal(t, []string{tt.a.key}, mustList(t, aa, ""))
				require.Equal(t, []string{tt.b.key}, mustList(t, ab, ""))
			}
			require.NoError(t, ab.Delete(ctx, tt.b.key))
			v, found = mustGet(t, aa, tt.a.key)
			require.True(t, found, "deleting B removed A")
			require.Equal(t, "A", v)
		})
	}
}
