package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// approvalDoc is a personality whose echo calls need approval when their
// text is "pay" or "refund", or their sleep_ms is 5.
const approvalDoc = `id: ops
approval:
  require:
    - tool: echo
      when: {text: [pay, refund]}
    - tool: echo
      when: {sleep_ms: [5]}
  timeout: 1h
`

// approver returns a client of personality p for the test's server.
func (e *env) approver(p string) *client.Client {
	e.t.Helper()
	c, err := client.New(ctxT(e.t), client.Config{NATSURL: e.url, NATSCreds: bustest.Creds(e.url), Personality: p})
	require.NoError(e.t, err)
	e.t.Cleanup(c.Close)
	return c
}

// held waits until call is listed as held and returns its hold.
func held(t *testing.T, c *client.Client, callID string) client.Hold {
	t.Helper()
	var h client.Hold
	require.Eventually(t, func() bool {
		var found bool
		var err error
		h, found, err = c.FindHold(ctxT(t), callID)
		return err == nil && found
	}, 30*time.Second, 20*time.Millisecond, "call %s is never held", callID)
	return h
}

// notHeld waits until call leaves the pending list.
func notHeld(t *testing.T, c *client.Client, callID string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, found, err := c.FindHold(ctxT(t), callID)
		return err == nil && !found
	}, 30*time.Second, 20*time.Millisecond, "call %s stays held", callID)
}

func refusal(t *testing.T, err error) string {
	t.Helper()
	var re *client.DecisionRefusedError
	require.True(t, errors.As(err, &re), "want a refusal, got %v", err)
	return re.Reason
}

func TestApprovalHoldsTheCallUntilApprovedThenRunsItOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPersonality("ops", approvalDoc)
	e.start(worker.Config{})
	c := e.approver("ops")
	events := e.tail(e.names.ProgressStream(), "capstan.progress.*.ops.b1.c1")
	audits := e.tail(e.names.AuditStream(), "capstan.audit.echo")

	args := `{"text": "pay", "sleep_ms": 0}`
	e.call(protocol.Call{CallID: "c1", BatchID: "b1", Tool: "echo", PersonalityID: "ops", Args: json.RawMessage(args)})
	h := held(t, c, "c1")
	want, err := approval.ArgsSHA256("ops", "echo", json.RawMessage(args))
	require.NoError(t, err)
	require.Equal(t, want, h.ArgsSHA256)
	require.Equal(t, "b1", h.BatchID)
	require.Equal(t, "ops", h.PersonalityID)
	require.Equal(t, "echo", h.Tool)
	require.WithinDuration(t, h.HeldAt.Add(time.Hour), h.ExpiresAt, time.Second)
	require.JSONEq(t, args, string(h.Summary.Args))

	// One approval_required event to each of user and dashboard.
	seen := map[string]protocol.Progress{}
	for len(seen) < 2 {
		m := recv(t, events)
		var p protocol.Progress
		require.NoError(t, json.Unmarshal(m.Data, &p))
		require.Equal(t, protocol.ProgressKindApprovalRequired, p.Kind, m.Subject)
		seen[string(p.Audience)] = p
	}
	require.Contains(t, seen, "user")
	require.Contains(t, seen, "dashboard")
	require.Equal(t, want, seen["user"].Approval.ArgsSHA256)
	require.Equal(t, "c1", seen["user"].Approval.CallID)

	// Held: acknowledged (no slot, no redelivery), no result.
	e.waitCallsDrained()
	require.Zero(t, e.resultsOn("b1", "c1"))

	// A hash of other arguments is refused; the call stays held.
	_, err = c.Approve(ctxT(t), "c1", strings.Repeat("0", 64), "", "alice")
	require.Equal(t, "approval does not match the call's arguments", refusal(t, err))
	held(t, c, "c1")

	d, err := c.Approve(ctxT(t), "c1", want, "looks right", "alice")
	require.NoError(t, err)
	require.Equal(t, "approved", d.Decision)
	require.Equal(t, "alice", d.By)
	r := e.result("b1", "c1")
	require.True(t, r.OK, r.Error)
	require.Equal(t, "pay", r.Value)
	notHeld(t, c, "c1")

	_, err = c.Approve(ctxT(t), "c1", want, "", "bob")
	require.Equal(t, "already approved by alice", refusal(t, err))
	_, err = c.Deny(ctxT(t), "c1", "too late", "bob")
	require.Equal(t, "already approved by alice", refusal(t, err))

	// Two audit records: the decision's and the call's, each naming the
	// approver and the hash, never the arguments.
	var decisionRec, callRec *protocol.AuditRecord
	for decisionRec == nil || callRec == nil {
		rec, line := auditOn(t, audits, "c1")
		require.NotContains(t, line, "pay")
		require.NotNil(t, rec.Approval, line)
		require.Equal(t, "approved", rec.Approval.Decision)
		require.Equal(t, "alice", rec.Approval.By)
		require.Equal(t, want, rec.Approval.ArgsSHA256)
		if rec.Decision == protocol.DecisionApproval {
			decisionRec = &rec
		} else {
			callRec = &rec
		}
	}
	require.Equal(t, protocol.DecisionAllowed, callRec.Decision)
	require.True(t, callRec.OK)
	e.waitCallsDrained()
	require.Equal(t, 1, e.resultsOn("b1", "c1"))
}

func TestApprovalDecisionsThatEndAHeldCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPersonality("ops", approvalDoc)
	e.putPersonality("quick", "id: quick\napproval:\n  require: [{tool: echo}]\n  timeout: 1s\n")
	e.start(worker.Config{})
	c := e.approver("ops")

	// Denied, with the reason as given.
	e.call(protocol.Call{CallID: "d1", Tool: "echo", PersonalityID: "ops", Args: json.RawMessage(`{"text":"refund"}`)})
	held(t, c, "d1")
	_, err := c.Deny(ctxT(t), "d1", "not on a Friday", "alice")
	require.NoError(t, err)
	r := e.result("d1", "d1")
	require.False(t, r.OK)
	require.Equal(t, protocol.CodeNotAvailable, r.Code)
	require.Equal(t, "APPROVAL_DENIED: not on a Friday", r.Error)
	require.Zero(t, r.DurationMS)
	notHeld(t, c, "d1")
	_, err = c.Approve(ctxT(t), "d1", "x", "", "bob")
	require.Equal(t, "already denied by alice", refusal(t, err))

	// Expired.
	e.call(protocol.Call{CallID: "x1", Tool: "echo", PersonalityID: "quick", Args: json.RawMessage(`{"text":"hi"}`)})
	r = e.result("x1", "x1")
	require.Equal(t, protocol.CodeNotAvailable, r.Code)
	require.Equal(t, "APPROVAL_EXPIRED: no decision within 1s", r.Error)
	require.Zero(t, r.DurationMS)
	notHeld(t, c, "x1")

	// Cancelled while held.
	e.call(protocol.Call{CallID: "k1", Tool: "echo", PersonalityID: "ops", Args: json.RawMessage(`{"text":"pay"}`)})
	held(t, c, "k1")
	require.NoError(t, e.conn.PublishCore("capstan.cancel.ops.k1", []byte(`{"reason":"user gave up"}`), nil))
	r = e.result("k1", "k1")
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Equal(t, "cancelled: user gave up", r.Error)
	require.Zero(t, r.DurationMS)
	notHeld(t, c, "k1")

	// timeout_ms passing while held ends it as a deadline does.
	e.call(protocol.Call{CallID: "t1", Tool: "echo", PersonalityID: "ops", TimeoutMS: 500, Args: json.RawMessage(`{"text":"pay"}`)})
	r = e.result("t1", "t1")
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Equal(t, "deadline exceeded before start", r.Error)
	require.Zero(t, r.DurationMS)

	// So does a deadline.
	soon := time.Now().Add(time.Second)
	e.call(protocol.Call{CallID: "t2", Tool: "echo", PersonalityID: "ops", Deadline: &soon, Args: json.RawMessage(`{"text":"pay"}`)})
	r = e.result("t2", "t2")
	require.Equal(t, protocol.CodeExecutionFailed, r.Code)
	require.Equal(t, "deadline exceeded before start", r.Error)
	notHeld(t, c, "t2")

	// Not held at all.
	_, err = c.Approve(ctxT(t), "nope", "x", "", "bob")
	require.Equal(t, "no held call nope", refusal(t, err))
}

func TestApprovalGateOnlyForWhatThePolicyNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPersonality("ops", approvalDoc)
	e.start(worker.Config{})
	// Another value of the when argument, a call without it, and a dry run
	// never wait.
	for _, tc := range []struct {
		id   string
		args string
		dry  bool
	}{{"n1", `{"text":"hello"}`, false}, {"n2", `{"text":"hello","sleep_ms":6}`, false}, {"n3", `{"text":"pay"}`, true}} {
		e.call(protocol.Call{CallID: tc.id, Tool: "echo", PersonalityID: "ops", Args: json.RawMessage(tc.args), DryRun: tc.dry})
		r := e.result(tc.id, tc.id)
		require.True(t, r.OK, "%s: %s", tc.id, r.Error)
	}
	// The second rule: a number compares as a number (5.0 is 5).
	c := e.approver("ops")
	e.call(protocol.Call{CallID: "n4", Tool: "echo", PersonalityID: "ops", Args: json.RawMessage(`{"text":"hello","sleep_ms":5.0}`)})
	held(t, c, "n4")
}

