package worker

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStuckCallsForReadiness: a running call counts as stuck for /readyz
// once its result has been unpublishable for resultStuckAfter, or its lease
// has not been refreshed for longer than AckWait since its last refresh;
// clearing the reason
// clears it. TestUnrefreshableLeaseTurnsReadinessRed shows the lease case
// end to end, with the leases bucket deleted under a running call.
func TestStuckCallsForReadiness(t *testing.T) {
	t.Parallel()
	const ackWait = 30 * time.Second
	f := inflight{calls: map[string]*running{}, cancelTTL: time.Hour}
	pub := &running{personality: "p", tool: "echo"}
	lease := &running{personality: "p", tool: "deploy"}
	fine := &running{personality: "p", tool: "echo"}
	for id, r := range map[string]*running{"c-pub": pub, "c-lease": lease, "c-fine": fine} {
		ok, _ := f.add(id, r)
		require.True(t, ok)
	}
	now := time.Now()
	require.Empty(t, f.stuck(now, ackWait))

	pub.stuck(stuckResult, errors.New("publish result: nats: maximum messages exceeded"))
	// A lease is unrefreshed since its last refresh, 10 s before its
	// first failed one.
	refreshed := now.Add(-10 * time.Second)
	lease.stuckSince(stuckLease, refreshed, errors.New("kv update: timeout"))
	lease.stuckSince(stuckLease, now, errors.New("kv update: no responders")) // the last error, the first time
	require.Empty(t, f.stuck(now.Add(time.Second), ackWait), "not yet: a publish may fail for a moment")

	later := now.Add(resultStuckAfter + time.Second)
	require.Equal(t, []string{"call c-pub (echo): result unpublishable for 6s: publish result: nats: maximum messages exceeded"},
		f.stuck(later, ackWait), "a lease may fail to refresh for up to AckWait")

	leaseOnly := func(at time.Time) []string {
		return slices.DeleteFunc(f.stuck(at, ackWait), func(s string) bool { return !strings.Contains(s, "c-lease") })
	}
	require.Empty(t, leaseOnly(refreshed.Add(ackWait)), "the lease not yet unrefreshed for longer than AckWait")
	require.Equal(t, []string{"call c-lease (deploy): lease not refreshed for 31s: kv update: no responders"},
		leaseOnly(refreshed.Add(ackWait+time.Second)), "AckWait after the last refresh, not after the first failure")

	later = now.Add(ackWait + 2*time.Second)
	require.Equal(t, []string{
		"call c-lease (deploy): lease not refreshed for 42s: kv update: no responders",
		"call c-pub (echo): result unpublishable for 32s: publish result: nats: maximum messages exceeded",
	}, f.stuck(later, ackWait))

	pub.unstuck(stuckResult)
	lease.unstuck(stuckLease)
	require.Empty(t, f.stuck(later, ackWait))
}
