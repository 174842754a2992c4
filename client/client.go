// Package client is Capstan's dispatcher library: it publishes tool calls
// over NATS JetStream following the version-1 wire protocol
// (docs/protocol.md) and collects their results, progress events and the
// tool catalog. It speaks only the wire protocol, so it works with any
// conforming worker fleet.
//
// A typical LLM turn:
//
//	c, err := client.New(ctx, client.Config{NATSURL: "nats://127.0.0.1:4222"})
//	...
//	defer c.Close()
//	results := c.ExecuteParallel(ctx, client.Turn{}, calls) // one result per call, in input order
package client

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/wire"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// Call is a tool call (docs/protocol.md, "Call message"); its fields are
// documented on wire.Call. Tool and SessionID are required; CallID and Args
// are required on the wire too, and Submit fills them when missing (NewID,
// {}).
type Call = wire.Call

// Result is the one answer to a call (docs/protocol.md, "Result message");
// its fields are documented on wire.Result. Code compares with the
// constants of wire and tool: r.Code == tool.CodeInputInvalid.
type Result = wire.Result

// Progress is a progress event (docs/protocol.md, "Progress event"); its
// fields are documented on wire.Progress.
type Progress = wire.Progress

// CatalogEntry is a tool's definition in the tool catalog (docs/protocol.md,
// "Tool catalog"); its fields are documented on wire.CatalogEntry.
type CatalogEntry = wire.CatalogEntry

// Code is the failure class of a result (wire.Code, the same type as
// tool.Code).
type Code = wire.Code

// Audience is who a progress event is for (wire.Audience, the same type as
// tool.Audience): the audience argument of Progress.
type Audience = wire.Audience

// DefaultWait is how long a turn waits for the result of a call that sets no
// timeout_ms: the workers' default call timeout (60s) plus 10s of slack.
const DefaultWait = 70 * time.Second

// Config configures a Client. The zero value of every field except NATSURL
// means its documented default.
type Config struct {
	// NATSURL lists NATS servers, comma-separated. Required unless
	// NATSConn is set.
	NATSURL string
	// NATSConn, when set, is the connection the client uses instead of
	// dialing NATSURL (NATSURL, NATSCreds and InboxPrefix must then be
	// empty, and Name is not used: the connection has its own). The caller
	// keeps owning it: Close does not close it.
	NATSConn *nats.Conn
	// NATSCreds is an optional credentials file: a NATS credentials file (a
	// user JWT and its seed) or an NKey user seed file such as the
	// embedded.creds of an embedded server (in its data dir), which
	// refuses connections without it.
	NATSCreds string
	// Prefix is the subject prefix; default "capstan".
	Prefix string
	// Name is the connection name shown by the server; default "capstan-client".
	Name string
	// DefaultWait is how long ExecuteParallel waits for a call without
	// timeout_ms (a call with one waits timeout_ms + 10s); default 70s.
	DefaultWait time.Duration
	// InboxPrefix replaces "_INBOX" as the prefix of the reply subjects of
	// the client's requests: a tenant whose NATS user may subscribe only to
	// its own inbox subjects (deploy/nats/auth.conf) sets the prefix its
	// user allows, e.g. "_INBOX_researcher". Default "_INBOX".
	InboxPrefix string
	// Personality is the personality this client acts under (protocol
	// version 2 puts it into the subjects, so NATS permissions decide which
	// personalities a user may call; security.md section 3): Submit puts it
	// into calls that name none, and Await, Result, Cancel and Progress read
	// and cancel that personality's calls. Default "default"; WithPersonality
	// gives a view of the same client under another personality.
	Personality string
	// StreamReplicas is the replica count of the streams and buckets the
	// client creates when no worker has yet; default 1. Existing ones are
	// left as they are.
	StreamReplicas int
	// TracerProvider makes the producer span of every published call, whose
	// W3C trace context travels in the call's traceparent and tracestate
	// headers (never baggage); default otel.GetTracerProvider(), a no-op
	// unless the program set one.
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, protocol.DefaultPrefix)
	c.Name = cmp.Or(c.Name, "capstan-client")
	c.Personality = cmp.Or(c.Personality, DefaultPersonality)
	c.DefaultWait = cmp.Or(c.DefaultWait, DefaultWait)
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	switch {
	case c.NATSConn != nil && (c.NATSURL != "" || c.NATSCreds != "" || c.InboxPrefix != ""):
		errs = append(errs, errors.New("Config.NATSConn is set: Config.NATSURL, Config.NATSCreds and Config.InboxPrefix must be empty"))
	case c.NATSConn == nil && strings.TrimSpace(c.NATSURL) == "":
		errs = append(errs, errors.New("Config.NATSURL must be set"))
	}
	if err := protocol.CheckToken("Config.Prefix", c.Prefix); err != nil {
		errs = append(errs, err)
	}
	if err := protocol.CheckToken("Config.Personality", c.Personality); err != nil {
		errs = append(errs, err)
	}
	if c.StreamReplicas < 0 || c.StreamReplicas > 5 {
		errs = append(errs, fmt.Errorf("Config.StreamReplicas must be 1 to 5, got %d", c.StreamReplicas))
	}
	if c.DefaultWait < 0 {
		errs = append(errs, fmt.Errorf("Config.DefaultWait must not be negative, got %s", c.DefaultWait))
	}
	return errors.Join(errs...)
}

// DefaultPersonality is the personality of a Client whose Config names none.
const DefaultPersonality = "default"

