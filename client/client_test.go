package client_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	_, err := client.New(ctxT(t), client.Config{})
	require.ErrorContains(t, err, "Config.NATSURL must be set")
	_, err = client.New(ctxT(t), client.Config{NATSURL: "nats://127.0.0.1:1", Prefix: "a.b"})
	require.ErrorContains(t, err, `Config.Prefix "a.b" must match`)
}

func TestSubmitFillsCallIDAndPublishesToDefaultPool(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	c := newClient(t, url, "")
	call := client.Call{Tool: "mystery", SessionID: "s"}
	require.NoError(t, c.Submit(ctxT(t), &call))
	require.True(t, protocol.ValidToken(call.CallID), "call_id %q", call.CallID)

	m, err := bustest.Conn(t, url, "").LastMsg(ctxT(t), "CAPSTAN_CALLS", "capstan.call.default.default.mystery")
	require.NoError(t, err)
	require.Equal(t, "2", m.Header.Get(protocol.HeaderProtocol))
	require.Equal(t, call.CallID, m.Header.Get(protocol.HeaderMsgID))
	got, err := protocol.DecodeCall(m.Data)
	require.NoError(t, err)
	require.Equal(t, call.CallID, got.CallID)
	require.JSONEq(t, `{}`, string(got.Args))
}

func TestSubmitRefusesUnknownToolOnlyWhenDefaultPoolIsKnown(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	cases := []struct {
		name    string
		catalog []protocol.CatalogEntry
		refused bool
	}{
		{name: "empty catalog", refused: false},
		{name: "only another pool", catalog: []protocol.CatalogEntry{{Name: "render", Pool: "gpu"}}, refused: false},
		{name: "default pool entry", catalog: []protocol.CatalogEntry{{Name: "echo", Pool: "default"}}, refused: true},
		{name: "entry without pool counts as default", catalog: []protocol.CatalogEntry{{Name: "echo"}}, refused: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := "p" + string(rune('a'+i))
			admin := bustest.Conn(t, url, prefix)
			putCatalog(t, admin, tc.catalog...)
			c := newClient(t, url, prefix)

			call := client.Call{CallID: "c1", Tool: "mystery", SessionID: "s"}
			err := c.Submit(ctxT(t), &call)
			_, lastErr := admin.LastMsg(ctxT(t), admin.Names().CallsStream(), prefix+".call.>")
			if !tc.refused {
				require.NoError(t, err)
				require.NoError(t, lastErr)
				_, err = admin.LastMsg(ctxT(t), admin.Names().CallsStream(), prefix+".call.default.default.mystery")
				require.NoError(t, err)
				return
			}
			var re *client.RefusedError
			require.ErrorAs(t, err, &re)
			require.Equal(t, protocol.CodeNotAvailable, re.Result.Code)
			require.Equal(t, "Unknown tool: mystery", re.Result.Error)
			require.Equal(t, "c1", re.Result.CallID)
			require.Equal(t, "c1", re.Result.BatchID)
			require.Equal(t, "mystery", re.Result.Tool)
			require.ErrorIs(t, lastErr, bus.ErrNotFound, "a refused call is never published")
		})
	}
}

func TestSubmitPublishesKnownToolToItsPool(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	admin := bustest.Conn(t, url, "")
	putCatalog(t, admin, protocol.CatalogEntry{Name: "render", Pool: "gpu"}, protocol.CatalogEntry{Name: "echo", Pool: "default"})
	gpu := startResponder(t, url, "", "gpu")
	c := newClient(t, url, "")

	call := client.Call{Tool: "render", SessionID: "s", Args: json.RawMessage(`{"text":"drawn"}`)}
	require.NoError(t, c.Submit(ctxT(t), &call))
	r, err := c.Await(ctxT(t), "", call.CallID)
	require.NoError(t, err)
	require.True(t, r.OK)
	require.Equal(t, "drawn", r.Value)
	_, subject, n := gpu.call(call.CallID)
	require.Equal(t, "capstan.call.gpu.default.render", subject)
	require.Equal(t, 1, n)
}

