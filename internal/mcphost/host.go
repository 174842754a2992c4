package mcphost

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/tool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Config.
const (
	DefaultRestartMin   = 500 * time.Millisecond
	DefaultRestartMax   = 30 * time.Second
	DefaultStartTimeout = time.Minute
	DefaultStartWait    = 10 * time.Second
	DefaultPingInterval = 30 * time.Second
	DefaultPingTimeout  = 10 * time.Second
	// DefaultHungPingTimeout bounds the ping a stdio server gets at once
	// after one of its calls timed out or was cancelled.
	DefaultHungPingTimeout = 2 * time.Second
	DefaultStderrMax       = 64 << 10
	// stableAfter is how long a connection must have lived for its end to
	// count as a crash of a healthy server (restarted at once, calls wait
	// for it) rather than one more failure of a crash loop (backoff, calls
	// refused meanwhile).
	stableAfter = 10 * time.Second
)

// Config configures a Host. The zero value of every field is its default.
type Config struct {
	// Secrets resolves the refs of secret_env and secret_headers; nil means
	// no backend is configured, and a server that uses secrets cannot start.
	Secrets secrets.Backend
	// Process is the worker's process configuration: stdio servers start
	// as confined children with it (trusted PATH, network mode, sandbox).
	Process process.Config
	// Resolver resolves bare binary names on the trusted PATH; nil: a
	// resolver of its own over Process.TrustedPATH.
	Resolver *process.Resolver
	// Logger receives the servers' lifecycle, their stderr lines (capped
	// per start at StderrMax bytes) and their refused connections; default
	// slog.Default(). No secret value is ever logged.
	Logger *slog.Logger
	// TracerProvider makes the MCP client spans; default
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// WrapTransport, when set, wraps the HTTP transport of url servers,
	// inside the network checks (the worker's HTTP client spans).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// LookupIP resolves host names for the url servers' dial-time checks;
	// nil: the system resolver. For tests.
	LookupIP func(ctx context.Context, host string) ([]netip.Addr, error)
	// AllowPrivateURLs lets url servers be reached on private and loopback
	// addresses: for tests of the HTTP transport only; the worker never
	// sets it, so a hosted url server gets the SSRF protection of every
	// fetch.
	AllowPrivateURLs bool
	// OnTools is told the hosted tools of a server every time it has
	// listed them: after each (re)start and after a tools/list_changed
	// notification. Calls for one server never overlap; it should return
	// quickly.
	OnTools func(server string, tools []tool.Tool)
	// OnStatus is told the status of every server after each change. It
	// must not block.
	OnStatus func(map[string]Status)
	// RestartMin and RestartMax bound the delay before a server is started
	// again (doubling with every consecutive failure, ±10% jitter).
	RestartMin, RestartMax time.Duration
	// StartTimeout bounds one start: child or connection, initialize and
	// tools/list.
	StartTimeout time.Duration
	// StartWait is how long a call waits for a server that is starting or
	// restarting after a crash before it answers not_available.
	StartWait time.Duration
	// PingInterval is how often a live server is pinged; one that fails
	// two pings in a row (PingTimeout each) is hung and restarted.
	PingInterval, PingTimeout time.Duration
	// HungPingTimeout bounds the ping a stdio server is sent at once after
	// one of its calls timed out or was cancelled (one such check at a
	// time per server; calls arriving meanwhile wait for its outcome). A
	// server that does not answer within it is hung and restarted, so the
	// next call does not wait for two periodic pings to fail.
	HungPingTimeout time.Duration
	// StderrMax caps the stderr bytes of one start logged; the rest is
	// read and dropped.
	StderrMax int
}

func (c Config) withDefaults() Config {
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Resolver == nil {
		c.Resolver = process.NewResolver(c.Process.TrustedPATH)
	}
	c.RestartMin = cmp.Or(c.RestartMin, DefaultRestartMin)
	c.RestartMax = cmp.Or(c.RestartMax, DefaultRestartMax)
	c.StartTimeout = cmp.Or(c.StartTimeout, DefaultStartTimeout)
	c.StartWait = cmp.Or(c.StartWait, DefaultStartWait)
	c.PingInterval = cmp.Or(c.PingInterval, DefaultPingInterval)
	c.PingTimeout = cmp.Or(c.PingTimeout, DefaultPingTimeout)
	c.HungPingTimeout = cmp.Or(c.HungPingTimeout, DefaultHungPingTimeout)
	c.StderrMax = cmp.Or(c.StderrMax, DefaultStderrMax)
	return c
}

