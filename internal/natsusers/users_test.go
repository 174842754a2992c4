package natsusers

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// TestDeployNATSConfigs parses the three node configurations of
// docker-compose.yml with nats-server's own parser: the cluster settings of
// each node, and the same users with the same permissions on all three
// (auth.conf, included by each), their passwords from the environment.
func TestDeployNATSConfigs(t *testing.T) {
	t.Parallel()
	var first []*server.User
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("nats-%d", i)
		opts, err := server.ProcessConfigFile(filepath.Join("..", "..", "deploy", "nats", name+".conf"))
		require.NoError(t, err, name)
		require.Equal(t, name, opts.ServerName)
		require.True(t, opts.JetStream)
		require.True(t, opts.SyncAlways, "sync_interval: always")
		require.Equal(t, "/data/jetstream", opts.StoreDir)
		require.Equal(t, int32(8<<20), opts.MaxPayload)
		require.Equal(t, "capstan", opts.Cluster.Name)
		require.Equal(t, 6222, opts.Cluster.Port)
		require.Len(t, opts.Routes, 3)
		for j, r := range opts.Routes {
			require.Equal(t, fmt.Sprintf("nats-%d:6222", j+1), r.Host)
		}

		require.Empty(t, opts.NoAuthUser, "a connection without a user is refused")
		require.Empty(t, opts.Nkeys)
		var names []string
		for _, u := range opts.Users {
			names = append(names, u.Username)
			require.Equal(t, passwords[u.Username], u.Password, "%s: the password comes from %s", u.Username, passwordVar(u.Username))
			require.NotNil(t, u.Permissions, u.Username)
			require.NotEmpty(t, u.Permissions.Publish.Allow, u.Username)
			require.Equal(t, []string{inboxPrefix(u.Username) + ".>"}, u.Permissions.Subscribe.Allow[:1], u.Username)
			// Only the workers answer requests (decision requests, on the
			// requester's inbox).
			require.Equal(t, u.Username == "worker", u.Permissions.Response != nil, "%s: allow_responses", u.Username)
		}
		require.ElementsMatch(t, []string{"worker", "operator", "backend", "approver", "tenant-researcher", "tenant-support"}, names, name)
		if first == nil {
			first = opts.Users
			continue
		}
		require.Equal(t, first, opts.Users, "%s has the users of nats-1", name)
	}
}

// TestWorkerServesABackend: on a new cluster, a worker connecting as the
// worker user creates the topology and serves the calls a backend publishes
// as the backend user, once the operator has stored a personality; the
// backend reads results, progress, the catalog and personality documents,
// and may not write personalities.
func TestWorkerServesABackend(t *testing.T) {
	t.Parallel()
	url := deployServer(t)
	workertest.Run(t, newWorker(t, url, nil), nil) // first on the server: creates every stream and bucket
	op := newClient(t, url, "operator")
	_, problems, err := op.PutPersonality(ctxT(t, 10*time.Second), []byte("id: default\n"))
	require.NoError(t, err)
	require.Empty(t, problems)

	be := newClient(t, url, "backend")
	r := callUntil(t, be, "", isOK)
	require.Equal(t, "hello", r.Value)

	// Results of several batches at once (one consumer with several filters,
	// as dispatcher batch and Collect read them).
	got := be.Collect(ctxT(t, 30*time.Second), []client.Call{
		{BatchID: "b1", Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"one"}`)},
		{BatchID: "b2", Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"two"}`)},
	}, 20*time.Second, nil)
	require.True(t, got[0].OK && got[1].OK, "%+v", got)
	require.Equal(t, []string{"one", "two"}, []string{got[0].Value, got[1].Value})

	// Progress and stored results.
	events := make(chan client.Progress, 16)
	stop, err := be.Progress(ctxT(t, 10*time.Second), "", "pb", true, func(p client.Progress) { events <- p })
	require.NoError(t, err)
	defer stop()
	res := be.ExecuteParallel(ctxT(t, 30*time.Second), client.Turn{BatchID: "pb"}, []client.Call{{Tool: "echo", SessionID: "s",
		Args: json.RawMessage(`{"text":"x","progress":[{"message":"half","percent":50,"audience":"user"}]}`)}})
	require.True(t, res[0].OK, "%+v", res[0])
	select {
	case p := <-events:
		require.Equal(t, "half", p.Message)
		require.Equal(t, protocol.AudienceUser, p.Audience)
	case <-time.After(10 * time.Second):
		t.Fatal("no progress event")
	}
	stored, found, err := be.Result(ctxT(t, 10*time.Second), res[0].CallID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "x", stored.Value)
	require.NoError(t, be.Cancel(ctxT(t, 10*time.Second), res[0].CallID, "too late"))

	// The catalog and personality documents, read only.
	tools, err := be.ToolsFor(ctxT(t, 10*time.Second), "default")
	require.NoError(t, err)
	require.NotEmpty(t, tools)
	ids, err := be.Personalities(ctxT(t, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{"default"}, ids)

	_, _, err = be.PutPersonality(ctxT(t, 10*time.Second), []byte("id: evil\n"))
	requireDenied(t, err, "$KV.capstan_personalities.evil")
	err = be.DeletePersonality(ctxT(t, 10*time.Second), "default")
	requireDenied(t, err, "$KV.capstan_personalities.default")
	_, err = be.DeadLetters(ctxT(t, 10*time.Second))
	require.ErrorIs(t, err, bus.ErrPermissionDenied, "only the operator reads dead letters")
	ids, err = op.Personalities(ctxT(t, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{"default"}, ids, "the bucket is unchanged")
}

// requireDenied requires err to be the server's refusal of a publish to subject.
func requireDenied(t *testing.T, err error, subject string) {
	t.Helper()
	require.ErrorIs(t, err, bus.ErrPermissionDenied)
	var pe *bus.PermissionError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, subject, pe.Subject)
	require.Equal(t, fmt.Sprintf("Permissions Violation for Publish to %q", subject), pe.Message, "the server's own words")
}

