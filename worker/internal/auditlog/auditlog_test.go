package auditlog

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// published is one message a Log stored.
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
	a := &Log{
		Limit: func() int { return 12 },
		Publish: func(_ context.Context, subject string, body []byte, n int) error {
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
	r1 := a.Write("audit.echo", []byte("r1-a\n"))
	<-first
	r2 := a.Write("audit.echo", []byte("r2-a\n"))
	r3 := a.Write("audit.file", []byte("r3-b\n"))
	r4 := a.Write("audit.echo", []byte("r4-a\n"))
	r5 := a.Write("audit.echo", []byte("r5-a\n"))
	r6 := a.Write("audit.file", []byte("bad-\n"))
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
		return !a.Flushing()
	}, 10*time.Second, time.Millisecond, "the flusher stops when the queue is empty")
}

func TestAuditLogRecordLargerThanTheLimitGoesAlone(t *testing.T) {
	t.Parallel()
	var bodies []string
	a := &Log{
		Limit: func() int { return 4 },
		Publish: func(_ context.Context, _ string, body []byte, _ int) error {
			bodies = append(bodies, string(body))
			return nil
		},
	}
	require.NoError(t, <-a.Write("s", []byte("a long record\n")))
	require.Equal(t, []string{"a long record\n"}, bodies)
}
