// Package bus is the only importer of nats.go and nats-server. It starts the
// embedded JetStream server, connects, creates Capstan's streams, buckets and
// consumers idempotently, and offers the small publishing, consuming and KV
// operations the worker and the client need.
package bus

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerConfig configures an embedded nats-server.
type ServerConfig struct {
	// DataDir holds the JetStream file store.
	DataDir string
	// Host is the listen address; default 127.0.0.1.
	Host string
	// Port is the client port; 0 means 4222, -1 a random free port.
	Port int
}

// Server is an embedded nats-server with JetStream.
type Server struct {
	ns *server.Server
}

// StartServer starts an embedded nats-server with JetStream storing under
// cfg.DataDir and waits until it accepts connections.
func StartServer(cfg ServerConfig) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("embedded server: data dir must be set")
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded server: create data dir: %w", err)
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = 4222
	}
	opts := &server.Options{
		ServerName:         "capstan-embedded",
		Host:               host,
		Port:               port,
		JetStream:          true,
		StoreDir:           cfg.DataDir,
		NoSigs:             true,
		NoLog:              true,
		MaxPayload:         8 << 20,
		JetStreamMaxMemory: 256 << 20,
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
	return &Server{ns: ns}, nil
}

// ClientURL returns the URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Shutdown stops the server and waits for it to finish.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// ServerVersion returns the version of the embedded nats-server.
func ServerVersion() string { return server.VERSION }