func (c Config) validate() error {
	var errs []error
	if err := c.Process.Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"RestartMin", c.RestartMin}, {"RestartMax", c.RestartMax}, {"StartTimeout", c.StartTimeout},
		{"StartWait", c.StartWait}, {"PingInterval", c.PingInterval}, {"PingTimeout", c.PingTimeout},
		{"HungPingTimeout", c.HungPingTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("mcphost: %s must not be negative, got %s", d.name, d.v))
		}
	}
	if c.RestartMax < c.RestartMin {
		errs = append(errs, fmt.Errorf("mcphost: RestartMax %s must be at least RestartMin %s", c.RestartMax, c.RestartMin))
	}
	if c.StderrMax < 0 {
		errs = append(errs, fmt.Errorf("mcphost: StderrMax must not be negative, got %d", c.StderrMax))
	}
	return errors.Join(errs...)
}

// Host runs the hosted MCP servers of a worker: it starts each one (a
// confined child, or a connection through the scoped network), lists its
// tools, hosts each as a tool.Tool named mcp__<server>__<tool>, restarts a
// server that crashes or hangs, and answers for a server that is down.
// Create it with New and run it with Run, once.
type Host struct {
	cfg     Config
	tracer  trace.Tracer
	servers []*server // by name
	byName  map[string]*server
	started chan struct{}

	statusMu sync.Mutex // serialises OnStatus
}

// New checks cfg and returns a Host for defs (LoadDir's). A definition that
// uses secrets where cfg.Secrets is nil is an error: the server could never
// start.
func New(cfg Config, defs []*Definition) (*Host, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, tracer: telemetry.Tracer(cfg.TracerProvider), byName: make(map[string]*server), started: make(chan struct{})}
	var errs []error
	for _, d := range defs {
		if _, dup := h.byName[d.Name]; dup {
			errs = append(errs, fmt.Errorf("MCP server %s is defined twice", d.Name))
			continue
		}
		if cfg.Secrets == nil && len(d.secretRefs()) > 0 {
			errs = append(errs, fmt.Errorf("MCP server %s (%s) uses secrets, but %w", d.Name, d.File, errNoSecretsBackend))
			continue
		}
		s := newServer(h, d)
		h.servers = append(h.servers, s)
		h.byName[d.Name] = s
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return h, nil
}

// Definitions returns the hosted servers' definitions, by name.
func (h *Host) Definitions() []*Definition {
	out := make([]*Definition, len(h.servers))
	for i, s := range h.servers {
		out[i] = s.def
	}
	return out
}

// Run starts every server and keeps it running (restarting it after a
// crash or a hang) until ctx ends; then it stops them all (children killed,
// connections closed) and returns.
func (h *Host) Run(ctx context.Context) {
	var wg sync.WaitGroup
	var first sync.WaitGroup
	for _, s := range h.servers {
		first.Add(1)
		wg.Go(func() { s.run(ctx, first.Done) })
	}
	go func() { first.Wait(); close(h.started) }()
	wg.Wait()
}

// Started is closed once every server has finished its first start
// attempt, successful or not (at once when there is no server).
func (h *Host) Started() <-chan struct{} { return h.started }

// Unavailable returns, for a name of the form mcp__<server>__<tool> whose
// server is hosted and not up, the not_available message of its tools
// ("MCP server <server> is not available: <reason>"), and "" otherwise. It
// answers calls for tools a server that never came up could not list.
func (h *Host) Unavailable(toolName string) string {
	name, ok := tool.MCPServer(toolName)
	if !ok {
		return ""
	}
	s, ok := h.byName[name]
	if !ok {
		return ""
	}
	st := s.status()
	if st.State == StateUp {
		return ""
	}
	return unavailable(name, st.Reason)
}

func unavailable(server, reason string) string {
	return fmt.Sprintf("MCP server %s is not available: %s", server, cmp.Or(reason, "it is starting"))
}

// Status returns the status of every server, by name.
func (h *Host) Status() map[string]Status {
	out := make(map[string]Status, len(h.servers))
	for _, s := range h.servers {
		out[s.def.Name] = s.status()
	}
	return out
}

// statusChanged tells OnStatus.
func (h *Host) statusChanged() {
	if h.cfg.OnStatus == nil {
		return
	}
	h.statusMu.Lock()
	defer h.statusMu.Unlock()
	h.cfg.OnStatus(h.Status())
}

// backoff is the delay before start attempt n (1-based) after failures:
// RestartMin doubled n-1 times, at most RestartMax, ±10% jitter.
func (h *Host) backoff(n int) time.Duration {
	d := h.cfg.RestartMin
	for i := 1; i < n && d < h.cfg.RestartMax; i++ {
		d *= 2
	}
	d = min(d, h.cfg.RestartMax)
	jitter := time.Duration(rand.Int64N(int64(d)/5+1)) - d/10
	return max(d+jitter, time.Millisecond)
}