func TestSubmitRefusesInvalidCalls(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	c := newClient(t, url, "")
	big := `{"text":"` + strings.Repeat("x", protocol.MaxCallBytes) + `"}`
	cases := []struct {
		name string
		call client.Call
		want string
	}{
		{name: "no session", call: client.Call{Tool: "echo"}, want: `invalid call: field "session_id" must not be empty`},
		{name: "bad call_id", call: client.Call{CallID: "a b", Tool: "echo", SessionID: "s"}, want: `invalid call: field "call_id" must match`},
		{name: "bad tool", call: client.Call{Tool: "a.b", SessionID: "s"}, want: `invalid call: field "tool" must match ^[A-Za-z0-9_-]{1,128}$`},
		{name: "no tool", call: client.Call{SessionID: "s"}, want: `invalid call: field "tool" must not be empty`},
		{name: "bad batch", call: client.Call{Tool: "echo", BatchID: "b*", SessionID: "s"}, want: `field "batch_id" must match`},
		{name: "bad personality", call: client.Call{Tool: "echo", PersonalityID: "p>", SessionID: "s"}, want: `field "personality_id" must match`},
		{name: "args not an object", call: client.Call{Tool: "echo", SessionID: "s", Args: json.RawMessage(`[1]`)}, want: `field "args" must be a JSON object`},
		{name: "too big", call: client.Call{Tool: "echo", SessionID: "s", Args: json.RawMessage(big)}, want: "more than the 1 MiB limit"},
		{name: "relative working dir", call: client.Call{Tool: "echo", SessionID: "s", WorkingDir: "rel"}, want: `field "working_dir" must be an absolute path`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := c.Submit(ctxT(t), &tc.call)
			var re *client.RefusedError
			require.ErrorAs(t, err, &re)
			require.Equal(t, protocol.CodeInputInvalid, re.Result.Code)
			require.Contains(t, re.Result.Error, tc.want)
			require.False(t, re.Result.OK)
		})
	}
	n, err := bustest.Conn(t, url, "").StreamMsgs(ctxT(t), "CAPSTAN_CALLS")
	require.NoError(t, err)
	require.Zero(t, n, "nothing refused is published")
}

