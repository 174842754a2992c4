package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// nodeEnv, set in the environment of this test binary, makes it run one
// nats-server node from the JSON nodeSpec it holds instead of the tests
// (see TestMain): a node in a process of its own can be paused with SIGSTOP.
const nodeEnv = "CAPSTAN_CHAOS_NODE"

// nodeSpec is how a node process is configured.
type nodeSpec struct {
	Name        string   `json:"name"`
	Port        int      `json:"port"`
	ClusterPort int      `json:"cluster_port"`
	HTTPPort    int      `json:"http_port"`
	Routes      []string `json:"routes"`
	Advertise   string   `json:"advertise"`
	StoreDir    string   `json:"store_dir"`
}

// runNode runs the node described by spec until the process is killed.
func runNode(spec string) int {
	var s nodeSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, "node spec:", err)
		return 2
	}
	opts := &server.Options{
		ServerName: s.Name,
		Host:       "127.0.0.1",
		Port:       s.Port,
		HTTPHost:   "127.0.0.1",
		HTTPPort:   s.HTTPPort,
		JetStream:  true,
		StoreDir:   s.StoreDir,
		NoSigs:     true,
		Cluster: server.ClusterOpts{
			Name: "capstan", Host: "127.0.0.1", Port: s.ClusterPort,
			// Routes are only the configured ones, through the test's
			// proxies: the address a node tells the others (for routes
			// they would open by gossip) leads nowhere, and clients are not
			// told of other nodes, so each stays on the nodes it was given.
			Advertise:   s.Advertise,
			NoAdvertise: true,
		},
		Routes: server.RoutesFromStr(strings.Join(s.Routes, ",")),
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		return 2
	}
	ns.ConfigureLogger()
	go ns.Start()
	if !ns.ReadyForConnections(time.Minute) {
		fmt.Fprintln(os.Stderr, "node not ready in 1m")
		return 2
	}
	fmt.Fprintln(os.Stderr, "node ready")
	ns.WaitForShutdown()
	return 0
}

// natsNode is a node of a procCluster: a child process.
type natsNode struct {
	spec   nodeSpec
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{}
}

// procCluster is a three-node JetStream cluster of nats-server processes on
// loopback, every route between two nodes through a routeProxy the test
// owns: isolate partitions a node from the others, pause freezes its
// process. Every process is killed when the test ends.
type procCluster struct {
	t       *testing.T
	nodes   []*natsNode
	proxies map[[2]int]*routeProxy // [from, to]: the route node from dials to reach node to
}

// newProcCluster starts n node processes and waits until JetStream answers
// on every one.
func newProcCluster(t *testing.T, n int) *procCluster {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Where a node says it can be reached for routes opened by gossip: a
	// listener that hangs up at once.
	nowhere, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := nowhere.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = nowhere.Close(); <-done })

	ports := freeTCPPorts(t, 3*n)
	c := &procCluster{t: t, proxies: map[[2]int]*routeProxy{}}
	for i := range n {
		c.nodes = append(c.nodes, &natsNode{spec: nodeSpec{
			Name: fmt.Sprintf("node-%d", i+1), Port: ports[3*i], ClusterPort: ports[3*i+1], HTTPPort: ports[3*i+2],
			Advertise: nowhere.Addr().String(), StoreDir: t.TempDir(),
		}})
	}
	for i, a := range c.nodes {
		for j, b := range c.nodes {
			if i == j {
				continue
			}
			p := newRouteProxy(t, fmt.Sprintf("127.0.0.1:%d", b.spec.ClusterPort))
			c.proxies[[2]int{i, j}] = p
			a.spec.Routes = append(a.spec.Routes, "nats-route://"+p.addr())
		}
	}
	for _, nd := range c.nodes {
		c.start(exe, nd)
	}
	for i := range c.nodes {
		c.waitJetStream(i, 2*time.Minute)
	}
	return c
}

// start runs nd's process and waits until it accepts clients.
func (c *procCluster) start(exe string, nd *natsNode) {
	t := c.t
	t.Helper()
	spec, err := json.Marshal(nd.spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), nodeEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	nd.cmd, nd.logs, nd.exited = cmd, &syncBuffer{}, make(chan struct{})
	cmd.Stdout, cmd.Stderr = nd.logs, nd.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(nd.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // a stopped process dies too
		<-nd.exited
		if t.Failed() {
			t.Logf("log of %s (last 8 KiB):\n%s", nd.spec.Name, tail(nd.logs.String(), 8<<10))
		}
	})
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(nd.logs.String(), "node ready") {
		select {
		case <-nd.exited:
			t.Fatalf("%s exited before ready:\n%s", nd.spec.Name, nd.logs)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready in 1m:\n%s", nd.spec.Name, nd.logs)
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// waitJetStream waits until node i answers a JetStream account info
// request (JetStream enabled and a meta leader known).
func (c *procCluster) waitJetStream(i int, d time.Duration) {
	t := c.t
	t.Helper()
	nc, err := nats.Connect(c.url(i), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatalf("connect to %s: %v", c.nodes[i].spec.Name, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	retryFor(t, d, 100*time.Millisecond, c.nodes[i].spec.Name+": JetStream ready", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err
	})
}

// url returns the client URLs of the given nodes, comma-separated.
func (c *procCluster) url(nodes ...int) string {
	urls := make([]string, len(nodes))
	for k, i := range nodes {
		urls[k] = fmt.Sprintf("nats://127.0.0.1:%d", c.nodes[i].spec.Port)
	}
	return strings.Join(urls, ",")
}

// name is node i's server name.
func (c *procCluster) name(i int) string { return c.nodes[i].spec.Name }

// isolate cuts every route between node i and the others, both ways.
func (c *procCluster) isolate(i int) {
	for k, p := range c.proxies {
		if k[0] == i || k[1] == i {
			p.partition()
		}
	}
}

// heal lets every route through again.
func (c *procCluster) heal() {
	for _, p := range c.proxies {
		p.heal()
	}
}

// pause stops node i's process with SIGSTOP; resume continues it.
func (c *procCluster) pause(i int) {
	c.t.Helper()
	if err := c.nodes[i].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP %s: %v", c.name(i), err)
	}
}

func (c *procCluster) resume(i int) {
	c.t.Helper()
	if err := c.nodes[i].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		c.t.Fatalf("SIGCONT %s: %v", c.name(i), err)
	}
}

// streamState is a stream as one node stores it.
type streamState struct {
	Messages uint64 `json:"messages"`
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
}

// localStreams returns the streams node i stores, by name, as it stores
// them (its monitoring endpoint /jsz, not the stream leader's view).
func (c *procCluster) localStreams(ctx context.Context, i int) (map[string]streamState, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("http://127.0.0.1:%d/jsz?accounts=true&streams=true", c.nodes[i].spec.HTTPPort), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name  string      `json:"name"`
				State streamState `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return nil, fmt.Errorf("jsz of %s: %w", c.name(i), err)
	}
	out := map[string]streamState{}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			out[s.Name] = s.State
		}
	}
	return out, nil
}

// freeTCPPorts returns n distinct loopback ports that were free a moment
// ago.
func freeTCPPorts(t *testing.T, n int) []int {
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