// Client publishes calls and reads results under one personality
// (Config.Personality). It is safe for concurrent use. Create it with New and
// release it with Close.
type Client struct {
	*core
	// personality is the personality of this view (see WithPersonality).
	personality string
}

// core is what the views of one client share: the connection and the
// catalog.
type core struct {
	cfg    Config
	conn   *bus.Conn
	names  protocol.Names
	tracer trace.Tracer

	catMu   sync.RWMutex
	catalog map[string]CatalogEntry // by tool name, kept current by a KV watch
	// catChanged is closed (and replaced) at every catalog change.
	catChanged chan struct{}

	stopWatch func()
	cancel    context.CancelFunc
	closeOnce sync.Once
}

// New connects to cfg.NATSURL, creates Capstan's streams and buckets if they
// do not exist (idempotently; an incompatible existing one is an error), and
// starts watching the tool catalog. It returns once the current catalog has
// been read. ctx bounds the start-up only.
func New(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	conn, err := bus.Connect(ctx, bus.Config{URL: cfg.NATSURL, Creds: cfg.NATSCreds, Name: cfg.Name, Prefix: cfg.Prefix, Replicas: cfg.StreamReplicas,
		InboxPrefix: cfg.InboxPrefix, NATSConn: cfg.NATSConn})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c := &Client{core: &core{cfg: cfg, conn: conn, names: conn.Names(), tracer: telemetry.Tracer(cfg.TracerProvider), catalog: make(map[string]CatalogEntry),
		catChanged: make(chan struct{})},
		personality: cfg.Personality}
	if err := c.watchCatalog(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// watchCatalog starts the catalog watch; it lives until Close, but ctx bounds
// the initial read.
func (c *Client) watchCatalog(ctx context.Context) error {
	kv, err := c.conn.KV(ctx, bus.Tools)
	if err != nil {
		return fmt.Errorf("client: tool catalog: %w", err)
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	release := context.AfterFunc(ctx, cancel) // abort the initial read if ctx ends first
	stop, err := kv.Watch(wctx, c.applyCatalog)
	release()
	if err != nil {
		cancel()
		return fmt.Errorf("client: watch tool catalog: %w", err)
	}
	c.stopWatch, c.cancel = stop, cancel
	return nil
}

// applyCatalog records one catalog change. Entries that are not valid JSON
// are ignored: a client must not fail because one worker wrote garbage.
func (c *Client) applyCatalog(e bus.Entry) {
	c.catMu.Lock()
	defer c.catMu.Unlock()
	defer func() {
		close(c.catChanged)
		c.catChanged = make(chan struct{})
	}()
	if e.Deleted {
		delete(c.catalog, e.Key)
		return
	}
	var ce CatalogEntry
	if err := json.Unmarshal(e.Value, &ce); err != nil {
		delete(c.catalog, e.Key)
		return
	}
	ce.Name = cmp.Or(ce.Name, e.Key)
	c.catalog[e.Key] = ce
}

// Close stops the catalog watch and closes the connection. Calls already
// published keep running on the workers. Close is idempotent.
func (c *Client) Close() {
	c.closeOnce.Do(func() {
		c.stopWatch()
		c.cancel()
		c.conn.Close()
	})
}

// Tools returns the tool catalog sorted by name, as last seen by the catalog
// watch started in New.
func (c *Client) Tools(ctx context.Context) ([]CatalogEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.catMu.RLock()
	out := make([]CatalogEntry, 0, len(c.catalog))
	for _, e := range c.catalog {
		out = append(out, e)
	}
	c.catMu.RUnlock()
	slices.SortFunc(out, func(a, b CatalogEntry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// CatalogChanged returns a channel that is closed at the next change of the
// tool catalog, once Tools and ToolsFor see it. A caller that keeps a view
// of the catalog current takes the channel first, then reads the catalog,
// then waits on the channel, so that no change is missed.
func (c *Client) CatalogChanged() <-chan struct{} {
	c.catMu.RLock()
	defer c.catMu.RUnlock()
	return c.catChanged
}

// route returns the pool a tool's calls go to, and whether the tool must be
// refused as unknown: a tool in the catalog goes to its pool; an unknown one
// goes to "default", unless the catalog already lists a tool of the default
// pool, in which case the default pool is known not to host it.
func (c *Client) route(tool string) (pool string, unknown bool) {
	c.catMu.RLock()
	defer c.catMu.RUnlock()
	if e, ok := c.catalog[tool]; ok {
		return cmp.Or(e.Pool, protocol.DefaultPool), false
	}
	for _, e := range c.catalog {
		if cmp.Or(e.Pool, protocol.DefaultPool) == protocol.DefaultPool {
			return "", true
		}
	}
	return protocol.DefaultPool, false
}

// WithPersonality returns a view of c acting under personality id: it shares
// c's connection and catalog (Close on any view closes them for all), and
// its Submit, Await, Result, Cancel and Progress use id. An id that is not a
// valid token is an error.
func (c *Client) WithPersonality(id string) (*Client, error) {
	if err := protocol.CheckToken("personality", id); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &Client{core: c.core, personality: id}, nil
}

// PersonalityID returns the personality this client (or view) acts under.
func (c *Client) PersonalityID() string { return c.personality }

// Prefix returns the subject prefix the client uses.
func (c *Client) Prefix() string { return c.names.Prefix() }

// NewID returns a random 26-character token (base32: A–Z, 2–7), valid as a
// call_id or batch_id.
func NewID() string { return rand.Text() }