func TestAwaitAndResult(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	admin := bustest.Conn(t, url, "")
	c := newClient(t, url, "")

	// A result published before Await is found.
	stored := protocol.Result{CallID: "c1", BatchID: "b1", Tool: "echo", OK: true, Value: "early"}
	data, err := json.Marshal(stored)
	require.NoError(t, err)
	_, err = admin.Publish(ctxT(t), "capstan.result.default.b1.c1", data, nil, protocol.ResultMsgID("c1"))
	require.NoError(t, err)
	r, err := c.Await(ctxT(t), "b1", "c1")
	require.NoError(t, err)
	require.Equal(t, "early", r.Value)

	r, found, err := c.Result(ctxT(t), "c1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "b1", r.BatchID)

	_, found, err = c.Result(ctxT(t), "nope")
	require.NoError(t, err)
	require.False(t, found)

	// A result that never comes ends with ctx.
	ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
	defer cancel()
	_, err = c.Await(ctx, "", "never")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	_, err = c.Await(ctxT(t), "", "bad.id")
	require.ErrorContains(t, err, "call_id")
}

func TestExecuteParallelThousandCallsInInputOrder(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	resp := startResponder(t, url, "", "default")
	c := newClient(t, url, "")

	const n = 1000
	calls := make([]client.Call, n)
	for i := range calls {
		calls[i] = client.Call{Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"call-` + strconv.Itoa(i) + `"}`)}
	}
	// Wait for every result, bounded only by a generous context: a slow
	// shared machine under -race must not turn into missing results.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	turn := client.Turn{BatchID: "turn1", Wait: -1}
	results := c.ExecuteParallel(ctx, turn, calls)
	require.Len(t, results, n)
	seen := make(map[string]bool)
	for i, r := range results {
		require.True(t, r.OK, "call %d: %s: %s", i, r.Code, r.Error)
		require.Equal(t, "call-"+strconv.Itoa(i), r.Value)
		require.Equal(t, "turn1", r.BatchID)
		require.False(t, seen[r.CallID], "call_id %s twice", r.CallID)
		seen[r.CallID] = true
		got, _, count := resp.call(r.CallID)
		require.Equal(t, 1, count, "call %d delivered once", i)
		require.Equal(t, int64(80000/n), got.ResultBudgetChars)
	}
	require.Empty(t, calls[0].CallID, "the caller's calls are not changed")
}

func TestExecuteParallelSplitsBudgetCountingRefusedCalls(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	putCatalog(t, bustest.Conn(t, url, ""), protocol.CatalogEntry{Name: "echo", Pool: "default"})
	resp := startResponder(t, url, "", "default")
	c := newClient(t, url, "")

	calls := []client.Call{
		{CallID: "a", Tool: "echo", SessionID: "s"},
		{CallID: "b", Tool: "echo", SessionID: "s", ResultBudgetChars: 500},
		{CallID: "c", Tool: "mystery", SessionID: "s"},
	}
	results := c.ExecuteParallel(ctxT(t), client.Turn{BatchID: "t1"}, calls)
	require.True(t, results[0].OK)
	require.True(t, results[1].OK)
	require.Equal(t, client.Result{CallID: "c", BatchID: "t1", Tool: "mystery", Code: protocol.CodeNotAvailable, Error: "Unknown tool: mystery"}, results[2])

	a, _, _ := resp.call("a")
	require.Equal(t, int64(26666), a.ResultBudgetChars)
	require.Equal(t, "t1", a.BatchID)
	b, _, _ := resp.call("b")
	require.Equal(t, int64(500), b.ResultBudgetChars, "a call's own budget is kept")
}

func TestExecuteParallelMissingResult(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	startResponder(t, url, "", "default")
	c := newClient(t, url, "")

	calls := []client.Call{
		{CallID: "quick", Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"hi"}`)},
		{CallID: "lost", Tool: "never", SessionID: "s"},
	}
	start := time.Now()
	results := c.ExecuteParallel(ctxT(t), client.Turn{BatchID: "t", Wait: 500 * time.Millisecond}, calls)
	require.Less(t, time.Since(start), 10*time.Second)
	require.True(t, results[0].OK)
	require.Equal(t, "hi", results[0].Value)
	require.Equal(t, client.Result{CallID: "lost", BatchID: "t", Tool: "never", Code: protocol.CodeExecutionFailed,
		Error: "Tool result missing: no result before deadline"}, results[1])
}

func TestCollectIgnoresDuplicateResults(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	startResponder(t, url, "", "default")
	admin := bustest.Conn(t, url, "")
	c := newClient(t, url, "")

	var calls []client.Call
	for _, id := range []string{"d1", "d2", "e1"} {
		tool := "dup"
		if id == "e1" {
			tool = "echo"
		}
		calls = append(calls, client.Call{CallID: id, BatchID: "batch-" + id, Tool: tool, SessionID: "s"})
	}
	var mu sync.Mutex
	reported := make(map[int]int)
	results := c.Collect(ctxT(t), calls, 0, func(i int, r client.Result) {
		mu.Lock()
		reported[i]++
		mu.Unlock()
	})
	require.Equal(t, "first", results[0].Value)
	require.Equal(t, "first", results[1].Value)
	require.Equal(t, "ok", results[2].Value)
	require.Equal(t, map[int]int{0: 1, 1: 1, 2: 1}, reported)
	eventually(t, func() bool {
		n, err := admin.StreamMsgs(ctxT(t), "CAPSTAN_RESULTS")
		return err == nil && n == 5
	}, "both duplicates were really published")

	// Submitting the same calls again finds the stored results: the calls are
	// de-duplicated by call_id and no worker answers a second time.
	again := c.Collect(ctxT(t), calls, 0, nil)
	require.Equal(t, results, again)
}