// TestServerRefuses checks, on a plain nats.go connection with no Capstan
// code in the way, that the server itself refuses what each user may not
// do, and that the refused requests changed nothing.
func TestServerRefuses(t *testing.T) {
	t.Parallel()
	url := deployServer(t)
	op := newClient(t, url, "operator") // creates the topology
	doc := []byte("id: default\n")
	_, _, err := op.PutPersonality(ctxT(t, 10*time.Second), doc)
	require.NoError(t, err)
	opConn := busConn(t, url, "operator")
	personalityMsgs, err := opConn.StreamMsgs(ctxT(t, 10*time.Second), "KV_capstan_personalities")
	require.NoError(t, err)

	personality := []byte("id: evil\n")
	purge := []byte(`{}`)
	for _, tc := range []struct {
		user, subject string
		body          []byte
	}{
		// The worker may not write, delete or purge personalities ...
		{"worker", "$KV.capstan_personalities.evil", personality},
		{"worker", "$KV.capstan_personalities.default", personality},
		{"worker", "$JS.API.STREAM.PURGE.KV_capstan_personalities", purge},
		{"worker", "$JS.API.STREAM.MSG.DELETE.KV_capstan_personalities", []byte(`{"seq":1}`)},
		{"worker", "$JS.API.STREAM.UPDATE.KV_capstan_personalities", []byte(`{"name":"KV_capstan_personalities","subjects":["x.>"]}`)},
		// ... delete or purge any stream ...
		{"worker", "$JS.API.STREAM.DELETE.KV_capstan_personalities", nil},
		{"worker", "$JS.API.STREAM.DELETE.CAPSTAN_CALLS", nil},
		{"worker", "$JS.API.STREAM.DELETE.CAPSTAN_AUDIT", nil},
		{"worker", "$JS.API.STREAM.PURGE.CAPSTAN_DLQ", purge},
		// ... create streams other than Capstan's, or publish calls other
		// than its pool's (a decided call goes back to its own subject) ...
		{"worker", "$JS.API.STREAM.CREATE.EVIL", []byte(`{"name":"EVIL","subjects":["evil.>"]}`)},
		{"worker", "capstan.call.default.echo", []byte(`{}`)},
		{"worker", "capstan.call.other.default.echo", []byte(`{}`)},
		{"worker", "capstan.call.default.default.echo.x", []byte(`{}`)},
		// ... or publish to an inbox except in answer to a request.
		{"worker", "_INBOX_support.x", []byte(`{}`)},
		{"worker", "_INBOX_approver.x", []byte(`{}`)},
		// The backend may not write personalities, purge or delete, or
		// read dead letters or calls.
		{"backend", "$KV.capstan_personalities.evil", personality},
		{"backend", "$JS.API.STREAM.PURGE.KV_capstan_personalities", purge},
		{"backend", "$JS.API.STREAM.DELETE.CAPSTAN_CALLS", nil},
		{"backend", "$JS.API.STREAM.PURGE.CAPSTAN_RESULTS", purge},
		{"backend", "$JS.API.CONSUMER.CREATE.CAPSTAN_DLQ.peek.capstan.dlq.>", []byte(`{"stream_name":"CAPSTAN_DLQ","config":{"name":"peek","filter_subject":"capstan.dlq.>"}}`)},
		{"backend", "$JS.API.CONSUMER.CREATE.CAPSTAN_CALLS.default.capstan.call.default.>", []byte(`{"stream_name":"CAPSTAN_CALLS","config":{"durable_name":"default"}}`)},
		{"backend", "capstan.result.b.c", []byte(`{}`)},
		// Nobody deletes or reconfigures streams, not even the operator.
		{"operator", "$JS.API.STREAM.DELETE.CAPSTAN_CALLS", nil},
		{"operator", "$JS.API.STREAM.UPDATE.KV_capstan_personalities", []byte(`{"name":"KV_capstan_personalities","subjects":["x.>"]}`)},
		{"operator", "$JS.API.STREAM.CREATE.EVIL", []byte(`{"name":"EVIL","subjects":["evil.>"]}`)},
	} {
		t.Run(tc.user+" "+tc.subject, func(t *testing.T) {
			dialRaw(t, url, tc.user).requireRefused(t, tc.subject, tc.body)
		})
	}

	// The same connections may do what their user needs.
	dialRaw(t, url, "worker").requireAnswered(t, "$JS.API.STREAM.INFO.KV_capstan_personalities", nil)
	dialRaw(t, url, "worker").requireAnswered(t, "$JS.API.DIRECT.GET.KV_capstan_personalities.$KV.capstan_personalities.default", nil)
	dialRaw(t, url, "operator").requireAnswered(t, "$JS.API.STREAM.PURGE.CAPSTAN_DLQ", purge)

	// Nothing changed: the personality, the bucket's messages, the streams.
	got, err := op.Personality(ctxT(t, 10*time.Second), "default")
	require.NoError(t, err)
	require.Equal(t, doc, got)
	ids, err := op.Personalities(ctxT(t, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, []string{"default"}, ids)
	n, err := opConn.StreamMsgs(ctxT(t, 10*time.Second), "KV_capstan_personalities")
	require.NoError(t, err)
	require.Equal(t, personalityMsgs, n)
	for _, s := range []string{"CAPSTAN_CALLS", "CAPSTAN_AUDIT", "CAPSTAN_DLQ", "KV_capstan_personalities"} {
		_, err := opConn.StreamMsgs(ctxT(t, 10*time.Second), s)
		require.NoError(t, err, "%s still exists", s)
	}
	_, err = opConn.StreamMsgs(ctxT(t, 10*time.Second), "EVIL")
	require.Error(t, err, "no stream EVIL was created")

	// Without a password, or with another user's, no connection at all.
	_, err = bus.Connect(ctxT(t, 10*time.Second), bus.Config{URL: url})
	require.ErrorContains(t, err, "Authorization Violation")
	_, err = bus.Connect(ctxT(t, 10*time.Second), bus.Config{URL: strings.Replace(as(url, "worker"), passwords["worker"], passwords["operator"], 1)})
	require.ErrorContains(t, err, "Authorization Violation")
}

// TestWorkerKVWritesToPersonalitiesAreRefused: the bus operations the worker
// uses report the server's refusal at once, and the bucket is unchanged.
func TestWorkerKVWritesToPersonalitiesAreRefused(t *testing.T) {
	t.Parallel()
	url := deployServer(t)
	op := newClient(t, url, "operator")
	_, _, err := op.PutPersonality(ctxT(t, 10*time.Second), []byte("id: default\n"))
	require.NoError(t, err)

	w := busConn(t, url, "worker")
	ctx := ctxT(t, time.Minute)
	start := time.Now()
	kv, err := w.KV(ctx, bus.Personalities)
	require.NoError(t, err)
	e, found, err := kv.Get(ctx, "default")
	require.NoError(t, err, "the worker reads personalities")
	require.True(t, found)
	_, err = kv.Put(ctx, "x", []byte("id: x\n"))
	requireDenied(t, err, "$KV.capstan_personalities.x")
	_, err = kv.Create(ctx, "x", []byte("id: x\n"), 0)
	requireDenied(t, err, "$KV.capstan_personalities.x")
	_, err = kv.Update(ctx, "default", []byte("id: default\nsecrets: {allow: ['*']}\n"), e.Revision)
	requireDenied(t, err, "$KV.capstan_personalities.default")
	requireDenied(t, kv.Delete(ctx, "default"), "$KV.capstan_personalities.default")
	requireDenied(t, kv.Purge(ctx, "default", 0, 0), "$KV.capstan_personalities.default")
	require.Less(t, time.Since(start), 30*time.Second, "refusals do not wait for the deadline")

	after, found, err := kv.Get(ctx, "default")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, e.Revision, after.Revision, "the bucket is unchanged")
	_, found, err = kv.Get(ctx, "x")
	require.NoError(t, err)
	require.False(t, found)
}

