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
	// Creds is an optional credentials file: a NATS credentials file (a
	// user JWT and its NKey seed) or an NKey user seed file such as the
	// embedded.creds an embedded server writes (Server.CredsFile). Which one
	// is told by its content.
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
	// InboxPrefix is the first token of the connection's reply subjects
	// (JetStream API replies, pulls, watches); default "_INBOX". A tenant's
	// NATS user may subscribe only to its own prefix (deploy/nats/auth.conf),
	// so that it never receives replies meant for another user.
	InboxPrefix string
	// NATSConn, when set, is used instead of dialing URL (which may then be
	// empty; Creds, Name, ConnectTimeout and InboxPrefix are not used). The
	// caller keeps owning it: Close does not close it. Permission refusals
	// the server reports asynchronously reach this package through the
	// connection's error handler, which is chained to the caller's.
	NATSConn *nats.Conn
}

// Conn is a NATS connection with JetStream and Capstan's topology in place.
type Conn struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names protocol.Names
	cfg   Config
	kvs   kvCache
	den   *denials
	// borrowed is true for a connection the caller gave (Config.NATSConn).
	borrowed bool
}

// Connect connects to cfg.URL and ensures streams and buckets exist with
// compatible configuration (see EnsureTopology). An operation of the
// connection that the server refuses for lack of permission fails with an
// error wrapping ErrPermissionDenied (see PermissionError) as soon as the
// server says so.
func Connect(ctx context.Context, cfg Config) (*Conn, error) {
	if cfg.NATSConn != nil {
		return adopt(ctx, cfg)
	}
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
	if cfg.InboxPrefix != "" {
		if err := protocol.CheckToken("inbox prefix", cfg.InboxPrefix); err != nil {
			return nil, fmt.Errorf("bus: %w", err)
		}
		opts = append(opts, nats.CustomInboxPrefix(cfg.InboxPrefix))
	}
	if cfg.Creds != "" {
		opt, err := credsOption(cfg.Creds)
		if err != nil {
			return nil, fmt.Errorf("bus: %w", err)
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect to %s: %w", redactURL(cfg.URL), classify(err))
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

// adopt is Connect with the caller's connection.
func adopt(ctx context.Context, cfg Config) (*Conn, error) {
	names, err := protocol.NewNames(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	cfg.ResultsMaxAge = cmp.Or(cfg.ResultsMaxAge, 24*time.Hour)
	cfg.Replicas = cmp.Or(cfg.Replicas, 1)
	nc := cfg.NATSConn
	if !nc.IsConnected() && !nc.IsReconnecting() {
		return nil, fmt.Errorf("bus: the given NATS connection is %s", nc.Status())
	}
	den := &denials{}
	theirs := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		den.onAsyncError(c, sub, err)
		if theirs != nil {
			theirs(c, sub, err)
		}
	})
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	c := &Conn{nc: nc, js: js, names: names, cfg: cfg, den: den, borrowed: true}
	if err := c.EnsureTopology(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// ErrNoServer reports that no NATS server answered (nothing listens, or what
// listens does not speak NATS).
var ErrNoServer = errors.New("no NATS server answers")

// ErrNotAuthorized reports that a NATS server answered but refused the
// connection's credentials, or its lack of them ("Authorization Violation").
var ErrNotAuthorized = errors.New("the server refused the credentials")

// ErrNKeyNotSupported reports that an NKey seed was offered to a server that
// does not authenticate NKey users (it sent no nonce), for example a
// nats-server without authorization: not an embedded server of Capstan.
var ErrNKeyNotSupported = errors.New("the server does not authenticate NKey users")

// classify wraps the authentication failures of nats.Connect in this
// package's sentinels, keeping nats.go's error in the chain.
func classify(err error) error {
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired),
		errors.Is(err, nats.ErrAuthRevoked), errors.Is(err, nats.ErrAccountAuthExpired):
		return fmt.Errorf("%w: %w", ErrNotAuthorized, err)
	case errors.Is(err, nats.ErrNkeysNotSupported):
		return fmt.Errorf("%w: %w", ErrNKeyNotSupported, err)
	}
	return err
}

// Probe tries to connect to url within timeout, with the credentials file
// creds ("" for none), and tells what answered: nil when a server accepted
// the connection; an error wrapping ErrNotAuthorized when a server answered
// but refused the credentials (or their absence); one wrapping
// ErrNKeyNotSupported when creds is an NKey seed and the server does not
// authenticate NKeys; one naming the file when creds cannot be used; and
// otherwise one wrapping ErrNoServer.
func Probe(url string, timeout time.Duration, creds string) error {
	opts := []nats.Option{nats.Timeout(timeout), nats.NoReconnect(), nats.Name("capstan-probe")}
	if creds != "" {
		opt, err := credsOption(creds)
		if err != nil {
			return fmt.Errorf("bus: %w", err)
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		if c := classify(err); c != err {
			return fmt.Errorf("bus: %s: %w", redactURL(url), c)
		}
		return fmt.Errorf("bus: %s: %w: %w", redactURL(url), ErrNoServer, err)
	}
	nc.Close()
	return nil
}

// Names returns the subject, stream and bucket names in use.
func (c *Conn) Names() protocol.Names { return c.names }

// Close drains nothing and closes the connection, unless the caller gave
// it (Config.NATSConn): that one stays open.
func (c *Conn) Close() {
	if c.borrowed {
		return
	}
	c.nc.Close()
}

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