func TestCollectFindsResubmittedCallInItsFirstBatch(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	resp := startResponder(t, url, "", "default")
	c := newClient(t, url, "")

	first := c.Collect(ctxT(t), []client.Call{{CallID: "r1", BatchID: "run1", Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"once"}`)}}, 0, nil)
	require.Equal(t, "once", first[0].Value)
	// A re-run of the same call_id in a new batch is de-duplicated by
	// JetStream, so no worker answers in run2: the first result is returned.
	again := c.Collect(ctxT(t), []client.Call{{CallID: "r1", BatchID: "run2", Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"twice"}`)}}, 5*time.Second, nil)
	require.Equal(t, first, again)
	require.Equal(t, "run1", again[0].BatchID)
	_, _, n := resp.call("r1")
	require.Equal(t, 1, n)
}

func TestCancelPublishesOnTheCancelSubject(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	admin := bustest.Conn(t, url, "")
	c := newClient(t, url, "")

	type got struct {
		subject string
		proto   string
		body    string
	}
	var mu sync.Mutex
	var msgs []got
	sub, err := admin.Subscribe("capstan.cancel.>", "", func(subject string, hdr bus.Header, data []byte) {
		mu.Lock()
		msgs = append(msgs, got{subject, hdr.Get(protocol.HeaderProtocol), string(data)})
		mu.Unlock()
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Stop() })
	require.NoError(t, admin.Flush(ctxT(t)))

	require.NoError(t, c.Cancel(ctxT(t), "c1", "user pressed stop"))
	require.NoError(t, c.Cancel(ctxT(t), "c2", ""))
	require.ErrorContains(t, c.Cancel(ctxT(t), "c.*", ""), "call_id")
	eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(msgs) == 2 }, "two cancel requests")
	require.Equal(t, got{"capstan.cancel.default.c1", "2", `{"reason":"user pressed stop"}`}, msgs[0])
	require.Equal(t, got{"capstan.cancel.default.c2", "2", ""}, msgs[1])
}

func TestProgressFiltersByAudience(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	admin := bustest.Conn(t, url, "")
	c := newClient(t, url, "")

	publish := func(a protocol.Audience, batch, call string, seq int64) {
		p := protocol.Progress{Type: protocol.ProgressType, CallID: call, BatchID: batch, ToolName: "echo", Message: string(a), Audience: a, Seq: seq, Time: time.Now()}
		data, err := json.Marshal(p)
		require.NoError(t, err)
		subject, err := admin.Names().ProgressSubject(a, "default", batch, call)
		require.NoError(t, err)
		_, err = admin.Publish(ctxT(t), subject, data, nil, "")
		require.NoError(t, err)
	}
	type sink struct {
		mu  sync.Mutex
		got []protocol.Progress
	}
	subscribe := func(a protocol.Audience, batch string, fromStart bool) *sink {
		s := &sink{}
		stop, err := c.Progress(ctxT(t), a, batch, fromStart, func(p client.Progress) {
			s.mu.Lock()
			s.got = append(s.got, p)
			s.mu.Unlock()
		})
		require.NoError(t, err)
		t.Cleanup(stop)
		return s
	}
	count := func(s *sink) int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.got) }

	publish(protocol.AudienceInternal, "b1", "c1", 1)
	publish(protocol.AudienceUser, "b1", "c1", 2)
	user := subscribe(protocol.AudienceUser, "", true)
	all := subscribe("", "", true)
	b2 := subscribe("", "b2", false)
	publish(protocol.AudienceInternal, "b2", "c2", 1)
	publish(protocol.AudienceDashboard, "b2", "c2", 2)
	publish(protocol.AudienceUser, "b2", "c2", 3)

	eventually(t, func() bool { return count(all) == 5 && count(user) == 2 && count(b2) == 3 }, "every event delivered")
	for _, p := range user.got {
		require.Equal(t, protocol.AudienceUser, p.Audience)
	}
	for _, p := range b2.got {
		require.Equal(t, "b2", p.BatchID)
	}
	require.Equal(t, []int64{1, 2, 1, 2, 3}, []int64{all.got[0].Seq, all.got[1].Seq, all.got[2].Seq, all.got[3].Seq, all.got[4].Seq})

	_, err := c.Progress(ctxT(t), "everyone", "", false, func(client.Progress) {})
	require.ErrorContains(t, err, "must be internal, user or dashboard")
}

