package bustest

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is an in-process JetStream cluster of real nats-servers on
// loopback, for fault-injection tests: nodes can be stopped and restarted on
// the same ports and stores.
type Cluster struct {
	t     testing.TB
	mu    sync.Mutex
	nodes []*node
}

type node struct {
	opts *server.Options
	ns   *server.Server // nil while stopped
}

// NewCluster starts n clustered JetStream servers (cluster name "capstan")
// with their stores in test temp dirs, and waits until JetStream has a meta
// leader. Every node is shut down when the test ends.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	clientPorts, clusterPorts := freePorts(t, n), freePorts(t, n)
	routes := make([]string, n)
	for i, p := range clusterPorts {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	c := &Cluster{t: t}
	for i := range n {
		opts := &server.Options{
			ServerName: fmt.Sprintf("node-%d", i+1),
			Host:       "127.0.0.1",
			Port:       clientPorts[i],
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true,
			NoLog:      true,
			Cluster:    server.ClusterOpts{Name: "capstan", Host: "127.0.0.1", Port: clusterPorts[i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
		}
		c.nodes = append(c.nodes, &node{opts: opts})
	}
	for i := range c.nodes {
		c.Start(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.Stop(i)
		}
	})
	c.WaitReady(60 * time.Second)
	return c
}

// URL returns every node's client URL, comma-separated, as clients take it.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", n.opts.Port)
	}
	return strings.Join(urls, ",")
}

// Start starts node i (again) on its ports and store. Starting a running
// node is a no-op.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.ns != nil {
		return
	}
	opts := *n.opts
	ns, err := server.NewServer(&opts)
	if err != nil {
		c.t.Fatalf("node %d: %v", i+1, err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		c.t.Fatalf("node %d not ready in 30s", i+1)
	}
	n.ns = ns
}

// Stop shuts node i down and waits until it has stopped. Stopping a stopped
// node is a no-op.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.ns == nil {
		return
	}
	n.ns.Shutdown()
	n.ns.WaitForShutdown()
	n.ns = nil
}

// WaitReady waits until a running node sees a JetStream meta leader and
// every running node is current, or fails the test after d.
func (c *Cluster) WaitReady(d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if c.ready() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("JetStream cluster not ready in %s", d)
}

func (c *Cluster) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	leader := false
	for _, n := range c.nodes {
		if n.ns == nil {
			continue
		}
		if !n.ns.JetStreamIsCurrent() {
			return false
		}
		leader = leader || n.ns.JetStreamIsLeader()
	}
	return leader
}

// FreePort returns a loopback port that was free a moment ago, for a server
// a test starts itself (for example a worker's embedded server).
func FreePort(t testing.TB) int {
	t.Helper()
	return freePorts(t, 1)[0]
}

// freePorts returns n distinct free loopback ports.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
