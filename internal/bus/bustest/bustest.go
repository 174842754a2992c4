// Package bustest starts real embedded nats-servers for tests.
package bustest

import (
	"context"
	"strconv"
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

// Restartable is one embedded JetStream server that a test can stop and
// start again on the same port and store.
type Restartable struct {
	t    testing.TB
	dir  string
	port int
	s    *bus.Server // nil while stopped
}

// NewRestartable starts a Restartable server on a free loopback port; it is
// shut down when the test ends.
func NewRestartable(t testing.TB) *Restartable {
	t.Helper()
	r := &Restartable{t: t, dir: t.TempDir(), port: freePorts(t, 1)[0]}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// URL returns the server's client URL.
func (r *Restartable) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(r.port) }

// Start starts the server (no-op when running).
func (r *Restartable) Start() {
	r.t.Helper()
	if r.s != nil {
		return
	}
	s, err := bus.StartServer(bus.ServerConfig{DataDir: r.dir, Port: r.port})
	if err != nil {
		r.t.Fatalf("start embedded server: %v", err)
	}
	r.s = s
}

// Stop shuts the server down (no-op when stopped).
func (r *Restartable) Stop() {
	if r.s != nil {
		r.s.Shutdown()
		r.s = nil
	}
}