func TestToolsSortedAndWatched(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	admin := bustest.Conn(t, url, "")
	putCatalog(t, admin, protocol.CatalogEntry{Name: "zeta", Pool: "default"}, protocol.CatalogEntry{Name: "alpha", Pool: "gpu"})
	c := newClient(t, url, "")

	tools, err := c.Tools(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, []string{"alpha", "zeta"}, names(tools))

	putCatalog(t, admin, protocol.CatalogEntry{Name: "mid", Pool: "default"})
	kv, err := admin.KV(ctxT(t), bus.Tools)
	require.NoError(t, err)
	require.NoError(t, kv.Delete(ctxT(t), "zeta"))
	eventually(t, func() bool {
		tools, err := c.Tools(ctxT(t))
		return err == nil && strings.Join(names(tools), ",") == "alpha,mid"
	}, "the catalog watch sees puts and deletes")
}

func TestCatalogChangedIsClosedAtTheNextChange(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	admin := bustest.Conn(t, url, "")
	c := newClient(t, url, "")
	view, err := c.WithPersonality("other")
	require.NoError(t, err)

	changed := c.CatalogChanged()
	require.Equal(t, changed, view.CatalogChanged(), "views share the catalog")
	select {
	case <-changed:
		t.Fatal("closed before any change")
	default:
	}
	putCatalog(t, admin, protocol.CatalogEntry{Name: "late", Pool: "default"})
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("not closed after a put")
	}
	tools, err := c.Tools(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, []string{"late"}, names(tools), "the change is visible once the channel is closed")

	next := c.CatalogChanged()
	require.NotEqual(t, changed, next, "a new channel for the next change")
	kv, err := admin.KV(ctxT(t), bus.Tools)
	require.NoError(t, err)
	require.NoError(t, kv.Delete(ctxT(t), "late"))
	select {
	case <-next:
	case <-time.After(10 * time.Second):
		t.Fatal("not closed after a delete")
	}
	tools, err = c.Tools(ctxT(t))
	require.NoError(t, err)
	require.Empty(t, tools)
}

func TestClosedClientNeverFailsAsAWhole(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	c := newClient(t, url, "")
	c.Close()
	c.Close() // idempotent
	results := c.ExecuteParallel(ctxT(t), client.Turn{}, []client.Call{{CallID: "x", Tool: "echo", SessionID: "s"}})
	require.Len(t, results, 1)
	require.Equal(t, protocol.CodeExecutionFailed, results[0].Code)
	require.Equal(t, "x", results[0].CallID)
	require.NotEmpty(t, results[0].Error)
}

func names(es []client.CatalogEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name
	}
	return out
}

func TestCollectReturnsStoredResultOfSuppliedCallID(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	conn := bustest.Conn(t, url, "")
	// A result from an earlier run, in another batch; no worker is running,
	// so only the stored result can answer.
	stored, err := json.Marshal(protocol.Result{CallID: "fixed", BatchID: "old", Tool: "echo", OK: true, Value: "earlier"})
	require.NoError(t, err)
	_, err = conn.Publish(ctxT(t), "capstan.result.default.old.fixed", stored, nil, "")
	require.NoError(t, err)
	c := newClient(t, url, "")
	res := c.Collect(ctxT(t), []client.Call{{CallID: "fixed", BatchID: "new", Tool: "echo", SessionID: "s", Args: json.RawMessage(`{}`)}}, 5*time.Second, nil)
	require.Equal(t, "earlier", res[0].Value)
	require.Equal(t, "old", res[0].BatchID)
	n, err := conn.StreamMsgs(ctxT(t), "CAPSTAN_CALLS")
	require.NoError(t, err)
	require.Zero(t, n, "an answered call_id is not published again")
}
