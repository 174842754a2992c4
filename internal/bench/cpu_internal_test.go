package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseProcStatCPU(t *testing.T) {
	t.Parallel()
	// Fields 14 and 15 (utime, stime) are 250 and 50 ticks.
	const tail = " S 1 2 3 4 5 6 7 8 9 10 250 50 11 12 20 0 9 0 100 200 300"
	for _, tc := range []struct {
		name, line string
		want       time.Duration
		err        string
	}{
		{"plain", "42 (capstan-bench)" + tail, 3 * time.Second, ""},
		{"spaces and parentheses in the name", "42 (a) (b c))" + tail, 3 * time.Second, ""},
		{"no name", "42 capstan-bench" + tail, 0, "no ')' closing the command name"},
		{"short", "42 (x) S 1 2", 0, "3 fields after the command name, want at least 13"},
		{"not a number", "42 (x) S 1 2 3 4 5 6 7 8 9 10 2x 50", 0, `utime or stime "2x" is not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseProcStatCPU(tc.line)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func FuzzParseProcStatCPU(f *testing.F) {
	f.Add("42 (capstan-bench) S 1 2 3 4 5 6 7 8 9 10 250 50 11")
	f.Add("1 ()) R 0 0 0 0 0 0 0 0 0 0 0 0 0")
	f.Add(")")
	f.Fuzz(func(t *testing.T, line string) {
		d, err := parseProcStatCPU(line)
		if err == nil && d < 0 {
			t.Fatalf("negative CPU time %s from %q", d, line)
		}
	})
}

// TestCPUOfThisProcess reads this process's CPU time both ways (getrusage
// and /proc/<pid>/stat), after burning some, and samples a window.
func TestCPUOfThisProcess(t *testing.T) {
	t.Parallel()
	before, err := processCPU()
	require.NoError(t, err)
	x := 0
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); {
		x++
	}
	require.Positive(t, x)
	after, err := processCPU()
	require.NoError(t, err)
	require.Greater(t, after, before)
	proc, err := pidCPU(os.Getpid())
	require.NoError(t, err)
	require.Positive(t, proc, "/proc/<pid>/stat counts the time spent so far")

	from := time.Now()
	w := <-sampleCPU(context.Background(), from, from.Add(20*time.Millisecond), os.Getpid())
	require.NoError(t, w.err)
	require.GreaterOrEqual(t, w.process, time.Duration(0))
	require.GreaterOrEqual(t, w.server, time.Duration(0))

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w = <-sampleCPU(ctx, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour), 0)
	require.ErrorIs(t, w.err, context.Canceled)

	_, err = pidCPU(-1)
	require.Error(t, err)
	require.Equal(t, 1.5, perCallUS(3*time.Millisecond, 2000))
	require.Zero(t, perCallUS(time.Second, 0))
	require.Equal(t, 0.5, cores(time.Second, 2*time.Second))
}