// TestWorkerWithPersonalitiesDirIsToldToUseTheOperator: a worker that is
// given CAPSTAN_PERSONALITIES_DIR but connects as the worker user stops at
// once, naming the variable and the bucket, and saying how to load them.
func TestWorkerWithPersonalitiesDirIsToldToUseTheOperator(t *testing.T) {
	t.Parallel()
	url := deployServer(t)
	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", "personalities"))
	require.NoError(t, err)
	w := newWorker(t, url, func(c *worker.Config) { c.PersonalitiesDir = dir })
	start := time.Now()
	err = w.Run(ctxT(t, time.Minute))
	require.Less(t, time.Since(start), 30*time.Second, "the refusal ends the start at once")
	require.ErrorIs(t, err, bus.ErrPermissionDenied)
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, "CAPSTAN_PERSONALITIES_DIR is set ("+dir+"), but this worker's NATS user may not write the capstan_personalities bucket (storing personality "), msg)
	require.Contains(t, msg, `Permissions Violation for Publish to "$KV.capstan_personalities.`)
	require.True(t, strings.HasSuffix(msg, `): load the personalities as the operator user with "dispatcher personality put <file or directory>" and unset CAPSTAN_PERSONALITIES_DIR on the worker`), msg)

	ids, err := newClient(t, url, "operator").Personalities(ctxT(t, 10*time.Second))
	require.NoError(t, err)
	require.Empty(t, ids, "nothing was stored")
}

