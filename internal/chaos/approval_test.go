package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

const (
	// gatedDoc holds every echo call for a decision that never expires
	// within the test; expiringDoc lets its holds expire after
	// expiringTimeout.
	gatedDoc        = "id: gated\napproval:\n  require: [{tool: echo}]\n  timeout: 1h\n"
	expiringTimeout = 20 * time.Second
	expiringDoc     = "id: expiring\napproval:\n  require: [{tool: echo}]\n  timeout: 20s\n"
	approverName    = "chaos-approver"
	echoOnly        = "CAPSTAN_TOOLS=echo"
	denyReason      = "not during the drill"
)

// heldOutcome is what a held call of TestHeldCallsSurviveKillsAndNATSRestart
// is meant to end as.
type heldOutcome string

const (
	outApproved heldOutcome = protocol.ApprovalApproved
	outDenied   heldOutcome = protocol.ApprovalDenied
	outExpired  heldOutcome = protocol.ApprovalExpired
)

// heldCall is one call of the test and its fate.
type heldCall struct {
	id, personality string
	args            string
	want            heldOutcome
}

// TestHeldCallsSurviveKillsAndNATSRestart holds 20 calls for approval on two
// worker binaries, kills both with SIGKILL, restarts the NATS server on the
// same store and starts fresh workers: every hold is still listed with its
// arguments' hash. Half are approved and a quarter denied by concurrent
// decision requests while a third worker, which answers decision requests,
// acts on decisions and times holds but runs no call of the pool (pool
// "side"), is killed with SIGKILL in the middle of them; the last quarter
// expires. Every call gets exactly one result (approved: ok, and the echo
// body ran exactly once; denied: APPROVAL_DENIED; expired:
// APPROVAL_EXPIRED), every decision is stored once and audited once (its
// record, Nats-Msg-Id <call>.approval, stored once), and nothing is left
// held or unacknowledged.
func TestHeldCallsSurviveKillsAndNATSRestart(t *testing.T) {
	t.Parallel()
	const (
		n     = 20
		batch = "held"
	)
	srv := bustest.NewRestartable(t)
	url := srv.URL()
	conn := bustest.Conn(t, url, "")
	putDefaultPersonality(t, conn)
	kv, err := conn.KV(ctxT(t, time.Minute), bus.Personalities)
	require.NoError(t, err)
	for id, doc := range map[string]string{"gated": gatedDoc, "expiring": expiringDoc} {
		_, err = kv.Put(ctxT(t, time.Minute), id, []byte(doc))
		require.NoError(t, err)
	}
	approver, err := client.New(ctxT(t, time.Minute), client.Config{NATSURL: url, NATSCreds: bustest.Creds(url), Personality: "gated"})
	require.NoError(t, err)
	t.Cleanup(approver.Close)

	calls := make([]heldCall, n)
	byID := map[string]*heldCall{}
	for i := range calls {
		c := heldCall{id: fmt.Sprintf("held-%02d", i), personality: "gated", want: outApproved}
		switch {
		case i >= 3*n/4:
			c.personality, c.want = "expiring", outExpired
		case i >= n/2:
			c.want = outDenied
		}
		c.args = fmt.Sprintf(`{"text":%q,"progress":[{"message":"started"}]}`, c.id)
		calls[i] = c
		byID[c.id] = &calls[i]
	}
	ids := make([]string, n)
	for i, c := range calls {
		ids[i] = c.id
	}

	// Held on two workers.
	first := []*proc{startProc(t, url, "held-a", echoOnly), startProc(t, url, "held-b", echoOnly)}
	for _, c := range calls {
		body := fmt.Appendf(nil, `{"call_id":%q,"batch_id":%q,"tool":"echo","session_id":"chaos","personality_id":%q,"args":%s}`,
			c.id, batch, c.personality, c.args)
		require.NoError(t, publishOn(ctxT(t, time.Minute), conn, "capstan.call.default."+c.personality+".echo", c.id, body))
	}
	holds := waitHolds(t, approver, ids, time.Minute)
	for _, c := range calls {
		sum, err := approval.ArgsSHA256(c.personality, "echo", json.RawMessage(c.args))
		require.NoError(t, err)
		require.Equal(t, sum, holds[c.id].ArgsSHA256, "%s: the hold's hash is the call's", c.id)
	}

	// Every worker killed, the server restarted, fresh workers.
	for _, p := range first {
		p.kill(t)
	}
	srv.Stop()
	srv.Start()
	startProc(t, url, "held-c", echoOnly)
	startProc(t, url, "held-d", echoOnly)
	// A tool name belongs to one pool: the side worker hosts another.
	side := startProc(t, url, "held-side", "CAPSTAN_POOL=side", "CAPSTAN_TOOLS=read_file")

	// Still held, with the same hashes. A hold of the expiring personality
	// may have ended meanwhile only if its time has come, and then as
	// expired.
	after := listHolds(t, approver)
	expiredEarly := 0
	for _, c := range calls {
		h, ok := after[c.id]
		if !ok && c.want == outExpired && !time.Now().Before(holds[c.id].ExpiresAt) {
			expiredEarly++
			continue
		}
		require.True(t, ok, "%s: hold lost (held %d of %d after the restart)", c.id, len(after), n)
		require.Equal(t, holds[c.id].ArgsSHA256, h.ArgsSHA256, c.id)
	}

	// Decisions, concurrently, with the side worker killed half-way.
	var (
		wg       sync.WaitGroup
		decided  atomic.Int32
		retried  atomic.Int32
		errMu    sync.Mutex
		decErrs  []error
		sem      = make(chan struct{}, 4)
		toDecide []heldCall
	)
	for _, c := range calls {
		if c.want != outExpired {
			toDecide = append(toDecide, c)
		}
	}
	for _, c := range toDecide {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := decideRetrying(approver, c.id, c.want, holds[c.id].ArgsSHA256, time.Minute)
			retried.Add(int32(r))
			if err != nil {
				errMu.Lock()
				decErrs = append(decErrs, err)
				errMu.Unlock()
			}
			decided.Add(1)
		})
	}
	require.Eventually(t, func() bool { return int(decided.Load()) >= len(toDecide)/2 }, 2*time.Minute, 5*time.Millisecond)
	side.kill(t)
	wg.Wait()
	require.NoError(t, errors.Join(decErrs...))

	// Every call answered once, nothing left unacknowledged or held.
	tl := waitResultsOf(t, conn, "*", batch, ids, 3*time.Minute)
	requireExactlyOnce(t, tl, ids)
	retryFor(t, time.Minute, 100*time.Millisecond, "no hold left", func() error {
		hs, err := approver.Holds(ctxT(t, 10*time.Second), "")
		if err == nil && len(hs) > 0 {
			err = fmt.Errorf("%d calls still held, the first %s", len(hs), hs[0].CallID)
		}
		return err
	})
	for _, c := range calls {
		r := tl.results[c.id][0]
		switch c.want {
		case outApproved:
			require.True(t, r.OK, "%s: %s", c.id, r.Error)
			require.Equal(t, c.id, r.Value)
			require.Equal(t, 1, tl.executions[c.id], "%s: the approved call ran once", c.id)
		case outDenied:
			require.Equal(t, protocol.CodeNotAvailable, r.Code, c.id)
			require.Equal(t, "APPROVAL_DENIED: "+denyReason, r.Error, c.id)
			require.Zero(t, tl.executions[c.id], "%s: a denied call never runs", c.id)
		case outExpired:
			require.Equal(t, protocol.CodeNotAvailable, r.Code, c.id)
			require.Equal(t, "APPROVAL_EXPIRED: no decision within 20s", r.Error, c.id)
			require.Zero(t, tl.executions[c.id], "%s: an expired call never runs", c.id)
		}
	}

	// One stored decision per call, as wanted.
	decs, err := approver.Decisions(ctxT(t, time.Minute), "")
	require.NoError(t, err)
	stored := map[string]client.DecidedCall{}
	for _, d := range decs {
		if byID[d.Hold.CallID] != nil {
			_, dup := stored[d.Hold.CallID]
			require.False(t, dup, "%s: two stored decisions", d.Hold.CallID)
			stored[d.Hold.CallID] = d
		}
	}
	require.Len(t, stored, n)
	for _, c := range calls {
		require.Equal(t, string(c.want), stored[c.id].Decision, c.id)
	}

	// Audit: one decision record per call, and one record of the call's
	// own answer (allowed for an approved call: the body ran once).
	var aud auditTally
	retryFor(t, time.Minute, 200*time.Millisecond, "every audit record stored", func() error {
		aud, err = countAudit(ctxT(t, time.Minute), conn, byID)
		if err == nil {
			err = aud.missing(calls)
		}
		return err
	})
	for _, c := range calls {
		require.Len(t, aud.decision[c.id], 1, "%s: one stored decision record", c.id)
		rec := aud.decision[c.id][0]
		require.Equal(t, protocol.DecisionApproval, rec.Decision, c.id)
		require.NotNil(t, rec.Approval, c.id)
		require.Equal(t, string(c.want), rec.Approval.Decision, c.id)
		require.Equal(t, holds[c.id].ArgsSHA256, rec.Approval.ArgsSHA256, c.id)
		require.Len(t, aud.answer[c.id], 1, "%s: one record of the call's answer", c.id)
		ans := aud.answer[c.id][0]
		switch c.want {
		case outApproved:
			require.Equal(t, approverName, rec.Approval.By, c.id)
			require.Equal(t, protocol.DecisionAllowed, ans.Decision, c.id)
			require.True(t, ans.OK, c.id)
			require.NotNil(t, ans.Approval, c.id)
			require.Equal(t, approverName, ans.Approval.By, c.id)
		case outDenied:
			require.Equal(t, approverName, rec.Approval.By, c.id)
			require.Equal(t, protocol.DecisionApproval, ans.Decision, c.id)
			require.False(t, ans.OK, c.id)
		case outExpired:
			require.Empty(t, rec.Approval.By, c.id)
			require.Equal(t, protocol.DecisionApproval, ans.Decision, c.id)
			require.False(t, ans.OK, c.id)
		}
	}
	actedBySide := 0
	for _, recs := range aud.decision {
		if recs[0].WorkerID == "held-side" {
			actedBySide++
		}
	}
	t.Logf("calls=%d kills=3 (2 while held, 1 mid-decisions) server_restarts=1 approved=%d denied=%d expired=%d (before the check: %d) "+
		"decision_requests_resent=%d decisions_acted_on_by_the_killed_worker=%d lost=0 duplicated=0",
		n, n/2, n/4, n-3*n/4, expiredEarly, retried.Load(), actedBySide)
}

