package natsusers

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/stretchr/testify/require"
)

// TestTenantsAreIsolated proves security.md section 3 on a real server
// started from deploy/nats: two tenants, each bound to its personality, are
// served by one worker pool, and the server refuses every attempt of one to
// call under, read, or cancel the other's personality. Before protocol
// version 2 the personality was a body field and none of this could be
// enforced: every publisher on capstan.call.> chose any personality.
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	url := deployServer(t)
	op := newClient(t, url, "operator") // creates the topology
	for _, doc := range []string{"id: researcher\n", "id: support\n"} {
		_, problems, err := op.PutPersonality(ctxT(t, 10*time.Second), []byte(doc))
		require.NoError(t, err)
		require.Empty(t, problems)
	}
	workertest.Run(t, newWorker(t, url, nil), nil)

	a := newClient(t, url, "tenant-researcher")
	b := newClient(t, url, "tenant-support")
	require.Equal(t, "researcher", a.PersonalityID())

	// One pool serves both tenants, each under its own personality.
	ra := callUntil(t, a, "", isOK)
	require.Equal(t, "hello", ra.Value)
	rb := callUntil(t, b, "", isOK)
	require.Equal(t, "hello", rb.Value)
	got, found, err := a.Result(ctxT(t, 10*time.Second), ra.CallID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, ra.CallID, got.CallID)

	// A's call under B's personality: the server refuses the publish.
	call := client.Call{Tool: "echo", SessionID: "s", PersonalityID: "support", Args: json.RawMessage(`{"text":"x"}`)}
	err = a.Submit(ctxT(t, 10*time.Second), &call)
	require.ErrorIs(t, err, bus.ErrPermissionDenied)
	require.ErrorContains(t, err, `"capstan.call.default.support.echo"`)

	// A cannot read B's results: neither through its client (a view under
	// B's personality) ...
	aAsB, err := a.WithPersonality("support")
	require.NoError(t, err)
	_, _, err = aAsB.Result(ctxT(t, 10*time.Second), rb.CallID)
	require.ErrorIs(t, err, bus.ErrPermissionDenied)
	// ... nor with a consumer on B's results or progress, nor a direct get.
	conn := busConn(t, url, "tenant-researcher")
	for _, tc := range []struct{ stream, filter string }{
		{"CAPSTAN_RESULTS", "capstan.result.support.>"},
		{"CAPSTAN_RESULTS", "capstan.result.>"},
		{"CAPSTAN_RESULTS", "capstan.result.*." + rb.BatchID + "." + rb.CallID},
		{"CAPSTAN_PROGRESS", "capstan.progress.user.support.>"},
		{"CAPSTAN_PROGRESS", "capstan.progress.>"},
	} {
		_, err := conn.Tail(ctxT(t, 10*time.Second), tc.stream, []string{tc.filter}, bus.FromStart, func(*bus.Msg) {})
		require.ErrorIs(t, err, bus.ErrPermissionDenied, "consumer on %s", tc.filter)
	}
	for _, subject := range []string{"capstan.result.support.*." + rb.CallID, "capstan.result.*.*." + rb.CallID} {
		_, err = conn.DirectLast(ctxT(t, 10*time.Second), "CAPSTAN_RESULTS", subject)
		require.ErrorIs(t, err, bus.ErrPermissionDenied, "direct get of %s", subject)
	}
	// Its own results it reads both ways.
	m, err := conn.DirectLast(ctxT(t, 10*time.Second), "CAPSTAN_RESULTS", "capstan.result.researcher.*."+ra.CallID)
	require.NoError(t, err)
	require.Equal(t, "capstan.result.researcher."+ra.BatchID+"."+ra.CallID, m.Subject)

	// What no tenant may do at all, checked on the wire.
	raw := dialRaw(t, url, "tenant-researcher")
	for _, tc := range []struct {
		subject string
		body    []byte
	}{
		{"capstan.call.default.support.echo", []byte(`{}`)},
		{"capstan.cancel.support." + rb.CallID, nil},
		{"capstan.result.researcher.b.c", []byte(`{}`)},
		{"$KV.capstan_personalities.researcher", []byte("id: researcher\nprocess: {allow: ['*']}\n")},
		{"$JS.API.DIRECT.GET.KV_capstan_personalities.$KV.capstan_personalities.support", nil},
		{"$JS.API.STREAM.MSG.GET.CAPSTAN_RESULTS", []byte(`{"last_by_subj":"capstan.result.support.>"}`)},
		{"$JS.API.DIRECT.GET.CAPSTAN_RESULTS", []byte(`{"last_by_subj":"capstan.result.support.>"}`)},
		{"$JS.API.STREAM.INFO.CAPSTAN_RESULTS", []byte(`{"subjects_filter":">"}`)},
		{"$JS.API.CONSUMER.CREATE.CAPSTAN_RESULTS.peek", []byte(`{"stream_name":"CAPSTAN_RESULTS","config":{"name":"peek","filter_subjects":["capstan.result.support.>"]}}`)},
		{"$JS.API.STREAM.CREATE.CAPSTAN_CALLS", []byte(`{"name":"CAPSTAN_CALLS","subjects":["capstan.call.>"]}`)},
	} {
		t.Run("refused "+tc.subject, func(t *testing.T) {
			raw.requireRefused(t, tc.subject, tc.body)
		})
	}
	// Another tenant's replies: a tenant subscribes only to its own inbox.
	sub, err := raw.nc.SubscribeSync("_INBOX.>")
	require.NoError(t, err)
	require.NoError(t, raw.nc.Flush())
	requireViolation(t, raw, `Permissions Violation for Subscription to "_INBOX.>"`)
	_ = sub.Unsubscribe()

	// Only the operator writes personalities.
	for _, user := range []string{"tenant-researcher", "backend", "worker"} {
		dialRaw(t, url, user).requireRefused(t, "$KV.capstan_personalities.researcher", []byte("id: researcher\n"))
	}
	_, problems, err := op.PutPersonality(ctxT(t, 10*time.Second), []byte("# changed by the operator\nid: researcher\n"))
	require.NoError(t, err)
	require.Empty(t, problems)

	// B's calls were untouched by all of this: its result is still there,
	// and the worker answers B as before.
	got, found, err = b.Result(ctxT(t, 10*time.Second), rb.CallID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "hello", got.Value)
	require.Equal(t, "hello", callUntil(t, b, "", isOK).Value)
}

