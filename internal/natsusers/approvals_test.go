package natsusers

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/stretchr/testify/require"
)

// opsDoc is a personality whose echo calls with the text "pay" wait for a
// decision of alice's.
const opsDoc = `id: ops
approval:
  require:
    - tool: echo
      when: {text: [pay]}
  timeout: 1h
  approvers: [alice]
`

// researcherDoc holds the researcher's "refund" calls too, but its caller
// may not decide them (no approval.self).
const researcherDoc = `id: researcher
approval:
  require:
    - tool: echo
      when: {text: [refund]}
  timeout: 1h
`

// putDoc stores a personality as the operator.
func putDoc(t *testing.T, op *client.Client, doc []byte) {
	t.Helper()
	_, problems, err := op.PutPersonality(ctxT(t, 10*time.Second), doc)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// submitEcho publishes an echo call with text and id callID as c.
func submitEcho(t *testing.T, c *client.Client, callID, text string) {
	t.Helper()
	args, err := json.Marshal(map[string]string{"text": text})
	require.NoError(t, err)
	require.NoError(t, c.Submit(ctxT(t, 10*time.Second), &client.Call{CallID: callID, Tool: "echo", SessionID: "s", Args: args}))
}

// await returns the result of call callID as c.
func await(t *testing.T, c *client.Client, callID string) client.Result {
	t.Helper()
	r, err := c.Await(ctxT(t, 30*time.Second), "", callID)
	require.NoError(t, err)
	return r
}

// heldFor waits until c lists call callID as held, and returns its hold.
func heldFor(t *testing.T, c *client.Client, callID string) client.Hold {
	t.Helper()
	var h client.Hold
	var last error
	require.Eventually(t, func() bool {
		var found bool
		h, found, last = c.FindHold(ctxT(t, 10*time.Second), callID)
		return last == nil && found
	}, 30*time.Second, 20*time.Millisecond, "call %s is never held (last error: %v)", callID, last)
	return h
}

// refusalOf returns the workers' reason of a refused decision.
func refusalOf(t *testing.T, err error) string {
	t.Helper()
	var re *client.DecisionRefusedError
	require.True(t, errors.As(err, &re), "want a refused decision, got %v", err)
	return re.Reason
}

// TestApproverDecidesHeldCalls: with deploy/nats's users, a backend's
// calls that need approval are held by a worker connecting as the worker
// user; the approver lists them, approves one (its result arrives),
// denies another, and the backend cancels a third; the operator (the
// console's user) decides as well. The approver publishes no call,
// cancel or bucket write, and the backend decides nothing as an approver.
func TestApproverDecidesHeldCalls(t *testing.T) {
	t.Parallel()
	url := deployServer(t)
	op := newClient(t, url, "operator") // creates the topology
	putDoc(t, op, []byte(opsDoc))
	workertest.Run(t, newWorker(t, url, nil), nil)
	be, err := newClient(t, url, "backend").WithPersonality("ops")
	require.NoError(t, err)
	ap := newClient(t, url, "approver")
	apOps, err := ap.WithPersonality("ops")
	require.NoError(t, err)

	// Approved: the call runs once, and its result reaches the backend.
	submitEcho(t, be, "ap1", "pay")
	h := heldFor(t, ap, "ap1")
	require.Equal(t, "ops", h.PersonalityID)
	require.Equal(t, "echo", h.Tool)
	holds, err := ap.Holds(ctxT(t, 10*time.Second), "ops")
	require.NoError(t, err)
	require.Len(t, holds, 1)
	require.Equal(t, "ap1", holds[0].CallID)
	// Its approval_required event, as a backend reads progress.
	events := make(chan client.ApprovalRequest, 8)
	stop, err := apOps.ApprovalRequests(ctxT(t, 10*time.Second), true, func(r client.ApprovalRequest) { events <- r })
	require.NoError(t, err)
	defer stop()
	select {
	case ev := <-events:
		require.Equal(t, "ap1", ev.CallID)
		require.Equal(t, h.ArgsSHA256, ev.ArgsSHA256)
	case <-time.After(30 * time.Second):
		t.Fatal("the approver reads no approval_required event")
	}
	_, err = ap.Approve(ctxT(t, 10*time.Second), "ap1", h.ArgsSHA256, "", "bob")
	require.Equal(t, "bob is not an approver of personality ops (approval.approvers)", refusalOf(t, err))
	d, err := ap.Approve(ctxT(t, 10*time.Second), "ap1", h.ArgsSHA256, "checked", "alice")
	require.NoError(t, err)
	require.Equal(t, protocol.ApprovalApproved, d.Decision)
	require.Equal(t, "alice", d.By)
	r := await(t, be, "ap1")
	require.True(t, r.OK, "%s: %s", r.Code, r.Error)
	require.Equal(t, "pay", r.Value)
	// The approver reads the result as a backend may.
	stored, found, err := apOps.Result(ctxT(t, 10*time.Second), "ap1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "pay", stored.Value)
	_, err = ap.Approve(ctxT(t, 10*time.Second), "ap1", h.ArgsSHA256, "", "alice")
	require.Equal(t, "already approved by alice", refusalOf(t, err))

	// Denied.
	submitEcho(t, be, "ap2", "pay")
	heldFor(t, ap, "ap2")
	_, err = ap.Deny(ctxT(t, 10*time.Second), "ap2", "not today", "alice")
	require.NoError(t, err)
	r = await(t, be, "ap2")
	require.False(t, r.OK)
	require.Equal(t, protocol.CodeNotAvailable, r.Code)
	require.Equal(t, "APPROVAL_DENIED: not today", r.Error)

	// Cancelled while held: the workers watch the cancels bucket.
	submitEcho(t, be, "ap3", "pay")
	heldFor(t, ap, "ap3")
	require.NoError(t, be.Cancel(ctxT(t, 10*time.Second), "ap3", "changed my mind"))
	r = await(t, be, "ap3")
	require.False(t, r.OK)
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Equal(t, "cancelled: changed my mind", r.Error)

	// The operator (the console connects as the operator) lists and decides.
	submitEcho(t, be, "ap4", "pay")
	h4 := heldFor(t, op, "ap4")
	_, err = op.Approve(ctxT(t, 10*time.Second), "ap4", h4.ArgsSHA256, "", "alice")
	require.NoError(t, err)
	require.True(t, await(t, be, "ap4").OK)

	// The history.
	decisions, err := ap.Decisions(ctxT(t, 10*time.Second), "ops")
	require.NoError(t, err)
	got := map[string]string{}
	for _, d := range decisions {
		got[d.Hold.CallID] = d.Decision
	}
	require.Equal(t, map[string]string{"ap1": protocol.ApprovalApproved, "ap2": protocol.ApprovalDenied,
		"ap3": protocol.ApprovalCancelled, "ap4": protocol.ApprovalApproved}, got)
	holds, err = ap.Holds(ctxT(t, 10*time.Second), "")
	require.NoError(t, err)
	require.Empty(t, holds)

	// The approver publishes no call and writes no personality.
	err = apOps.Submit(ctxT(t, 10*time.Second), &client.Call{Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"x"}`)})
	requireDenied(t, err, "capstan.call.default.ops.echo")
	_, _, err = ap.PutPersonality(ctxT(t, 10*time.Second), []byte("id: ops\n"))
	require.ErrorIs(t, err, bus.ErrPermissionDenied, "it may not even read the bucket")

	// What the server refuses, on the wire.
	submitEcho(t, be, "ap5", "pay")
	heldFor(t, ap, "ap5")
	forged := []byte(`{"decision":"approved","by":"alice"}`)
	for _, tc := range []struct {
		user, subject string
		body          []byte
	}{
		// The approver: calls, cancels, any bucket write (a decision
		// written straight into the bucket would skip the workers'
		// checks), a caller's own decision, the workers' consumer of
		// decisions, what it does not need to read.
		{"approver", "capstan.call.default.ops.echo", []byte(`{}`)},
		{"approver", "capstan.cancel.ops.ap5", nil},
		{"approver", "$KV.capstan_personalities.ops", []byte("id: ops\n")},
		{"approver", "$KV.capstan_approvals.decision.ops.ap5", forged},
		{"approver", "$KV.capstan_approvals.hold.ops.ap5", nil},
		{"approver", "capstan.approval.self.ops.ap5", forged},
		{"approver", "$JS.API.CONSUMER.CREATE.KV_capstan_approvals.decisions.$KV.capstan_approvals.decision.>",
			[]byte(`{"stream_name":"KV_capstan_approvals","config":{"durable_name":"decisions","filter_subject":"$KV.capstan_approvals.decision.>","ack_policy":"none"}}`)},
		{"approver", "$JS.API.CONSUMER.DELETE.KV_capstan_approvals.decisions", nil},
		{"approver", "$JS.API.STREAM.PURGE.KV_capstan_approvals", []byte(`{}`)},
		{"approver", "$JS.API.STREAM.MSG.DELETE.KV_capstan_approvals", []byte(`{"seq":1}`)},
		{"approver", "$JS.API.CONSUMER.CREATE.CAPSTAN_CALLS.peek.capstan.call.>", []byte(`{}`)},
		{"approver", "$JS.API.DIRECT.GET.KV_capstan_personalities.$KV.capstan_personalities.ops", nil},
		// The backend (the agent) and the operator do not decide by
		// writing the bucket, nor does the backend decide as an approver.
		{"backend", "capstan.approval.decide.ops.ap5", forged},
		{"backend", "$KV.capstan_approvals.decision.ops.ap5", forged},
		{"operator", "$KV.capstan_approvals.decision.ops.ap5", forged},
		{"operator", "$JS.API.CONSUMER.DELETE.KV_capstan_approvals.decisions", nil},
	} {
		t.Run("refused "+tc.user+" "+tc.subject, func(t *testing.T) {
			dialRaw(t, url, tc.user).requireRefused(t, tc.subject, tc.body)
		})
	}
	// Nobody but the workers receives decision requests, and they only in
	// their queue group; the approver reads no other user's replies.
	for _, tc := range []struct{ user, subject, queue string }{
		{"approver", "_INBOX.>", ""},
		{"approver", "capstan.approval.>", ""},
		{"backend", "capstan.approval.decide.*.*", ""},
		{"worker", "capstan.approval.*.*.*", ""},
		{"worker", "capstan.approval.*.*.*", "elsewhere"},
	} {
		raw := dialRaw(t, url, tc.user)
		var err error
		if tc.queue == "" {
			_, err = raw.nc.SubscribeSync(tc.subject)
		} else {
			_, err = raw.nc.QueueSubscribeSync(tc.subject, tc.queue)
		}
		require.NoError(t, err)
		require.NoError(t, raw.nc.Flush())
		requireViolation(t, raw, `Permissions Violation for Subscription to "`+tc.subject+`"`)
	}

	// None of it decided anything: ap5 is still held, and the workers'
	// consumer of decisions still acts on the approver's decision.
	h5 := heldFor(t, ap, "ap5")
	_, err = ap.Approve(ctxT(t, 10*time.Second), "ap5", h5.ArgsSHA256, "", "alice")
	require.NoError(t, err)
	r = await(t, be, "ap5")
	require.True(t, r.OK, "%s: %s", r.Code, r.Error)
	require.Equal(t, "pay", r.Value)
}

// TestTenantsDecideOnlyTheirOwnSelfApprovingCalls: tenant-support, whose
// personality sets approval.self (testdata/support.yaml), learns of its
// held call from its approval_required events and approves it itself; the
// server refuses tenant-researcher its own self subject (its personality
// does not set approval.self), either tenant the other's self subject, and
// both the approver's subject; and where the server would let a caller
// through (the backend may send self decisions for every personality),
// the workers refuse a personality without approval.self.
func TestTenantsDecideOnlyTheirOwnSelfApprovingCalls(t *testing.T) {
	t.Parallel()
	url := deployServer(t)
	op := newClient(t, url, "operator")
	support, err := os.ReadFile("testdata/support.yaml")
	require.NoError(t, err)
	putDoc(t, op, support)
	putDoc(t, op, []byte(researcherDoc))
	workertest.Run(t, newWorker(t, url, nil), nil)
	sup := newClient(t, url, "tenant-support")
	res := newClient(t, url, "tenant-researcher")
	ap := newClient(t, url, "approver")

	// The self-approving tenant decides its own call.
	requests := make(chan client.ApprovalRequest, 8)
	stop, err := sup.ApprovalRequests(ctxT(t, 10*time.Second), true, func(r client.ApprovalRequest) { requests <- r })
	require.NoError(t, err)
	defer stop()
	submitEcho(t, sup, "sup1", "refund")
	var req client.ApprovalRequest
	select {
	case req = <-requests:
	case <-time.After(30 * time.Second):
		t.Fatal("no approval_required event for tenant-support")
	}
	require.Equal(t, "sup1", req.CallID)
	require.Equal(t, "echo", req.Tool)
	d, err := sup.ApproveOwn(ctxT(t, 10*time.Second), "sup1", req.ArgsSHA256, "", "support-session")
	require.NoError(t, err)
	require.Equal(t, protocol.ApprovalApproved, d.Decision)
	require.Equal(t, "support-session", d.By)
	r := await(t, sup, "sup1")
	require.True(t, r.OK, "%s: %s", r.Code, r.Error)
	require.Equal(t, "refund", r.Value)
	_, err = sup.DenyOwn(ctxT(t, 10*time.Second), "sup1", "too late", "support-session")
	require.Equal(t, "already approved by support-session", refusalOf(t, err))

	// The other tenant may not: its personality is not self-approving, and
	// its user has no self subject.
	submitEcho(t, res, "res1", "refund")
	h := heldFor(t, ap, "res1")
	_, err = res.ApproveOwn(ctxT(t, 10*time.Second), "res1", h.ArgsSHA256, "", "researcher-session")
	requireDenied(t, err, "capstan.approval.self.researcher.res1")

	// On the wire: no tenant decides as an approver, nor under the other's
	// personality.
	submitEcho(t, sup, "sup2", "refund")
	heldFor(t, ap, "sup2")
	forged := []byte(`{"decision":"approved","args_sha256":"` + h.ArgsSHA256 + `","by":"mallory"}`)
	for _, tc := range []struct{ user, subject string }{
		{"tenant-researcher", "capstan.approval.decide.researcher.res1"},
		{"tenant-researcher", "capstan.approval.decide.support.sup2"},
		{"tenant-researcher", "capstan.approval.self.support.sup2"},
		{"tenant-support", "capstan.approval.decide.support.sup2"},
		{"tenant-support", "capstan.approval.decide.researcher.res1"},
		{"tenant-support", "capstan.approval.self.researcher.res1"},
		{"tenant-support", "$KV.capstan_approvals.decision.support.sup2"},
		{"tenant-support", "$JS.API.STREAM.INFO.KV_capstan_approvals"},
		{"tenant-support", "$JS.API.CONSUMER.CREATE.KV_capstan_approvals.peek.$KV.capstan_approvals.>"},
	} {
		t.Run("refused "+tc.user+" "+tc.subject, func(t *testing.T) {
			dialRaw(t, url, tc.user).requireRefused(t, tc.subject, forged)
		})
	}

	// Where the server lets a caller's decision through, the workers still
	// check the personality.
	beRes, err := newClient(t, url, "backend").WithPersonality("researcher")
	require.NoError(t, err)
	_, err = beRes.ApproveOwn(ctxT(t, 10*time.Second), "res1", h.ArgsSHA256, "", "agent")
	require.Equal(t, "personality researcher does not let a caller approve its own calls (approval.self is false)", refusalOf(t, err))

	// Nothing was decided by the refused requests: the approver decides
	// both calls, and each tenant reads its own result.
	for _, tc := range []struct {
		c    *client.Client
		call string
	}{{res, "res1"}, {sup, "sup2"}} {
		h := heldFor(t, ap, tc.call)
		_, err = ap.Approve(ctxT(t, 10*time.Second), tc.call, h.ArgsSHA256, "", "alice")
		require.NoError(t, err, tc.call)
		r := await(t, tc.c, tc.call)
		require.True(t, r.OK, "%s: %s: %s", tc.call, r.Code, r.Error)
		require.Equal(t, "refund", r.Value)
	}
}
