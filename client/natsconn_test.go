package client_test

import (
	"testing"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// TestClientUsesTheCallersConnection: a client on a connection the caller
// opened reads the catalog through it and leaves it open on Close.
func TestClientUsesTheCallersConnection(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	opt, err := nats.NkeyOptionFromSeed(bustest.Creds(url))
	require.NoError(t, err)
	nc, err := nats.Connect(url, opt)
	require.NoError(t, err)
	defer nc.Close()

	_, err = client.New(ctxT(t), client.Config{NATSConn: nc, NATSURL: url})
	require.ErrorContains(t, err, "Config.NATSConn is set: Config.NATSURL, Config.NATSCreds and Config.InboxPrefix must be empty")

	c, err := client.New(ctxT(t), client.Config{NATSConn: nc})
	require.NoError(t, err)
	tools, err := c.Tools(ctxT(t))
	require.NoError(t, err)
	require.Empty(t, tools)
	c.Close()
	require.True(t, nc.IsConnected(), "the caller's connection stays open")
}
