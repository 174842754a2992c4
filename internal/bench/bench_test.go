package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bench"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunSmoke runs every scenario once, very briefly, and checks the shape
// of the report: every scenario, sane non-zero numbers, ratios, targets, and
// JSON that reads back. It never checks a timing threshold.
func TestRunSmoke(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Repeats: 1,
		Concurrency: 4, SleepConcurrency: 8, Rate: 200, ArgBytes: 256, DataDir: t.TempDir(), Progress: &progress,
	})
	require.NoError(t, err)

	want := bench.Scenarios(bench.Config{})
	require.Len(t, rep.Scenarios, len(want))
	for i, s := range rep.Scenarios {
		require.Equal(t, want[i].Name, s.Name)
		require.Len(t, s.Runs, 1, s.Name)
		r := s.Runs[0]
		require.Zero(t, r.Errors, "%s: %s", s.Name, r.FirstError)
		require.Positive(t, r.Calls, s.Name)
		require.Positive(t, r.CallsPerSec, s.Name)
		require.Positive(t, r.Samples, s.Name)
		require.Positive(t, r.P50MS, s.Name)
		require.LessOrEqual(t, r.P50MS, r.P99MS, s.Name)
		require.LessOrEqual(t, r.P99MS, r.P999MS, s.Name)
		require.LessOrEqual(t, r.P999MS, r.MaxMS, s.Name)
		require.Greater(t, r.CallBytes, int64(256), "%s: args of 256 bytes in a call envelope", s.Name)
		require.Less(t, r.CallBytes, int64(256+160), s.Name)
		require.Greater(t, r.ResultBytes, int64(200), "%s: the result carries the text back", s.Name)
		require.Positive(t, r.AllocBytesPerCall, s.Name)
		require.Equal(t, s.CallsPerSec.Median, s.CallsPerSec.Min, "one run: median = min = max")
		if s.Tracing {
			require.Positive(t, r.SpansExported, "%s: spans reach the exporter", s.Name)
		}
		if s.SleepMS > 0 {
			require.GreaterOrEqual(t, r.P50MS, float64(s.SleepMS), "%s: the call waits sleep_ms", s.Name)
		}
	}
	require.Len(t, rep.Ratios, 6, "every capstan scenario has its raw counterpart")
	for _, r := range rep.Ratios {
		require.Positive(t, r.Throughput, r.Capstan)
	}
	require.Len(t, rep.Targets, 2)
	for _, tg := range rep.Targets {
		require.False(t, tg.Absent, tg.Name)
	}
	require.Contains(t, progress.String(), "capstan-echo-traced/saturate")

	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var back bench.Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back), js.String())
	require.Equal(t, rep.Scenarios[0].Runs[0].Calls, back.Scenarios[0].Runs[0].Calls)
	require.Equal(t, bench.Duration(300*time.Millisecond), back.Config.Duration)

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	for _, s := range want {
		require.Contains(t, table.String(), s.Name)
	}
	require.Contains(t, table.String(), "capstan-echo/saturate / raw-echo/saturate")
}

func TestScenarioSelection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		pick []string
		want []string
	}{
		{"all", nil, []string{
			"raw-echo/saturate", "capstan-echo/saturate", "capstan-echo-traced/saturate", "raw-sleep10/saturate", "capstan-sleep10/saturate",
			"raw-echo/rate", "capstan-echo/rate", "capstan-echo-traced/rate", "raw-sleep10/rate", "capstan-sleep10/rate"}},
		{"exact", []string{"capstan-echo/rate"}, []string{"capstan-echo/rate"}},
		{"family", []string{"capstan-echo"}, []string{"capstan-echo/saturate", "capstan-echo/rate"}},
		{"system", []string{"raw"}, []string{"raw-echo/saturate", "raw-sleep10/saturate", "raw-echo/rate", "raw-sleep10/rate"}},
		{"load", []string{"rate", "capstan-echo-traced"}, []string{"capstan-echo-traced/saturate",
			"raw-echo/rate", "capstan-echo/rate", "capstan-echo-traced/rate", "raw-sleep10/rate", "capstan-sleep10/rate"}},
		{"none", []string{"nope"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, s := range bench.Scenarios(bench.Config{Scenarios: tc.pick}) {
				got = append(got, s.Name)
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestConfigIsValidated(t *testing.T) {
	t.Parallel()
	_, err := bench.Run(context.Background(), bench.Config{Duration: -time.Second, Repeats: -1, ArgBytes: 10})
	require.ErrorContains(t, err, "duration must be positive, got -1s")
	require.ErrorContains(t, err, "repeats must be at least 1, got -1")
	require.ErrorContains(t, err, "arg bytes must be 64 to 524288, got 10")
	_, err = bench.Run(context.Background(), bench.Config{Scenarios: []string{"nope"}})
	require.ErrorContains(t, err, `no scenario matches ["nope"]`)
}