// publishOn is publishCall on any call subject.
func publishOn(ctx context.Context, conn *bus.Conn, subject, id string, body []byte) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := conn.Publish(pctx, subject, body, bus.Header{protocol.HeaderProtocol: {protocol.Version}}, id)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("publish %s: %w (last error: %v)", id, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// listHolds returns the pending holds of every personality by call id,
// retrying while the bus recovers.
func listHolds(t *testing.T, c *client.Client) map[string]client.Hold {
	t.Helper()
	var out map[string]client.Hold
	retryFor(t, time.Minute, 100*time.Millisecond, "list holds", func() error {
		hs, err := c.Holds(ctxT(t, 10*time.Second), "")
		if err != nil {
			return err
		}
		out = make(map[string]client.Hold, len(hs))
		for _, h := range hs {
			out[h.CallID] = h
		}
		return nil
	})
	return out
}

// waitHolds waits until every id is listed as held and returns the holds.
func waitHolds(t *testing.T, c *client.Client, ids []string, d time.Duration) map[string]client.Hold {
	t.Helper()
	var hs map[string]client.Hold
	retryFor(t, d, 50*time.Millisecond, "every call held", func() error {
		hs = listHolds(t, c)
		if missing := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { _, ok := hs[id]; return ok }); len(missing) > 0 {
			return fmt.Errorf("%d of %d calls held; not held: %v", len(ids)-len(missing), len(ids), missing)
		}
		return nil
	})
	return hs
}