func TestApprovalWhoMayDecide(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPersonality("ops", approvalDoc+"  approvers: [oncall]\n")
	e.putPersonality("own", "id: own\napproval:\n  require: [{tool: echo}]\n  self: true\n")
	e.start(worker.Config{})
	ops := e.approver("ops")
	e.call(protocol.Call{CallID: "w1", Tool: "echo", PersonalityID: "ops", Args: json.RawMessage(`{"text":"pay"}`)})
	h := held(t, ops, "w1")
	_, err := ops.Approve(ctxT(t), "w1", h.ArgsSHA256, "", "mallory")
	require.Equal(t, "mallory is not an approver of personality ops (approval.approvers)", refusal(t, err))
	_, err = ops.ApproveOwn(ctxT(t), "w1", h.ArgsSHA256, "", "caller")
	require.Equal(t, "personality ops does not let a caller approve its own calls (approval.self is false)", refusal(t, err))
	_, err = ops.Approve(ctxT(t), "w1", h.ArgsSHA256, "", "oncall")
	require.NoError(t, err)
	require.True(t, e.result("w1", "w1").OK)

	own := e.approver("own")
	reqs := make(chan client.ApprovalRequest, 4)
	stop, err := own.ApprovalRequests(ctxT(t), true, func(r client.ApprovalRequest) { reqs <- r })
	require.NoError(t, err)
	defer stop()
	e.call(protocol.Call{CallID: "s1", Tool: "echo", PersonalityID: "own", Args: json.RawMessage(`{"text":"mine"}`)})
	var req client.ApprovalRequest
	select {
	case req = <-reqs:
	case <-time.After(30 * time.Second):
		t.Fatal("no approval_required event")
	}
	require.Equal(t, "s1", req.CallID)
	_, err = own.ApproveOwn(ctxT(t), "s1", req.ArgsSHA256, "", "caller")
	require.NoError(t, err)
	require.True(t, e.result("s1", "s1").OK)
}

func TestApprovalRacingApproversOneWins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPersonality("ops", approvalDoc)
	e.start(worker.Config{})
	e.start(worker.Config{WorkerID: "second"})
	c := e.approver("ops")
	e.call(protocol.Call{CallID: "r1", Tool: "echo", PersonalityID: "ops", Args: json.RawMessage(`{"text":"pay"}`)})
	h := held(t, c, "r1")
	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []string
	var refused []string
	for i := range n {
		wg.Go(func() {
			by := "approver" + string(rune('a'+i))
			var err error
			if i%2 == 0 {
				_, err = c.Approve(context.Background(), "r1", h.ArgsSHA256, "", by)
			} else {
				_, err = c.Deny(context.Background(), "r1", "no", by)
			}
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won = append(won, by)
				return
			}
			refused = append(refused, refusal(t, err))
		})
	}
	wg.Wait()
	require.Len(t, won, 1, "refusals: %v", refused)
	for _, r := range refused {
		require.Regexp(t, `^(already (approved|denied) by `+won[0]+`|no held call r1)$`, r)
	}
	e.result("r1", "r1")
	e.waitCallsDrained()
	require.Equal(t, 1, e.resultsOn("r1", "r1"))
}

func TestApprovedCallRunsOnlyWithTheApprovedArguments(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPersonality("ops", approvalDoc)
	e.start(worker.Config{})
	c := e.approver("ops")
	e.call(protocol.Call{CallID: "m1", Tool: "echo", PersonalityID: "ops", Args: json.RawMessage(`{"text":"pay"}`)})
	h := held(t, c, "m1")
	_, err := c.Approve(ctxT(t), "m1", h.ArgsSHA256, "", "alice")
	require.NoError(t, err)
	require.True(t, e.result("m1", "m1").OK)
	// A forged copy that claims the approval with other arguments.
	body := `{"call_id":"m2","tool":"echo","args":{"text":"refund"},"session_id":"s"}`
	kvs, err := e.conn.KV(ctxT(t), bus.Approvals)
	require.NoError(t, err)
	ent, found, err := kvs.Get(ctxT(t), protocol.DecisionKey("ops", "m1"))
	require.NoError(t, err)
	require.True(t, found)
	_, err = kvs.Create(ctxT(t), protocol.DecisionKey("ops", "m2"), ent.Value, 0)
	require.NoError(t, err)
	_, err = e.conn.Publish(ctxT(t), "capstan.call.default.ops.echo", []byte(body),
		bus.Header{protocol.HeaderProtocol: {protocol.Version}, protocol.HeaderApproval: {"approved"}}, "m2")
	require.NoError(t, err)
	r := e.result("m2", "m2")
	require.False(t, r.OK)
	require.Equal(t, "approval does not match the call's arguments", r.Error)
}

func TestHeldCallsTakeNoSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPersonality("ops", approvalDoc)
	e.start(worker.Config{Concurrency: 1})
	c := e.approver("ops")
	for _, id := range []string{"h1", "h2", "h3", "h4"} {
		e.call(protocol.Call{CallID: id, Tool: "echo", PersonalityID: "ops", Args: json.RawMessage(`{"text":"pay"}`)})
	}
	for _, id := range []string{"h1", "h2", "h3", "h4"} {
		held(t, c, id)
	}
	e.call(protocol.Call{CallID: "free", Tool: "echo", PersonalityID: "ops", Args: json.RawMessage(`{"text":"other"}`)})
	require.True(t, e.result("free", "free").OK)
}
