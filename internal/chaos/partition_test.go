package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestPartitionIsolatesTheStreamLeader partitions the node that leads every
// stream (the calls stream, its pool consumer, the results stream that is
// the ledger, progress, audit and the buckets) from the two other nodes of
// a three-node cluster with R3 streams, while two workers and a publisher on
// the majority side and a worker and a publisher on the isolated node keep
// going; the routes are cut (connections closed, new ones refused) until the
// majority has elected new leaders and answered calls, then healed. Every
// call is answered exactly once, nothing is dead-lettered, and every replica
// ends with the same results.
func TestPartitionIsolatesTheStreamLeader(t *testing.T) {
	t.Parallel()
	runPartition(t, "isolate", (*procCluster).isolate, func(c *procCluster, _ int) { c.heal() })
}

// TestPartitionSIGSTOPNode pauses the process of the node that leads every
// stream with SIGSTOP (its connections stay open and silent, as in a long
// GC pause or a frozen VM) until the majority has elected new leaders and
// answered calls, then continues it with SIGCONT. The same counts hold.
func TestPartitionSIGSTOPNode(t *testing.T) {
	t.Parallel()
	runPartition(t, "sigstop", (*procCluster).pause, (*procCluster).resume)
}

// runPartition runs the scenario of the partition tests with the given
// fault, injected on node 0 (node-1) and cleared.
func runPartition(t *testing.T, batch string, inject, clear func(*procCluster, int)) {
	const (
		isolated    = 0
		nMajority   = 240 // calls published on the majority side
		nIsolated   = 40  // calls published on the isolated node
		sleepMS     = 20
		concurrency = 8
	)
	began := time.Now()
	c := newProcCluster(t, 3)
	ctx := ctxT(t, 4*time.Minute)
	majority, minority := c.url(1, 2), c.url(isolated)
	conn := connectRetry(t, bus.Config{URL: majority, Replicas: 3, Name: t.Name() + "-majority"})
	putDefaultPersonality(t, conn)
	minConn := connectRetry(t, bus.Config{URL: minority, Replicas: 3, Name: t.Name() + "-isolated"})
	logs := map[string]*syncBuffer{}
	for _, w := range []struct{ id, url string }{{"maj-1", majority}, {"maj-2", majority}, {"iso", minority}} {
		logs[w.id] = &syncBuffer{}
		startWorker(t, worker.Config{NATSURL: w.url, WorkerID: batch + "-" + w.id, StreamReplicas: 3, Concurrency: concurrency,
			Logger: slog.New(slog.NewJSONHandler(logs[w.id], nil))})
	}
	t.Cleanup(func() {
		if t.Failed() {
			for id, l := range logs {
				t.Logf("log of worker %s (last 8 KiB):\n%s", id, tail(l.String(), 8<<10))
			}
		}
	})
	obs := newObserver(t, majority)
	obs.moveLeaders(t, c.name(isolated))
	setup := time.Since(began)

	ids := make([]string, 0, nMajority+nIsolated)
	for i := range nMajority {
		ids = append(ids, fmt.Sprintf("%s-a-%03d", batch, i))
	}
	for i := range nIsolated {
		ids = append(ids, fmt.Sprintf("%s-b-%03d", batch, i))
	}
	var wg sync.WaitGroup
	pubCtx, stopPublishing := context.WithCancel(ctx)
	t.Cleanup(func() { stopPublishing(); wg.Wait() }) // a test that fails mid-way
	publish := func(conn *bus.Conn, ids []string, every time.Duration) {
		for _, id := range ids {
			if err := publishCall(pubCtx, conn, id, echoCall(id, batch, sleepMS)); err != nil {
				if ctx.Err() != nil || pubCtx.Err() == nil {
					t.Error(err) // not when stopped by the cleanup
				}
				return
			}
			time.Sleep(every) // a steady flow, not a burst
		}
	}
	wg.Go(func() { publish(conn, ids[:nMajority], 10*time.Millisecond) })
	wg.Go(func() { publish(minConn, ids[nMajority:], 60*time.Millisecond) })
	stopWatch := obs.watchLeaders(t)

	// The fault comes once calls flow and some are answered.
	answered := func() int {
		tl, err := tryCount(ctxT(t, 30*time.Second), conn, batch)
		if err != nil {
			return -1
		}
		return len(tl.results)
	}
	require.Eventually(t, func() bool { return answered() >= nMajority/4 }, time.Minute, 50*time.Millisecond)
	before := answered()
	faultAt := time.Now()
	inject(c, isolated)
	// Held until the majority has new leaders for the calls stream, the
	// pool consumer and the results stream, and has answered calls since.
	deadline := time.Now().Add(90 * time.Second)
	for !obs.majorityLeads(c.name(isolated)) || answered() < before+20 {
		if time.Now().After(deadline) {
			clear(c, isolated)
			t.Fatalf("no new leaders or no answers on the majority side within 90s of the fault (answered %d before)", before)
		}
		time.Sleep(100 * time.Millisecond)
	}
	healAt := time.Now()
	clear(c, isolated)

	wg.Wait()
	waitResults(t, conn, batch, ids, 2*time.Minute)
	answeredAll := time.Since(healAt)
	c.waitReplicasAgree(t, len(ids), time.Minute)
	recovered := time.Since(healAt)
	// Counted once every replica holds the same: a read served by a
	// replica still catching up would miss what the others hold.
	var (
		tl   tally
		dead []*bus.Msg
		gap  time.Duration
	)
	retryRead(t, func(ctx context.Context) (err error) {
		if tl, err = tryCount(ctx, conn, batch); err != nil {
			return err
		}
		if dead, err = conn.Messages(ctx, "CAPSTAN_DLQ", "capstan.dlq.>"); err != nil {
			return err
		}
		gap, err = longestGap(ctx, conn, batch)
		return err
	})
	changes := stopWatch()
	// What each worker saw: results the ledger refused (another run of the
	// call stored its result first), and results it had to publish again.
	refused, republished := map[string]int{}, map[string]int{}
	for id, l := range logs {
		refused[id] = strings.Count(l.String(), "another run of the call stored its result first")
		republished[id] = strings.Count(l.String(), "cannot publish result; retrying")
	}

	lost, dup := requireExactlyOnce(t, tl, ids)
	executions, rerun, redelivered, byIsolated := 0, 0, 0, 0
	for _, id := range ids {
		r := tl.results[id][0]
		require.True(t, r.OK, "%s: %s", id, r.Error)
		executions += tl.executions[id]
		if tl.executions[id] > 1 {
			rerun++
		}
		if r.Deliveries > 1 {
			redelivered++
		}
		if r.WorkerID == batch+"-iso" {
			byIsolated++
		}
	}
	require.Empty(t, dead, "dead letters")
	t.Logf("calls=%d answered=%d lost=%d duplicated=%d dlq=%d executions=%d rerun=%d redelivered=%d answered_by_isolated_worker=%d "+
		"fault_held=%s longest_gap_between_results=%s all_answered_after_heal=%s replicas_equal_after_heal=%s leader_changes=%v ledger_refusals=%v publish_retries=%v setup=%s total=%s",
		len(ids), len(tl.results), lost, dup, len(dead), executions, rerun, redelivered, byIsolated,
		healAt.Sub(faultAt).Round(100*time.Millisecond), gap.Round(100*time.Millisecond), answeredAll.Round(100*time.Millisecond), recovered.Round(100*time.Millisecond),
		changes, refused, republished, setup.Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
}

// connectRetry connects with cfg (ensuring the topology) until it works or
// a minute has passed: a new cluster may still be electing its leaders.
func connectRetry(t *testing.T, cfg bus.Config) *bus.Conn {
	t.Helper()
	var conn *bus.Conn
	retryFor(t, time.Minute, 200*time.Millisecond, "connect to "+cfg.URL, func() (err error) {
		conn, err = bus.Connect(ctxT(t, 30*time.Second), cfg)
		return err
	})
	t.Cleanup(conn.Close)
	return conn
}

// retryRead runs read until it succeeds, for a minute: right after a heal
// the cluster may still be settling its leaders, and a read that finds none
// fails ("no responders").
func retryRead(t *testing.T, read func(context.Context) error) {
	t.Helper()
	retryFor(t, time.Minute, 200*time.Millisecond, "read after the heal", func() error { return read(ctxT(t, 30*time.Second)) })
}

// longestGap is the longest time between two consecutive results of batch
// as the results stream stored them.
func longestGap(ctx context.Context, conn *bus.Conn, batch string) (time.Duration, error) {
	msgs, err := conn.Messages(ctx, "CAPSTAN_RESULTS", "capstan.result.default."+batch+".>")
	if err != nil {
		return 0, err
	}
	var gap time.Duration
	for i := 1; i < len(msgs); i++ {
		gap = max(gap, msgs[i].Time.Sub(msgs[i-1].Time))
	}
	return gap, nil
}

// waitReplicasAgree waits until every node stores the results stream with
// exactly n results, the same progress stream, and an empty calls stream:
// reads after it see the same whichever replica answers.
func (c *procCluster) waitReplicasAgree(t *testing.T, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last, slow []string
	for {
		last = last[:0]
		agree := true
		var want map[string]streamState
		for i := range c.nodes {
			st, err := c.localStreams(ctxT(t, 10*time.Second), i)
			if err != nil {
				agree = false
				last = append(last, fmt.Sprintf("%s: %v", c.name(i), err))
				continue
			}
			res, prog, calls := st["CAPSTAN_RESULTS"], st["CAPSTAN_PROGRESS"], st["CAPSTAN_CALLS"]
			last = append(last, fmt.Sprintf("%s: results %+v, progress %+v, calls %+v", c.name(i), res, prog, calls))
			if want == nil {
				want = st
			}
			agree = agree && res.Messages == uint64(n) && res == want["CAPSTAN_RESULTS"] &&
				prog == want["CAPSTAN_PROGRESS"] && calls.Messages == 0
		}
		if agree {
			if waited := d - time.Until(deadline); waited > 10*time.Second {
				t.Logf("replicas agreed after %s; before that:\n%s", waited.Round(100*time.Millisecond), strings.Join(slow, "\n"))
			}
			return
		}
		if len(slow) < 40 {
			slow = append(slow, time.Now().Format("15:04:05.0")+" "+strings.Join(last, " | "))
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas differ after %s (want %d results on each):\n%s", d, n, strings.Join(last, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// observer reads and moves the leaders of streams and of the pool's
// consumer through its own connection.
type observer struct {
	t  *testing.T
	nc *nats.Conn
	js jetstream.JetStream
}

func newObserver(t *testing.T, url string) *observer {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return &observer{t: t, nc: nc, js: js}
}

// groups are the raft groups on the path of every call, watched by name.
var groups = []string{"CAPSTAN_CALLS", "CAPSTAN_CALLS/" + protocol.PersonalityConsumer(protocol.DefaultPool, "default"), "CAPSTAN_RESULTS"}

// leader returns the leader of group (a stream, or stream/consumer) as
// the node that answers says, "" when none answers.
func (o *observer) leader(group string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	stream, cons, isCons := strings.Cut(group, "/")
	s, err := o.js.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	var ci *jetstream.ClusterInfo
	if isCons {
		c, err := s.Consumer(ctx, cons)
		if err != nil {
			return ""
		}
		ci = c.CachedInfo().Cluster
	} else {
		ci = s.CachedInfo().Cluster
	}
	if ci == nil {
		return ""
	}
	return ci.Leader
}

// moveLeaders makes node the leader of every stream and of the pool's
// consumer, asking the current leader of each to step down in its favour.
func (o *observer) moveLeaders(t *testing.T, node string) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	var all []string
	names := o.js.StreamNames(ctx)
	for n := range names.Name() {
		all = append(all, n)
	}
	require.NoError(t, names.Err())
	slices.Sort(all)
	// The calls consumer of the personality the load uses (one per
	// personality: scheduling).
	all = append(all, groups[1])
	for _, g := range all {
		o.moveLeader(t, g, node)
	}
}

// moveLeader makes node the leader of group (a stream, or stream/consumer).
func (o *observer) moveLeader(t *testing.T, group, node string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for o.leader(group) != node {
		require.False(t, time.Now().After(deadline), "%s did not become the leader of %s", node, group)
		api := "$JS.API.STREAM.LEADER.STEPDOWN." + group
		if stream, cons, ok := strings.Cut(group, "/"); ok {
			api = "$JS.API.CONSUMER.LEADER.STEPDOWN." + stream + "." + cons
		}
		if err := o.stepDown(api, node); err != nil {
			t.Logf("step down %s: %v", group, err)
		}
		until := time.Now().Add(3 * time.Second)
		for o.leader(group) != node && time.Now().Before(until) {
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// stepDown asks a raft group's leader to step down in favour of node.
func (o *observer) stepDown(api, node string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := o.nc.RequestWithContext(ctx, api, fmt.Appendf(nil, `{"placement":{"preferred":%q}}`, node))
	if err != nil {
		return err
	}
	var resp struct {
		Success bool `json:"success"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return err
	}
	if !resp.Success {
		if resp.Error != nil {
			return fmt.Errorf("%s", resp.Error.Description)
		}
		return fmt.Errorf("no success: %s", m.Data)
	}
	return nil
}

// majorityLeads reports whether every watched group has a leader other
// than node, as seen from the observer's side.
func (o *observer) majorityLeads(node string) bool {
	for _, g := range groups {
		if l := o.leader(g); l == "" || l == node {
			return false
		}
	}
	return true
}

// watchLeaders polls the watched groups' leaders until the returned
// function is called (or the test ends), which returns how many times each
// changed.
func (o *observer) watchLeaders(t *testing.T) func() map[string]int {
	stop := make(chan struct{})
	done := make(chan map[string]int, 1)
	go func() {
		changes, seen := map[string]int{}, map[string]string{}
		for {
			for _, g := range groups {
				l := o.leader(g)
				if l == "" {
					continue
				}
				if prev, ok := seen[g]; ok && prev != l {
					changes[g]++
				}
				seen[g] = l
			}
			select {
			case <-stop:
				done <- changes
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	var changes map[string]int
	finish := func() map[string]int {
		once.Do(func() { close(stop); changes = <-done })
		return changes
	}
	t.Cleanup(func() { finish() })
	return finish
}

// TestPartitionLedgerReadIsNotStale: the worker reads the results stream
// (bus.Conn.LastMsg) to learn whether a call has been answered. A replica
// cut off from the stream's leader must not answer that read with "no
// result" for a result the majority stored meanwhile: a worker connected to
// it would run the call again (and, for a tool of exclusive side effects,
// twice). The read may fail while no leader is reachable; once healed it
// finds the result.
func TestPartitionLedgerReadIsNotStale(t *testing.T) {
	t.Parallel()
	const isolated = 0
	c := newProcCluster(t, 3)
	conn := connectRetry(t, bus.Config{URL: c.url(1, 2), Replicas: 3, Name: t.Name() + "-majority"})
	isoConn := connectRetry(t, bus.Config{URL: c.url(isolated), Replicas: 3, Name: t.Name() + "-isolated"})
	obs := newObserver(t, c.url(1, 2))
	obs.moveLeader(t, "CAPSTAN_RESULTS", c.name(1)) // the isolated node is a follower

	store := func(subject string) {
		t.Helper()
		retryFor(t, time.Minute, 100*time.Millisecond, "store "+subject, func() error {
			return conn.PublishFirst(ctxT(t, 5*time.Second), subject, []byte(`{}`), nil)
		})
	}
	before, after := "capstan.result.default.ledger.before", "capstan.result.default.ledger.after"
	store(before)
	require.Eventually(t, func() bool {
		st, err := c.localStreams(ctxT(t, 10*time.Second), isolated)
		return err == nil && st["CAPSTAN_RESULTS"].Messages == 1
	}, time.Minute, 50*time.Millisecond, "the isolated node's replica holds the first result")

	c.isolate(isolated)
	store(after) // the majority stores it
	for range 5 {
		_, err := isoConn.LastMsg(ctxT(t, 10*time.Second), "CAPSTAN_RESULTS", after)
		require.NotErrorIs(t, err, bus.ErrNotFound, "the isolated replica answered that no result is stored")
	}
	c.heal()
	require.Eventually(t, func() bool {
		m, err := isoConn.LastMsg(ctxT(t, 10*time.Second), "CAPSTAN_RESULTS", after)
		return err == nil && m.Subject == after
	}, time.Minute, 100*time.Millisecond, "the result is read once healed")
}
