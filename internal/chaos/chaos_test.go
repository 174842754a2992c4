package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// TestKillMidCall: SIGKILL a worker binary while it runs 20 calls, with a
// second worker binary running. Every call gets exactly one result, from the
// second worker, on the second delivery.
func TestKillMidCall(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	conn := bustest.Conn(t, url, "")
	putDefaultPersonality(t, conn)
	a := startProc(t, url, "kill-a")

	const n = 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("kill-%02d", i)
		require.NoError(t, publishCall(ctxT(t, time.Minute), conn, ids[i], echoCall(ids[i], "kill", 2000)))
	}
	// Every call has started on the first worker.
	require.Eventually(t, func() bool { return len(count(t, conn, "kill").executions) == n },
		time.Minute, 50*time.Millisecond)
	startProc(t, url, "kill-b")
	a.kill(t)

	tl := waitResults(t, conn, "kill", ids, 2*time.Minute)
	lost, dup := requireExactlyOnce(t, tl, ids)
	for _, id := range ids {
		r := tl.results[id][0]
		require.True(t, r.OK, "%s: %s", id, r.Error)
		require.Equal(t, "kill-b", r.WorkerID)
		require.Equal(t, 2, r.Deliveries)
		require.Equal(t, 2, tl.executions[id], "%s: one execution cut short by the kill, one complete", id)
	}
	t.Logf("calls=%d kills=1 lost=%d duplicated=%d", n, lost, dup)
}

// TestKillAfterResultBeforeAck: the first worker binary kills itself with
// SIGKILL right after a result is stored and before it records completion or
// acks the call. The redelivered call is acknowledged from the stored result
// and runs nowhere again.
func TestKillAfterResultBeforeAck(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	conn := bustest.Conn(t, url, "")
	putDefaultPersonality(t, conn)
	a := startProc(t, url, "ack-a", "CAPSTAN_FAULT=after-result-publish", "CAPSTAN_CONCURRENCY=1")

	const n = 10
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("ack-%02d", i)
		require.NoError(t, publishCall(ctxT(t, time.Minute), conn, ids[i], echoCall(ids[i], "ack", 0)))
	}
	a.waitExit(t, time.Minute)
	startProc(t, url, "ack-b")

	tl := waitResults(t, conn, "ack", ids, 2*time.Minute)
	lost, dup := requireExactlyOnce(t, tl, ids)
	byA := 0
	for _, id := range ids {
		require.True(t, tl.results[id][0].OK)
		require.Equal(t, 1, tl.executions[id], "%s ran more than once", id)
		if tl.results[id][0].WorkerID == "ack-a" {
			byA++
		}
	}
	require.Equal(t, 1, byA, "the first worker died after its first result")
	t.Logf("calls=%d kills=1 (after result, before ack) lost=%d duplicated=%d second_executions=0", n, lost, dup)
}

// TestNATSRestartWithCallsInFlight restarts the NATS server on the same store
// while 1,000 calls are queued or running on two workers.
func TestNATSRestartWithCallsInFlight(t *testing.T) {
	t.Parallel()
	srv := bustest.NewRestartable(t)
	conn := bustest.Conn(t, srv.URL(), "")
	putDefaultPersonality(t, conn)
	startWorker(t, worker.Config{NATSURL: srv.URL(), NATSCreds: bustest.Creds(srv.URL()), WorkerID: "restart-1", Concurrency: 32})
	startWorker(t, worker.Config{NATSURL: srv.URL(), NATSCreds: bustest.Creds(srv.URL()), WorkerID: "restart-2", Concurrency: 32})

	const n = 1000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("rs-%04d", i)
		require.NoError(t, publishCall(ctxT(t, time.Minute), conn, ids[i], echoCall(ids[i], "restart", rand.IntN(50))))
	}
	// Restart once a part of the batch is answered.
	require.Eventually(t, func() bool {
		return len(count(t, conn, "restart").results) >= n/5
	}, 2*time.Minute, 20*time.Millisecond)
	srv.Stop()
	srv.Start()

	tl := waitResults(t, conn, "restart", ids, 4*time.Minute)
	lost, dup := requireExactlyOnce(t, tl, ids)
	for _, id := range ids {
		require.True(t, tl.results[id][0].OK, "%s: %s", id, tl.results[id][0].Error)
	}
	t.Logf("calls=%d server_restarts=1 lost=%d duplicated=%d", n, lost, dup)
}

