package console

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/stretchr/testify/require"
)

// queuedPool sets up pool "queued", which no live worker serves: a tool
// of its catalog, calls waiting there of personalities batch (a
// scheduling section), default (none), broken (an invalid document) and
// ghost (not stored), and one call of default run by the worker of pool
// default, whose audit record is the only start of the last minute.
func queuedPool(t *testing.T, e *env) {
	t.Helper()
	_, problems, err := e.client.PutPersonality(ctxT(t), []byte("id: batch\ntoolset: [echo]\nscheduling: {priority: 1, weight: 5, max_concurrency: 2}\n"))
	require.NoError(t, err)
	require.Empty(t, problems)
	docs, err := e.conn.KV(ctxT(t), bus.Personalities)
	require.NoError(t, err)
	_, err = docs.Put(ctxT(t), "broken", []byte("id: broken\nscheduling: {priority: 9}\n"))
	require.NoError(t, err)
	tools, err := e.conn.KV(ctxT(t), bus.Tools)
	require.NoError(t, err)
	_, err = tools.Put(ctxT(t), "batch_job", []byte(`{"name":"batch_job","pool":"queued","description":"A batch job.","schema":{},"toolset":"batch"}`))
	require.NoError(t, err)
	for personality, n := range map[string]int{"batch": 2, "default": 1, "broken": 1, "ghost": 1} {
		subject, err := e.conn.Names().CallSubject("queued", personality, "batch_job")
		require.NoError(t, err)
		for range n {
			_, err := e.conn.Publish(ctxT(t), subject, []byte(`{"call_id":"x","tool":"batch_job","args":{}}`), nil, "")
			require.NoError(t, err)
		}
	}
	call := client.Call{CallID: client.NewID(), Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"x"}`)}
	require.NoError(t, e.client.Submit(ctxT(t), &call))
	r, err := e.client.Await(ctxT(t), call.EffectiveBatchID(), call.CallID)
	require.NoError(t, err)
	require.True(t, r.OK, r.Error)
}

const brokenNote = "personality broken: invalid personality document: scheduling.priority: must be an integer from 1 to 5; its scheduling shows the defaults"

func TestQueueRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	queuedPool(t, e)
	want := []QueueRow{
		{Personality: "batch", Waiting: 2, Priority: 1, Weight: 5, MaxConcurrency: 2},
		{Personality: "broken", Waiting: 1, Priority: 3, Weight: 1},
		{Personality: "default", Waiting: 1, Priority: 3, Weight: 1, ShareLastMinute: 1},
		{Personality: "ghost", Waiting: 1, Priority: 3, Weight: 1},
	}
	var rows []QueueRow
	var notes []string
	// The worker writes its audit records in batches.
	eventually(t, 10*time.Second, "the call's start to be counted", func() bool {
		var err error
		rows, notes, err = Queue(ctxT(t), e.conn, e.client, "queued")
		require.NoError(t, err)
		return len(rows) == len(want) && rows[2].ShareLastMinute == 1
	})
	require.Equal(t, want, rows)
	require.Equal(t, []string{brokenNote}, notes)

	data, err := json.Marshal(rows[0])
	require.NoError(t, err)
	require.JSONEq(t, `{"personality":"batch","waiting":2,"running":0,"priority":1,"weight":5,"max_concurrency":2,"share_last_minute":0}`, string(data))

	_, _, err = Queue(ctxT(t), e.conn, e.client, "a.b")
	require.ErrorContains(t, err, `queue of pool "a.b"`)
}

func TestPoolPageShowsTheQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, testTokens)
	queuedPool(t, e)
	// Pool default: its worker's consumer of the default personality,
	// whose call was the only start (once acknowledged, not running).
	defaultRow := `<tr data-personality="default"><th scope="row">default</th><td class="num" data-waiting="0">0</td><td class="num" data-running="0">0</td><td class="num">3</td><td class="num">1</td><td class="num">none</td><td class="num" data-share="1">100.0%</td></tr>`
	var body string
	eventually(t, 15*time.Second, "the queues with the call's start", func() bool {
		code, b := do(t, "GET", srv.URL+"/", viewerToken)
		require.Equal(t, http.StatusOK, code)
		body = b
		return strings.Contains(b, `data-personality="default"><th scope="row">default</th><td class="num" data-waiting="1">1</td><td class="num" data-running="0">0</td><td class="num">3</td><td class="num">1</td><td class="num">none</td><td class="num" data-share="1">100.0%</td>`) &&
			strings.Contains(b, defaultRow)
	})
	queued := body[strings.Index(body, `data-queue-pool="queued"`):]
	queued = queued[:strings.Index(queued, "</table>")]
	require.Contains(t, queued, `<tr data-personality="batch"><th scope="row">batch</th><td class="num" data-waiting="2">2</td><td class="num" data-running="0">0</td><td class="num">1</td><td class="num">5</td><td class="num">2</td><td class="num" data-share="0">0.0%</td></tr>`)
	require.Contains(t, queued, `<tr data-personality="ghost">`)
	require.Contains(t, body, `<p class="bad">`+brokenNote+`</p>`)
	def := body[strings.Index(body, `data-queue-pool="default"`):]
	require.Contains(t, def[:strings.Index(def, "</table>")], defaultRow)
	for _, col := range []string{"Personality", "Waiting", "Running", "Priority", "Weight", "Max concurrency"} {
		require.Contains(t, queued, `<th scope="col">`+col+`</th>`)
	}
}
