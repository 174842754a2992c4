package builtin_test

import (
	"testing"

	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/stretchr/testify/require"
)

func TestAllValidAndUnique(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, tl := range builtin.All() {
		require.NoError(t, tl.Validate())
		require.False(t, seen[tl.Name], "tool %s listed twice", tl.Name)
		seen[tl.Name] = true
	}
	require.Len(t, builtin.Names(), len(seen))
}

func TestByName(t *testing.T) {
	t.Parallel()
	echo, ok := builtin.ByName("echo")
	require.True(t, ok)
	require.Equal(t, "echo", echo.Name)
	_, ok = builtin.ByName("nope")
	require.False(t, ok)
}

func TestSelect(t *testing.T) {
	t.Parallel()
	got, err := builtin.Select("echo", "read_file")
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "echo", got[0].Name)
	require.Equal(t, "read_file", got[1].Name)

	none, err := builtin.Select()
	require.NoError(t, err)
	require.Empty(t, none)

	_, err = builtin.Select("echo", "nope")
	require.ErrorContains(t, err, `no built-in tool is named "nope" (the built-in tools are read_file,`)
	_, err = builtin.Select("echo", "echo")
	require.ErrorContains(t, err, `tool "echo" is named twice`)
}