// TestOperatorManagesPersonalitiesTheWorkerApplies: the operator stores and
// deletes a personality, and the worker applies both to the next calls.
func TestOperatorManagesPersonalitiesTheWorkerApplies(t *testing.T) {
	t.Parallel()
	url := deployServer(t)
	op := newClient(t, url, "operator")
	workertest.Run(t, newWorker(t, url, nil), nil)
	be := newClient(t, url, "backend")

	_, problems, err := op.PutPersonality(ctxT(t, 10*time.Second), []byte("id: extra\ntoolset: [echo]\n"))
	require.NoError(t, err)
	require.Empty(t, problems)
	callUntil(t, be, "extra", isOK)

	require.NoError(t, op.DeletePersonality(ctxT(t, 10*time.Second), "extra"))
	r := callUntil(t, be, "extra", func(r client.Result) bool { return !r.OK })
	require.Equal(t, "Unknown personality: extra", r.Error)
}

// TestOperatorRedrivesADeadLetter: a call abandoned after MaxDeliver is
// dead-lettered by the worker; the backend may not read the DLQ, the
// operator lists and redrives it, and the worker answers the call again.
func TestOperatorRedrivesADeadLetter(t *testing.T) {
	t.Parallel()
	url := deployServer(t)
	op := newClient(t, url, "operator")
	_, _, err := op.PutPersonality(ctxT(t, 10*time.Second), []byte("id: default\n"))
	require.NoError(t, err)
	// Only calls of exclusive tools take a lease: echo is one here.
	tools := builtin.All()
	for i := range tools {
		if tools[i].Name == "echo" {
			tools[i].SideEffects = tool.SideEffectsExclusive
		}
	}
	workertest.Run(t, newWorker(t, url, func(c *worker.Config) { c.MaxDeliver, c.AckWait = 2, 3*time.Second }, tools...), nil)
	be := newClient(t, url, "backend")

	// Another worker (the same user) holds the call's lease, so each
	// delivery is handed back until the call is abandoned.
	leases, err := busConn(t, url, "worker").KV(ctxT(t, 10*time.Second), bus.Leases)
	require.NoError(t, err)
	_, err = leases.Create(ctxT(t, 10*time.Second), "held1", []byte("another-worker"), time.Minute)
	require.NoError(t, err)
	require.NoError(t, be.Submit(ctxT(t, 10*time.Second), &client.Call{CallID: "held1", Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"again"}`)}))
	r, err := be.Await(ctxT(t, 30*time.Second), "", "held1")
	require.NoError(t, err)
	require.False(t, r.OK)
	require.Equal(t, "call abandoned after 2 deliveries: call lease held by another worker", r.Error)

	_, err = be.Redrive(ctxT(t, 10*time.Second), "held1")
	require.ErrorIs(t, err, bus.ErrPermissionDenied, "only the operator redrives")
	require.NoError(t, leases.Delete(ctxT(t, 10*time.Second), "held1"))
	letters, err := op.DeadLettersOf(ctxT(t, 10*time.Second), "held1")
	require.NoError(t, err)
	require.Len(t, letters, 1)
	_, err = op.Redrive(ctxT(t, 10*time.Second), "held1")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, found, err := be.Result(ctxT(t, 10*time.Second), "held1")
		return err == nil && found && r.OK && r.Value == "again"
	}, 20*time.Second, 20*time.Millisecond)
	letters, err = op.DeadLetters(ctxT(t, 10*time.Second))
	require.NoError(t, err)
	require.False(t, slices.ContainsFunc(letters, func(d client.DeadLetter) bool { return d.CallID == "held1" }), "the dead letter is gone")
}
