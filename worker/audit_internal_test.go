package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCancelBook(t *testing.T) {
	t.Parallel()
	f := inflight{calls: map[string]*running{}, cancelTTL: time.Hour}
	// A request before the call starts: the call gets it as its pending
	// cause, only under the personality the request names.
	f.cancelled("alpha", "c1", cancelRecord{Reason: "stop", At: time.Now()})
	r := &running{personality: "alpha"}
	ok, _ := f.add("c1", r)
	require.True(t, ok)
	require.EqualError(t, r.pendingCause(), "cancelled: stop")
	other := &running{personality: "beta"}
	f.remove("c1")
	ok, _ = f.add("c1", other)
	require.True(t, ok)
	require.NoError(t, other.pendingCause(), "a request names its personality")

	// A request while the call runs cancels it.
	run := &running{personality: "beta"}
	ok, _ = f.add("c2", run)
	require.True(t, ok)
	var cause error
	run.setCancel(func(err error) { cause = err })
	require.True(t, f.cancelled("beta", "c2", cancelRecord{Reason: "now", At: time.Now()}))
	require.EqualError(t, cause, "cancelled: now")
	require.False(t, f.cancelled("beta", "c3", cancelRecord{Reason: "later", At: time.Now()}), "not running here")

	// Requests older than the TTL are forgotten at the next sweep.
	f.cancelTTL = time.Minute
	f.sweptAt = time.Time{}
	f.cancels["old.c4"] = cancelRecord{Reason: "old", At: time.Now().Add(-2 * time.Minute)}
	f.cancelled("beta", "c5", cancelRecord{Reason: "new", At: time.Now()})
	require.NotContains(t, f.cancels, "old.c4")
	require.Contains(t, f.cancels, "beta.c5")
}
