package cancelbook

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCancelBook(t *testing.T) {
	t.Parallel()
	f := New(time.Hour)
	// A request before the call starts: the call gets it as its pending
	// cause, only under the personality the request names.
	f.Cancelled("alpha", "c1", Record{Reason: "stop", At: time.Now()})
	r := &Call{Personality: "alpha"}
	ok, _ := f.Add("c1", r)
	require.True(t, ok)
	require.EqualError(t, r.PendingCause(), "cancelled: stop")
	other := &Call{Personality: "beta"}
	f.Remove("c1")
	ok, _ = f.Add("c1", other)
	require.True(t, ok)
	require.NoError(t, other.PendingCause(), "a request names its personality")

	// A request while the call runs cancels it.
	run := &Call{Personality: "beta"}
	ok, _ = f.Add("c2", run)
	require.True(t, ok)
	var cause error
	run.SetCancel(func(err error) { cause = err })
	require.True(t, f.Cancelled("beta", "c2", Record{Reason: "now", At: time.Now()}))
	require.EqualError(t, cause, "cancelled: now")
	require.False(t, f.Cancelled("beta", "c3", Record{Reason: "later", At: time.Now()}), "not running here")

	// Requests older than the TTL are forgotten at the next sweep.
	f.cancelTTL = time.Minute
	f.sweptAt = time.Time{}
	f.cancels["old.c4"] = Record{Reason: "old", At: time.Now().Add(-2 * time.Minute)}
	f.Cancelled("beta", "c5", Record{Reason: "new", At: time.Now()})
	require.NotContains(t, f.cancels, "old.c4")
	require.Contains(t, f.cancels, "beta.c5")
}

// TestStuckCallsForReadiness: a running call counts as stuck for /readyz
// once its result has been unpublishable for ResultStuckAfter, or its lease
// has not been refreshed for longer than AckWait since its last refresh;
// clearing the reason
// clears it. TestUnrefreshableLeaseTurnsReadinessRed shows the lease case
// end to end, with the leases bucket deleted under a running call.
func TestStuckCallsForReadiness(t *testing.T) {
	t.Parallel()
	const ackWait = 30 * time.Second
	f := New(time.Hour)
	pub := &Call{Personality: "p", Tool: "echo"}
	lease := &Call{Personality: "p", Tool: "deploy"}
	fine := &Call{Personality: "p", Tool: "echo"}
	for id, r := range map[string]*Call{"c-pub": pub, "c-lease": lease, "c-fine": fine} {
		ok, _ := f.Add(id, r)
		require.True(t, ok)
	}
	now := time.Now()
	require.Empty(t, f.Stuck(now, ackWait))

	pub.Stuck(StuckResult, errors.New("publish result: nats: maximum messages exceeded"))
	// A lease is unrefreshed since its last refresh, 10 s before its
	// first failed one.
	refreshed := now.Add(-10 * time.Second)
	lease.StuckSince(StuckLease, refreshed, errors.New("kv update: timeout"))
	lease.StuckSince(StuckLease, now, errors.New("kv update: no responders")) // the last error, the first time
	require.Empty(t, f.Stuck(now.Add(time.Second), ackWait), "not yet: a publish may fail for a moment")

	later := now.Add(ResultStuckAfter + time.Second)
	require.Equal(t, []string{"call c-pub (echo): result unpublishable for 6s: publish result: nats: maximum messages exceeded"},
		f.Stuck(later, ackWait), "a lease may fail to refresh for up to AckWait")

	leaseOnly := func(at time.Time) []string {
		return slices.DeleteFunc(f.Stuck(at, ackWait), func(s string) bool { return !strings.Contains(s, "c-lease") })
	}
	require.Empty(t, leaseOnly(refreshed.Add(ackWait)), "the lease not yet unrefreshed for longer than AckWait")
	require.Equal(t, []string{"call c-lease (deploy): lease not refreshed for 31s: kv update: no responders"},
		leaseOnly(refreshed.Add(ackWait+time.Second)), "AckWait after the last refresh, not after the first failure")

	later = now.Add(ackWait + 2*time.Second)
	require.Equal(t, []string{
		"call c-lease (deploy): lease not refreshed for 42s: kv update: no responders",
		"call c-pub (echo): result unpublishable for 32s: publish result: nats: maximum messages exceeded",
	}, f.Stuck(later, ackWait))

	pub.Unstuck(StuckResult)
	lease.Unstuck(StuckLease)
	require.Empty(t, f.Stuck(later, ackWait))
}
