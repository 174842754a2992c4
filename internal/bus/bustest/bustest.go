// Package bustest starts real embedded nats-servers for tests. They require
// authentication exactly as the worker's embedded server does: a client
// connects with the credentials file Creds(url) returns.
package bustest

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/embedded"
)

// creds maps the URL of a running server of this package to its
// credentials file.
var creds sync.Map

// register records the credentials file of the server at url until the test
// ends.
func register(t testing.TB, url, file string) {
	creds.Store(url, file)
	t.Cleanup(func() { creds.CompareAndDelete(url, file) })
}

// Creds returns the credentials file of the server that Server or
// NewRestartable started at url, for Config.Creds, worker.Config.NATSCreds,
// client.Config.NATSCreds or CAPSTAN_NATS_CREDS; "" for any other url (a
// Cluster requires no credentials).
func Creds(url string) string {
	f, _ := creds.Load(url)
	s, _ := f.(string)
	return s
}

// Option changes the configuration of a server Server starts.
type Option func(*embedded.Config)

// StockMaxPayload is nats-server's default max payload (1 MiB), the limit
// of a stock "nats-server -js" and of most hosted NATS services.
const StockMaxPayload = 1 << 20

// MaxPayload sets the server's max payload in bytes (the embedded server's
// default is embedded.DefaultMaxPayload); MaxPayload(StockMaxPayload)
// gives a server with the stock limit.
func MaxPayload(n int32) Option {
	return func(c *embedded.Config) { c.MaxPayload = n }
}

// Server starts an embedded JetStream server on a random loopback port with
// its store in a test temp dir, stopped when the test ends. It returns the URL;
// clients authenticate with Creds(url).
func Server(t testing.TB, opts ...Option) string {
	t.Helper()
	cfg := embedded.Config{DataDir: t.TempDir(), Port: -1}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("start embedded server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	register(t, s.ClientURL(), s.CredsFile())
	return s.ClientURL()
}

// Conn connects to url with prefix and ensures the topology; closed at test
// end. It authenticates with Creds(url).
func Conn(t testing.TB, url, prefix string) *bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, bus.Config{URL: url, Creds: Creds(url), Prefix: prefix, Name: t.Name()})
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
	s    *embedded.Server // nil while stopped
}

// NewRestartable starts a Restartable server on a free loopback port; it is
// shut down when the test ends. Its credentials (Creds(r.URL())) stay the
// same across restarts, so connected clients reconnect.
func NewRestartable(t testing.TB) *Restartable {
	t.Helper()
	r := &Restartable{t: t, dir: t.TempDir(), port: freePorts(t, 1)[0]}
	r.Start()
	t.Cleanup(r.Stop)
	register(t, r.URL(), r.s.CredsFile())
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
	s, err := embedded.Start(embedded.Config{DataDir: r.dir, Port: r.port, ReuseCredentials: true})
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