// decideRetrying approves (with sum) or denies call as approverName until a
// decision is stored: a request lost with the worker that took it is sent
// again, and a refusal saying the call was already decided that way by
// approverName counts as done (the lost request was stored). It returns
// how many requests were sent again.
func decideRetrying(c *client.Client, call string, want heldOutcome, sum string, d time.Duration) (retries int, err error) {
	already := "already " + string(want) + " by " + approverName
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if want == outApproved {
			_, err = c.Approve(ctx, call, sum, "drill", approverName)
		} else {
			_, err = c.Deny(ctx, call, denyReason, approverName)
		}
		cancel()
		var refused *client.DecisionRefusedError
		switch {
		case err == nil:
			return retries, nil
		case errors.As(err, &refused) && refused.Reason == already:
			return retries, nil
		case errors.As(err, &refused):
			return retries, fmt.Errorf("%s: refused: %s", call, refused.Reason)
		case time.Now().After(deadline):
			return retries, fmt.Errorf("%s: no decision stored within %s: %w", call, d, err)
		}
		retries++
		time.Sleep(100 * time.Millisecond)
	}
}

// auditTally is the audit records of the test's calls: the decisions'
// (the messages with Nats-Msg-Id <call>.approval) and the calls' own.
type auditTally struct {
	decision map[string][]protocol.AuditRecord
	answer   map[string][]protocol.AuditRecord
}

// missing names the first call without its decision's record or its
// answer's; nil when none is missing.
func (a auditTally) missing(calls []heldCall) error {
	for _, c := range calls {
		if len(a.decision[c.id]) == 0 {
			return fmt.Errorf("%s: no decision record", c.id)
		}
		if len(a.answer[c.id]) == 0 {
			return fmt.Errorf("%s: no record of its answer", c.id)
		}
	}
	return nil
}

// countAudit reads every stored audit record of echo and sorts those of
// the calls of byID.
func countAudit(ctx context.Context, conn *bus.Conn, byID map[string]*heldCall) (auditTally, error) {
	a := auditTally{decision: map[string][]protocol.AuditRecord{}, answer: map[string][]protocol.AuditRecord{}}
	msgs, err := conn.Messages(ctx, "CAPSTAN_AUDIT", "capstan.audit.echo")
	if err != nil {
		return a, err
	}
	for _, m := range msgs {
		recs, err := protocol.DecodeAuditRecords(m.Data)
		if err != nil {
			return a, fmt.Errorf("audit message %d: %w", m.StreamSeq, err)
		}
		msgID := m.Header.Get("Nats-Msg-Id")
		for _, rec := range recs {
			if byID[rec.CallID] == nil {
				continue
			}
			if msgID == protocol.ApprovalAuditMsgID(rec.CallID) {
				if len(recs) != 1 {
					return a, fmt.Errorf("decision record of %s in a message of %d records", rec.CallID, len(recs))
				}
				a.decision[rec.CallID] = append(a.decision[rec.CallID], rec)
				continue
			}
			a.answer[rec.CallID] = append(a.answer[rec.CallID], rec)
		}
	}
	return a, nil
}
