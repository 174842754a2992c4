package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// restrictedServer starts a JetStream server with one user, "u" (password
// "p"), who may publish anything but the subjects of deny, and returns its
// URL with that user.
func restrictedServer(t *testing.T, deny ...string) string {
	t.Helper()
	opts := &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		Users: []*server.User{{Username: "u", Password: "p", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{">"}, Deny: deny},
			Subscribe: &server.SubjectPermission{Allow: []string{">"}},
		}}},
	}
	ns, err := server.NewServer(opts)
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return "nats://u:p@" + ns.Addr().String()
}

func TestPermissionDeniedIsReportedAtOnce(t *testing.T) {
	t.Parallel()
	url := restrictedServer(t, "$KV.capstan_personalities.>", "$JS.API.STREAM.PURGE.>", "$JS.API.CONSUMER.CREATE.CAPSTAN_DLQ.>")
	// A long deadline: the refusals must not wait for it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := bus.Connect(ctx, bus.Config{URL: url})
	require.NoError(t, err, "creating the topology needs none of the denied subjects")
	defer c.Close()
	start := time.Now()

	personalities, err := c.KV(ctx, bus.Personalities)
	require.NoError(t, err)
	_, err = personalities.Put(ctx, "x", []byte("id: x\n"))
	require.ErrorIs(t, err, bus.ErrPermissionDenied)
	var pe *bus.PermissionError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "$KV.capstan_personalities.x", pe.Subject)
	require.Equal(t, `Permissions Violation for Publish to "$KV.capstan_personalities.x"`, pe.Message)
	require.EqualError(t, err, `bus: put capstan_personalities/x: the NATS server refused this user's publish to "$KV.capstan_personalities.x": Permissions Violation for Publish to "$KV.capstan_personalities.x"`)
	require.ErrorIs(t, personalities.Delete(ctx, "x"), bus.ErrPermissionDenied)
	require.ErrorIs(t, personalities.Purge(ctx, "x", 0, 0), bus.ErrPermissionDenied)
	_, found, err := personalities.Get(ctx, "x")
	require.NoError(t, err, "reading is allowed")
	require.False(t, found)

	err = c.PurgeSubject(ctx, "CAPSTAN_RESULTS", "capstan.result.b.c")
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "$JS.API.STREAM.PURGE.CAPSTAN_RESULTS", pe.Subject)

	_, err = c.Messages(ctx, "CAPSTAN_DLQ", "capstan.dlq.>")
	require.ErrorIs(t, err, bus.ErrPermissionDenied)
	require.ErrorAs(t, err, &pe)
	require.Contains(t, pe.Subject, "$JS.API.CONSUMER.CREATE.CAPSTAN_DLQ.")

	require.Less(t, time.Since(start), 20*time.Second, "each refusal ends its operation when the server reports it")

	// Allowed operations of the same connection are not affected.
	tools, err := c.KV(ctx, bus.Tools)
	require.NoError(t, err)
	_, err = tools.Put(ctx, "echo", []byte("{}"))
	require.NoError(t, err)
	_, err = c.Publish(ctx, "capstan.result.b.c", []byte("{}"), nil, "")
	require.NoError(t, err)
}

func TestPermissionDeniedOfAnotherSubjectDoesNotEndAnOperation(t *testing.T) {
	t.Parallel()
	url := restrictedServer(t, "$KV.capstan_personalities.>")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := bus.Connect(ctx, bus.Config{URL: url})
	require.NoError(t, err)
	defer c.Close()
	personalities, err := c.KV(ctx, bus.Personalities)
	require.NoError(t, err)
	tools, err := c.KV(ctx, bus.Tools)
	require.NoError(t, err)
	done := make(chan error, 20)
	for i := range 10 {
		go func() {
			_, err := personalities.Put(ctx, "x", []byte("x"))
			done <- err
		}()
		go func() {
			_, err := tools.Put(ctx, "t"+string(rune('a'+i)), []byte("x"))
			done <- err
		}()
	}
	denied := 0
	for range 20 {
		err := <-done
		if errors.Is(err, bus.ErrPermissionDenied) {
			denied++
			continue
		}
		require.NoError(t, err)
	}
	require.Equal(t, 10, denied)
}