// TestClusterLosesTwoNodes runs calls through a 3-node JetStream cluster with
// R3 streams and buckets, stops one node, then a second (the cluster loses
// its quorum), then restarts both, while a publisher keeps submitting.
func TestClusterLosesTwoNodes(t *testing.T) {
	t.Parallel()
	cl := bustest.NewCluster(t, 3)
	ctx := ctxT(t, 5*time.Minute)
	conn, err := bus.Connect(ctx, bus.Config{URL: cl.URL(), Replicas: 3, Name: t.Name()})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	putDefaultPersonality(t, conn)
	startWorker(t, worker.Config{NATSURL: cl.URL(), WorkerID: "cluster-1", StreamReplicas: 3, Concurrency: 16})
	startWorker(t, worker.Config{NATSURL: cl.URL(), WorkerID: "cluster-2", StreamReplicas: 3, Concurrency: 16})

	const n = 300
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("cl-%03d", i)
	}
	published := make(chan int, n)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i, id := range ids {
			if err := publishCall(ctx, conn, id, echoCall(id, "cluster", 10)); err != nil {
				t.Error(err)
				return
			}
			published <- i
			time.Sleep(5 * time.Millisecond) // a steady flow, not a burst
		}
	})
	waitPublished := func(k int) {
		t.Helper()
		for {
			select {
			case i := <-published:
				if i+1 >= k {
					return
				}
			case <-ctx.Done():
				t.Fatalf("only part of the calls published before %d", k)
			}
		}
	}
	waitPublished(n / 4)
	cl.Stop(0)
	waitPublished(n / 2)
	cl.Stop(1) // quorum lost: publishing and answering stall
	stalled := time.NewTimer(2 * time.Second)
	select {
	case <-stalled.C:
	case <-ctx.Done():
	}
	cl.Start(0)
	cl.Start(1)
	cl.WaitReady(2 * time.Minute)
	wg.Wait()

	tl := waitResults(t, conn, "cluster", ids, 4*time.Minute)
	lost, dup := requireExactlyOnce(t, tl, ids)
	for _, id := range ids {
		require.True(t, tl.results[id][0].OK, "%s: %s", id, tl.results[id][0].Error)
	}
	t.Logf("calls=%d nodes_stopped=2 lost=%d duplicated=%d", n, lost, dup)
}

// TestPoisonCallCrashingWorkers: a call whose tool panics in a goroutine of
// its own (no recover can catch it) crashes the worker process on every
// delivery. Two worker binaries run under a supervisor that restarts them,
// as Kubernetes would. Calls answered before the poison arrives stay
// answered once; the poison call is dead-lettered after MaxDeliver
// deliveries with its abandonment result; the restarted workers answer the
// calls that come after it. (A tool that panics in its own call goroutine
// is recovered and answered execution_failed; tools.md. Calls in flight on
// a worker when it crashes are redelivered with it, which is why the
// healthy calls here do not overlap the poison.)
func TestPoisonCallCrashingWorkers(t *testing.T) {
	t.Parallel()
	const maxDeliver = 3
	url := bustest.Server(t)
	conn := bustest.Conn(t, url, "")
	putDefaultPersonality(t, conn)
	env := []string{"CAPSTAN_FAULT=panic-on-poison", fmt.Sprintf("CAPSTAN_MAX_DELIVER=%d", maxDeliver)}
	procs := []*proc{startProc(t, url, "poison-a", env...), startProc(t, url, "poison-b", env...)}

	publish := func(ids ...string) {
		for _, id := range ids {
			require.NoError(t, publishCall(ctxT(t, time.Minute), conn, id, echoCall(id, "poison", 0)))
		}
	}
	healthy := func(prefix string) []string {
		ids := make([]string, 10)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%02d", prefix, i)
		}
		return ids
	}
	crashes := 0
	// settle supervises (restarting every worker that crashed) until ids
	// are all answered and nothing is left unacknowledged.
	settle := func(ids []string) {
		deadline := time.Now().Add(3 * time.Minute)
		for {
			for i, p := range procs {
				select {
				case <-p.exited:
					require.Contains(t, p.logs.String(), "poison call: a tool panicked outside the worker's recover", "worker %d ended for another reason", i)
					crashes++
					procs[i] = startProc(t, url, fmt.Sprintf("poison-%c%d", 'a'+i, crashes), env...)
				default:
				}
			}
			tl, err := tryCount(ctxT(t, time.Minute), conn, "poison")
			require.NoError(t, err)
			left, err := conn.StreamMsgs(ctxT(t, time.Minute), "CAPSTAN_CALLS")
			require.NoError(t, err)
			if len(tl.results) == len(ids) && left == 0 {
				return
			}
			require.False(t, time.Now().After(deadline), "after 3 minutes: %d of %d answered, %d unacknowledged, %d crashes", len(tl.results), len(ids), left, crashes)
			time.Sleep(100 * time.Millisecond)
		}
	}

	before, after := healthy("before"), healthy("after")
	publish(before...)
	settle(before)
	publish("POISON")
	settle(append(slices.Clone(before), "POISON"))
	publish(after...)
	ids := append(append(slices.Clone(before), "POISON"), after...)
	settle(ids)

	tl := count(t, conn, "poison")
	lost, dup := requireExactlyOnce(t, tl, ids)
	r := tl.results["POISON"][0]
	require.False(t, r.OK)
	require.Equal(t, fmt.Sprintf("call abandoned after %d deliveries: no acknowledgement within 3s (worker lost or stalled)", maxDeliver), r.Error)
	require.Equal(t, maxDeliver, crashes, "one crash per delivery, no more")
	for _, id := range append(slices.Clone(before), after...) {
		require.True(t, tl.results[id][0].OK, "%s: %s", id, tl.results[id][0].Error)
		require.Equal(t, 1, tl.executions[id], "%s ran once", id)
	}
	dead, err := conn.Messages(ctxT(t, time.Minute), "CAPSTAN_DLQ", "capstan.dlq.echo")
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, fmt.Sprint(maxDeliver), dead[0].Header.Get("Capstan-Deliveries"))
	t.Logf("calls=%d crashes=%d lost=%d duplicated=%d dead_letters=%d", len(ids), crashes, lost, dup, len(dead))
}
