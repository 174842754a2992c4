package client_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// startWorker runs a real worker with the built-in tools and a permissive
// default personality until the test ends.
func startWorker(t testing.TB, url string) {
	t.Helper()
	conn := bustest.Conn(t, url, "")
	kv, err := conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	_, err = kv.Put(ctxT(t), "default", []byte("id: default\n"))
	require.NoError(t, err)
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: bustest.Creds(url), WorkerID: "e2e", Logger: quietLog()}, builtin.All()...)
	require.NoError(t, err)
	workertest.Run(t, w, nil)
}

func TestExecuteParallelThousandCallsThroughARealWorker(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	startWorker(t, url)
	c := newClient(t, url, "")
	const n = 1000
	calls := make([]client.Call, n)
	for i := range calls {
		calls[i] = client.Call{Tool: "echo", SessionID: "s", Args: json.RawMessage(fmt.Sprintf(`{"text":"call %d"}`, i))}
	}
	results := c.ExecuteParallel(ctxT(t), client.Turn{BatchID: "big", Wait: 2 * time.Minute}, calls)
	require.Len(t, results, n)
	seen := map[string]bool{}
	for i, r := range results {
		require.True(t, r.OK, "call %d: %s %s", i, r.Code, r.Error)
		require.Equal(t, fmt.Sprintf("call %d", i), r.Value, "results come back in input order")
		require.Equal(t, "big", r.BatchID)
		require.False(t, seen[r.CallID], "call ids are unique")
		seen[r.CallID] = true
	}
	// Every call answered exactly once: the batch holds exactly n results.
	conn := bustest.Conn(t, url, "")
	var mu sync.Mutex
	count := 0
	doneCh := make(chan struct{})
	stop, err := conn.Tail(ctxT(t), "CAPSTAN_RESULTS", []string{"capstan.result.default.big.>", "capstan.result.end.end.marker"}, bus.FromStart, func(m *bus.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if m.Subject == "capstan.result.end.end.marker" {
			close(doneCh)
			return
		}
		count++
	})
	require.NoError(t, err)
	defer stop()
	require.Eventually(t, func() bool {
		m, err := conn.StreamMsgs(ctxT(t), "CAPSTAN_CALLS")
		return err == nil && m == 0
	}, time.Minute, 20*time.Millisecond)
	_, err = conn.Publish(ctxT(t), "capstan.result.end.end.marker", []byte("x"), nil, "")
	require.NoError(t, err)
	<-doneCh
	mu.Lock()
	require.Equal(t, n, count)
	mu.Unlock()
}

func TestProgressByAudienceThroughARealWorker(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	startWorker(t, url)
	c := newClient(t, url, "")
	var mu sync.Mutex
	var user, all []client.Progress
	stopUser, err := c.Progress(ctxT(t), protocol.AudienceUser, "pb", true, func(p client.Progress) { mu.Lock(); user = append(user, p); mu.Unlock() })
	require.NoError(t, err)
	defer stopUser()
	stopAll, err := c.Progress(ctxT(t), "", "pb", true, func(p client.Progress) { mu.Lock(); all = append(all, p); mu.Unlock() })
	require.NoError(t, err)
	defer stopAll()
	res := c.ExecuteParallel(ctxT(t), client.Turn{BatchID: "pb"}, []client.Call{{Tool: "echo", SessionID: "s",
		Args: json.RawMessage(`{"text":"x","progress":[{"message":"for you","audience":"user"},{"message":"for us"}]}`)}})
	require.True(t, res[0].OK)
	// The two subscriptions are separate consumers: wait for both.
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(all) == 2 && len(user) > 0 }, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, user, 1, "a user subscriber never receives internal events")
	require.Equal(t, "for you", user[0].Message)
	require.Equal(t, protocol.AudienceInternal, all[1].Audience, "internal is the default audience")
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
