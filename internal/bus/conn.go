package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config configures a connection.
type Config struct {
	// URL lists NATS servers, comma-separated. Required.
	URL string
	// Creds is an optional NATS credentials file.
	Creds string
	// Name is the connection name shown by the server.
	Name string
	// Prefix is the subject prefix; default "capstan".
	Prefix string
	// ResultsMaxAge is how long results are kept; default 24h.
	ResultsMaxAge time.Duration
	// Replicas is the replica count of streams and buckets; default 1.
	Replicas int
	// ConnectTimeout bounds the first connection; default 5s.
	ConnectTimeout time.Duration
}

// Conn is a NATS connection with JetStream and Capstan's topology in place.
type Conn struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names protocol.Names
	cfg   Config
	kvs   kvCache
	den   *denials
}

// Connect connects to cfg.URL and ensures streams and buckets exist with
// compatible configuration (see EnsureTopology). An operation of the
// connection that the server refuses for lack of permission fails with an
// error wrapping ErrPermissionDenied (see PermissionError) as soon as the
// server says so.
func Connect(ctx context.Context, cfg Config) (*Conn, error) {
	if cfg.URL == "" {
		return nil, errors.New("bus: NATS URL must be set")
	}
	names, err := protocol.NewNames(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	cfg.ResultsMaxAge = cmp.Or(cfg.ResultsMaxAge, 24*time.Hour)
	cfg.Replicas = cmp.Or(cfg.Replicas, 1)
	cfg.ConnectTimeout = cmp.Or(cfg.ConnectTimeout, 5*time.Second)
	den := &denials{}
	opts := []nats.Option{
		nats.Name(cmp.Or(cfg.Name, "capstan")),
		nats.ErrorHandler(den.onAsyncError),
		nats.Timeout(cfg.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
	}
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect to %s: %w", redactURL(cfg.URL), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	c := &Conn{nc: nc, js: js, names: names, cfg: cfg, den: den}
	if err := c.EnsureTopology(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// Probe reports whether a NATS server answers at url within timeout.
func Probe(url string, timeout time.Duration) bool {
	nc, err := nats.Connect(url, nats.Timeout(timeout), nats.NoReconnect(), nats.Name("capstan-probe"))
	if err != nil {
		return false
	}
	nc.Close()
	return true
}

// Names returns the subject, stream and bucket names in use.
func (c *Conn) Names() protocol.Names { return c.names }

// Close drains nothing and closes the connection.
func (c *Conn) Close() { c.nc.Close() }

// Flush waits until the server has processed everything sent so far, at
// most 10s when ctx has no deadline of its own.
func (c *Conn) Flush(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	return c.nc.FlushWithContext(ctx)
}

// redactURL removes user info from a server URL list before it is shown.
func redactURL(u string) string {
	parts := strings.Split(u, ",")
	for i, p := range parts {
		if at := strings.LastIndex(p, "@"); at >= 0 {
			if scheme := strings.Index(p, "://"); scheme >= 0 && scheme < at {
				parts[i] = p[:scheme+3] + "[REDACTED]@" + p[at+1:]
			}
		}
	}
	return strings.Join(parts, ",")
}

// Connected reports whether the connection is up (false while reconnecting
// and once closed).
func (c *Conn) Connected() bool { return c.nc.IsConnected() }
