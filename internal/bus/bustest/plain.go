package bustest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// PlainServer starts a nats-server with JetStream and no authorization, as
// an operator might run it (nats-server -js), on a random loopback port with
// its store in a test temp dir, stopped when the test ends. It returns the
// URL. Unlike Server it is not Capstan's embedded server: it takes no
// credentials, and refuses an NKey seed (bus.ErrNKeyNotSupported).
func PlainServer(t testing.TB) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatalf("plain server: %v", err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(30 * time.Second) {
		t.Fatal("plain server not ready in 30s")
	}
	return ns.ClientURL()
}
