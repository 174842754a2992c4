// Package bustest starts real embedded nats-servers for tests.
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
)

// Server starts an embedded JetStream server on a random loopback port with
// its store in a test temp dir, stopped when the test ends. It returns the URL.
func Server(t testing.TB) string {
	t.Helper()
	s, err := bus.StartServer(bus.ServerConfig{DataDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatalf("start embedded server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// Conn connects to url with prefix and ensures the topology; closed at test end.
func Conn(t testing.TB, url, prefix string) *bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, bus.Config{URL: url, Prefix: prefix, Name: t.Name()})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
