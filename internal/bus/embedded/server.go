// Package embedded starts Capstan's embedded JetStream server, the one
// importer of nats-server: the worker and the dispatcher's local mode use it
// when no NATS URL is configured, and tests use it through bustest. It lives
// apart from package bus so that the client, which connects only, does not
// link a NATS server.
package embedded

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Config configures an embedded nats-server.
type Config struct {
	// DataDir holds the JetStream file store and the credentials file
	// (bus.CredsFileName). It must not be a symbolic link.
	DataDir string
	// Host is the listen address; default 127.0.0.1.
	Host string
	// Port is the client port; 0 means 4222, -1 a random free port.
	Port int
	// ReuseCredentials keeps the NKey user of an existing credentials file
	// in DataDir instead of generating a new one (a missing or unreadable
	// file still gets new credentials). It exists for tests that restart a
	// server under connected clients, which reconnect with the seed they
	// read first; the worker and the dispatcher's local mode never set it, so
	// every start of theirs generates new credentials and an old seed is
	// refused.
	ReuseCredentials bool
	// MaxPayload is the largest message the server accepts, headers
	// included; default DefaultMaxPayload (8 MiB). Results never
	// exceed the worker's own limit (docs/reliability.md, "Result size"),
	// whatever this is.
	MaxPayload int32
}

// DefaultMaxPayload is the max payload of an embedded server whose
// Config sets none: 8 MiB, as deploy/nats configures the cluster.
const DefaultMaxPayload = 8 << 20

// Server is an embedded nats-server with JetStream that requires
// authentication: only connections that sign the server's nonce with the
// NKey user seed in CredsFile are accepted; any other connection is refused
// with "Authorization Violation".
type Server struct {
	ns    *server.Server
	creds string
}

// Start starts an embedded nats-server with JetStream storing under
// cfg.DataDir and waits until it accepts connections. It generates an NKey
// user at every start (see Config.ReuseCredentials) and accepts only
// that user; once the server listens, it writes the user's seed to
// <DataDir>/embedded.creds with mode 0600 (replacing that file atomically;
// readable by bus.Connect and by the nats CLI's --nkey). It refuses to start
// when DataDir is a symbolic link, and stops the server again when the file
// cannot be written with mode 0600.
func Start(cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embedded server: data dir must be set")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded server: create data dir: %w", err)
	}
	if err := checkDataDir(filepath.Clean(cfg.DataDir)); err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("embedded server: data dir: %w", err)
	}
	credsFile := bus.EmbeddedCredsFile(abs)
	var user nkeys.KeyPair
	if cfg.ReuseCredentials {
		user, _ = readUser(credsFile) // none or unreadable: new credentials below
	}
	write := user == nil
	if write {
		if user, err = newUser(); err != nil {
			return nil, fmt.Errorf("embedded server: %w", err)
		}
	}
	defer user.Wipe()
	pub, err := user.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("embedded server: credentials: %w", err)
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = 4222
	}
	if port > 0 {
		// Fail at once, not after the readiness wait, when the port is taken
		// (for example by another worker's embedded server).
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("embedded server: %w", err)
		}
		_ = l.Close()
	}
	opts := &server.Options{
		ServerName:         "capstan-embedded",
		Host:               host,
		Port:               port,
		JetStream:          true,
		StoreDir:           cfg.DataDir,
		NoSigs:             true,
		NoLog:              true,
		MaxPayload:         cmp.Or(cfg.MaxPayload, DefaultMaxPayload),
		JetStreamMaxMemory: 256 << 20,
		// The only user; no password is sent: the client signs a nonce.
		Nkeys: []*server.NkeyUser{{Nkey: pub}},
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded server: not ready on %s within 15s", net.JoinHostPort(host, strconv.Itoa(port)))
	}
	// Written once the server listens, so that a start that fails (the port
	// is another server's) leaves that server's file alone. Until the file
	// is there, nobody can connect.
	if write {
		if err := writeCreds(credsFile, user); err != nil {
			ns.Shutdown()
			ns.WaitForShutdown()
			return nil, fmt.Errorf("embedded server: %w", err)
		}
	}
	return &Server{ns: ns, creds: credsFile}, nil
}

// ClientURL returns the URL clients connect to, such as
// nats://127.0.0.1:4222.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// CredsFile returns the absolute path of the credentials file clients of
// this server must use (bus.Config.Creds): <DataDir>/embedded.creds, mode 0600.
func (s *Server) CredsFile() string { return s.creds }

// Shutdown stops the server and waits for it to finish.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// Version returns the version of the embedded nats-server.
func Version() string { return server.VERSION }