// TestTenantCallNamingAnotherPersonalityInItsBodyRunsAsItsOwn: a tenant
// that may publish only under its personality cannot borrow another by
// naming it in the body: the worker refuses the call on the subject's
// personality's result subject, which the tenant reads.
func TestTenantCallNamingAnotherPersonalityInItsBodyRunsAsItsOwn(t *testing.T) {
	t.Parallel()
	url := deployServer(t)
	op := newClient(t, url, "operator")
	_, _, err := op.PutPersonality(ctxT(t, 10*time.Second), []byte("id: researcher\n"))
	require.NoError(t, err)
	workertest.Run(t, newWorker(t, url, nil), nil)
	conn := busConn(t, url, "tenant-researcher")
	body := []byte(`{"call_id":"borrow1","tool":"echo","args":{"text":"x"},"session_id":"s","personality_id":"support"}`)
	_, err = conn.Publish(ctxT(t, 10*time.Second), "capstan.call.default.researcher.echo", body, bus.Header{protocol.HeaderProtocol: {protocol.Version}}, "borrow1")
	require.NoError(t, err)
	a := newClient(t, url, "tenant-researcher")
	r, err := a.Await(ctxT(t, 30*time.Second), "", "borrow1")
	require.NoError(t, err)
	require.False(t, r.OK)
	require.Equal(t, protocol.CodeInputInvalid, r.Code)
	require.Equal(t, `personality_id "support" does not match the subject's personality "researcher"`, r.Error)
}

// requireViolation waits for the server's asynchronous error containing want.
func requireViolation(t *testing.T, r *rawConn, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-r.errs:
			if err != nil && strings.Contains(err.Error(), want) {
				return
			}
		case <-deadline:
			t.Fatalf("the server did not report %q", want)
		}
	}
}
