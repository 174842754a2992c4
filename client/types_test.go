package client_test

import (
	"testing"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/wire"
	"github.com/stretchr/testify/require"
)

// TestWireTypesAreShared checks that a dispatcher compares what it reads
// with the constants tool authors use: the types are one and the same.
func TestWireTypesAreShared(t *testing.T) {
	t.Parallel()
	r := client.Result{Code: wire.CodeInputInvalid}
	require.True(t, r.Code == tool.CodeInputInvalid)
	var a client.Audience = tool.AudienceUser
	require.Equal(t, wire.AudienceUser, a)
	var code tool.Code = r.Code
	require.Equal(t, client.Code("input_invalid"), code)
	// c.Progress(ctx, tool.AudienceUser, ...) compiles:
	var _ func(*client.Client, tool.Audience) = func(c *client.Client, a tool.Audience) { _, _ = c.Progress(t.Context(), a, "b", false, nil) }
}
