package worker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// published is one message an auditLog stored.
type published struct {
	subject string
	body    string
	n       int
}

func TestAuditLogGroupCommit(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []published
	release := make(chan struct{})
	first := make(chan struct{})
	var once sync.Once
	fail := errors.New("bus down")
	a := &auditLog{
		limit: func() int { return 12 },
		publish: func(_ context.Context, subject string, body []byte, n int) error {
			once.Do(func() { close(first); <-release })
			mu.Lock()
			defer mu.Unlock()
			got = append(got, published{subject, string(body), n})
			if strings.Contains(string(body), "bad") {
				return fail
			}
			return nil
		},
	}
	wait := func(ch <-chan error) error {
		select {
		case err := <-ch:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("audit record not stored in 10s")
			return nil
		}
	}
	// The first record is stored alone, at once; what arrives while it is
	// being stored waits and goes out together, grouped by subject and cut
	// at the size limit (12 bytes: two 5-byte lines).
	r1 := a.write("audit.echo", []byte("r1-a\n"))
	<-first
	r2 := a.write("audit.echo", []byte("r2-a\n"))
	r3 := a.write("audit.file", []byte("r3-b\n"))
	r4 := a.write("audit.echo", []byte("r4-a\n"))
	r5 := a.write("audit.echo", []byte("r5-a\n"))
	r6 := a.write("audit.file", []byte("bad-\n"))
	close(release)
	for _, ch := range []<-chan error{r1, r2, r4, r5} {
		require.NoError(t, wait(ch))
	}
	// Every record of a message that failed is told so.
	require.ErrorIs(t, wait(r3), fail)
	require.ErrorIs(t, wait(r6), fail)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []published{
		{"audit.echo", "r1-a\n", 1},
		{"audit.echo", "r2-a\nr4-a\n", 2},
		{"audit.echo", "r5-a\n", 1},
		{"audit.file", "r3-b\nbad-\n", 2},
	}, got)
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return !a.flushing
	}, 10*time.Second, time.Millisecond, "the flusher stops when the queue is empty")
}

func TestAuditLogRecordLargerThanTheLimitGoesAlone(t *testing.T) {
	t.Parallel()
	var bodies []string
	a := &auditLog{
		limit: func() int { return 4 },
		publish: func(_ context.Context, _ string, body []byte, _ int) error {
			bodies = append(bodies, string(body))
			return nil
		},
	}
	require.NoError(t, <-a.write("s", []byte("a long record\n")))
	require.Equal(t, []string{"a long record\n"}, bodies)
}

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
