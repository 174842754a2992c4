package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bench"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRunSmoke runs every raw and Capstan scenario (all but the fairness
// ones, TestFairnessSmoke) once, very briefly, and checks the shape of the
// report: every scenario, sane non-zero numbers, ratios, targets, and JSON
// that reads back. It never checks a timing threshold.
func TestRunSmoke(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	loads := []string{bench.Saturate, bench.Rate}
	rep, err := bench.Run(ctx, bench.Config{
		Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Repeats: 1, Scenarios: loads,
		Concurrency: 4, SleepConcurrency: 8, Rate: 200, ArgBytes: 256, DataDir: t.TempDir(), Progress: &progress,
	})
	require.NoError(t, err)

	want := bench.Scenarios(bench.Config{Scenarios: loads})
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
		require.Positive(t, r.ProcessCPUUSPerCall, "%s: the process's CPU per call", s.Name)
		require.Positive(t, r.ProcessCPUCores, s.Name)
		require.Zero(t, r.ServerCPUUSPerCall, "%s: the server is this process's", s.Name)
		require.Equal(t, r.ProcessCPUUSPerCall, s.ProcessCPUUSPerCall.Median, s.Name)
		require.Nil(t, s.ServerCPUUSPerCall, s.Name)
		require.Equal(t, s.CallsPerSec.Median, s.CallsPerSec.Min, "one run: median = min = max")
		if s.Tracing {
			require.Positive(t, r.SpansExported, "%s: spans reach the exporter", s.Name)
		}
		if s.SleepMS > 0 {
			require.GreaterOrEqual(t, r.P50MS, float64(s.SleepMS), "%s: the call waits sleep_ms", s.Name)
		}
	}
	require.Len(t, rep.Ratios, 6, "every capstan scenario has its raw counterpart")
	byName := make(map[string]bench.Summary)
	for _, s := range rep.Scenarios {
		byName[s.Name] = s
	}
	for _, r := range rep.Ratios {
		require.Positive(t, r.Throughput, r.Capstan)
		want := byName[r.Capstan].ProcessCPUUSPerCall.Median - byName[r.Raw].ProcessCPUUSPerCall.Median
		require.InDelta(t, want, r.ProcessCPUDeltaUS, 0.051, "%s: Capstan's process CPU per call minus raw's", r.Capstan)
		require.Nil(t, r.ServerCPUDeltaUS, r.Capstan)
	}
	require.Len(t, rep.Targets, 6)
	for i, tg := range rep.Targets {
		require.Equal(t, i >= 2, tg.Absent, "%s: only the fairness and approvals targets are not measured", tg.Name)
	}
	require.Contains(t, progress.String(), "capstan-echo-traced/saturate")

	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var back bench.Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back), js.String())
	require.Equal(t, rep.Scenarios[0].Runs[0].Calls, back.Scenarios[0].Runs[0].Calls)
	require.Equal(t, bench.Duration(300*time.Millisecond), back.Config.Duration)
	require.Equal(t, rep.Scenarios[0].Runs[0].ProcessCPUUSPerCall, back.Scenarios[0].Runs[0].ProcessCPUUSPerCall)
	require.Equal(t, rep.Ratios[0].ProcessCPUDeltaUS, back.Ratios[0].ProcessCPUDeltaUS)
	requireJSONKeys(t, js.Bytes(), []string{"process_cpu_us_per_call", "process_cpu_cores", "process_cpu_delta_us"},
		[]string{"server_cpu_us_per_call", "server_cpu_cores", "server_cpu_delta_us"})

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	for _, s := range want {
		require.Contains(t, table.String(), s.Name)
	}
	require.Contains(t, table.String(), "capstan-echo/saturate / raw-echo/saturate")
	require.Contains(t, table.String(), "process CPU µs/call")
	require.Contains(t, table.String(), "process CPU Δ µs/call")
	require.NotContains(t, table.String(), "server CPU")
}

// TestRunReportsServerCPU runs echo against a server the harness did not
// start, naming a process as the server's (this one: the server runs in
// it), and checks that the report carries the server's CPU per call apart
// and its difference between Capstan and raw, in the runs, the summaries,
// the comparison, the JSON and the table.
func TestRunReportsServerCPU(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, dir := startServe(t, ctx)
	rep, err := bench.Run(ctx, bench.Config{
		Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Repeats: 1, Scenarios: []string{"raw-echo/saturate", "capstan-echo/saturate"},
		Concurrency: 4, ArgBytes: 256, ServerURL: c.URL(), ServerCreds: bench.ServeCredsFile(dir), ServerPID: os.Getpid(),
	})
	require.NoError(t, err)
	require.Len(t, rep.Scenarios, 2)
	for _, s := range rep.Scenarios {
		r := s.Runs[0]
		require.Zero(t, r.Errors, "%s: %s", s.Name, r.FirstError)
		require.Positive(t, r.ProcessCPUUSPerCall, s.Name)
		require.Positive(t, r.ServerCPUUSPerCall, s.Name)
		require.Positive(t, r.ServerCPUCores, s.Name)
		require.NotNil(t, s.ServerCPUUSPerCall, s.Name)
		require.Equal(t, r.ServerCPUUSPerCall, s.ServerCPUUSPerCall.Median, s.Name)
	}
	require.Len(t, rep.Ratios, 1)
	require.NotNil(t, rep.Ratios[0].ServerCPUDeltaUS)
	require.InDelta(t, rep.Scenarios[1].ServerCPUUSPerCall.Median-rep.Scenarios[0].ServerCPUUSPerCall.Median, *rep.Ratios[0].ServerCPUDeltaUS, 0.051)

	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	requireJSONKeys(t, js.Bytes(), []string{"process_cpu_us_per_call", "server_cpu_us_per_call", "server_cpu_cores", "server_cpu_delta_us"}, nil)
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	require.Contains(t, table.String(), "server CPU µs/call")
	require.Contains(t, table.String(), "server CPU Δ µs/call")
}

func TestServerPIDNeedsServerURL(t *testing.T) {
	t.Parallel()
	_, err := bench.Run(context.Background(), bench.Config{ServerPID: 1})
	require.ErrorContains(t, err, "server pid must be 0, or a process's with a server url, got 1")
}

// requireJSONKeys checks that the JSON document js has every key of want
// somewhere, and none of absent.
func requireJSONKeys(t *testing.T, js []byte, want, absent []string) {
	t.Helper()
	for _, k := range want {
		require.Contains(t, string(js), `"`+k+`":`, k)
	}
	for _, k := range absent {
		require.NotContains(t, string(js), `"`+k+`":`, k)
	}
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
			"raw-echo/rate", "capstan-echo/rate", "capstan-echo-traced/rate", "raw-sleep10/rate", "capstan-sleep10/rate",
			"fairness/flood", "fairness/weights", "fairness/many", "approvals/held"}},
		{"approvals", []string{"approvals"}, []string{"approvals/held"}},
		{"held", []string{"held"}, []string{"approvals/held"}},
		{"fairness", []string{"fairness"}, []string{"fairness/flood", "fairness/weights", "fairness/many"}},
		{"fairness load", []string{"weights", "capstan-echo/saturate"}, []string{"capstan-echo/saturate", "fairness/weights"}},
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
	_, err = bench.Run(context.Background(), bench.Config{FloodBacklog: -1, FloodSleepMS: -2, WeightsWindows: -1, ManyPersonalities: 10, ManyCalls: 200000})
	require.ErrorContains(t, err, "flood backlog must be 1 to 1000000, got -1")
	require.ErrorContains(t, err, "flood and weights sleep ms must be 1 to 10000, got -2 and 10")
	require.ErrorContains(t, err, "weights window must be positive and weights windows at least 1, got 10s and -1")
	require.ErrorContains(t, err, "many calls must be at least 1 and at most 1000000 in all, got 200000 for each of 10 personalities")
	_, err = bench.Run(context.Background(), bench.Config{HeldCalls: -1})
	require.ErrorContains(t, err, "held calls must be 1 to 100000, got -1")
	_, err = bench.Run(context.Background(), bench.Config{Scenarios: []string{"nope"}})
	require.ErrorContains(t, err, `no scenario matches ["nope"]`)
}

// TestFairnessSmoke runs the scheduling scenarios once, very briefly and
// small, and checks that each reports its measures. It never checks a
// timing threshold or a ratio's value.
func TestFairnessSmoke(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Repeats: 1, Scenarios: []string{bench.Fairness},
		Concurrency: 4, ArgBytes: 256, DataDir: t.TempDir(), Progress: &progress,
		FloodBacklog: 20, FloodSleepMS: 20, WeightsSleepMS: 5, WeightsWindow: 500 * time.Millisecond, WeightsWindows: 2,
		ManyPersonalities: 10, ManyCalls: 3,
	})
	require.NoError(t, err)
	require.Len(t, rep.Scenarios, 3)
	for _, s := range rep.Scenarios {
		require.Len(t, s.Runs, 1, s.Name)
		r := s.Runs[0]
		require.Zero(t, r.Errors, "%s: %s", s.Name, r.FirstError)
		require.Positive(t, r.Calls, s.Name)
		require.Positive(t, r.Published, s.Name)
		require.Contains(t, progress.String(), s.Name)
	}

	flood := rep.Scenarios[0]
	require.Equal(t, "fairness/flood", flood.Name)
	require.Equal(t, 20, flood.Backlog)
	f := flood.Runs[0].Flood
	require.NotNil(t, f)
	require.Equal(t, 20, f.Backlog)
	require.Positive(t, f.BAloneCalls)
	require.Positive(t, f.BCalls)
	require.GreaterOrEqual(t, f.BAloneP50MS, 20.0, "B's calls sleep 20 ms")
	require.GreaterOrEqual(t, f.BP50MS, 20.0)
	require.LessOrEqual(t, f.BP50MS, f.BP99MS)
	require.LessOrEqual(t, f.BP99MS, f.BMaxMS)
	require.Positive(t, f.ACallsPerSec)
	require.NotNil(t, flood.Flood)
	require.Equal(t, f.BP99MS, flood.Flood.BP99MS.Median)

	weights := rep.Scenarios[1]
	require.Equal(t, "fairness/weights", weights.Name)
	w := weights.Runs[0].Weights
	require.NotNil(t, w)
	require.Equal(t, 3, w.WeightA)
	require.Equal(t, 1, w.WeightB)
	require.Len(t, w.Ratios, 2, "two windows")
	require.Len(t, w.ACalls, 2)
	require.Len(t, w.BCalls, 2)
	// Windows this short can miss B on a loaded machine (its lane found
	// empty waits for the next discovery): the smoke asks that both were
	// served over the run and that every window counted calls.
	bTotal := 0
	for i := range w.Ratios {
		require.Positive(t, w.ACalls[i]+w.BCalls[i], "window %d", i)
		require.GreaterOrEqual(t, w.Ratios[i], 0.0, "window %d", i)
		bTotal += w.BCalls[i]
	}
	require.Positive(t, bTotal, "B served in some window: A %v, B %v", w.ACalls, w.BCalls)
	require.GreaterOrEqual(t, w.Ratio, 0.0)
	require.Equal(t, 2, weights.Weights.Windows)

	many := rep.Scenarios[2]
	require.Equal(t, "fairness/many", many.Name)
	m := many.Runs[0].Many
	require.NotNil(t, m)
	require.Equal(t, 10, m.Personalities)
	require.Equal(t, 3, m.CallsEach)
	require.Positive(t, m.SingleCallsPerSec)
	require.Positive(t, m.ManyCallsPerSec)
	require.Positive(t, m.SingleAfterCallsPerSec)
	require.Positive(t, m.Ratio)
	require.Positive(t, m.FirstCallsMS)
	require.Equal(t, m.ManyCallsPerSec, many.Runs[0].CallsPerSec)

	require.Len(t, rep.Targets, 6)
	for i, tg := range rep.Targets {
		require.Equal(t, i < 2 || i == 5, tg.Absent, "%s: only the fairness targets are measured", tg.Name)
	}

	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var back bench.Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back), js.String())
	require.Equal(t, *f, *back.Scenarios[0].Runs[0].Flood)
	require.Equal(t, w.Ratios, back.Scenarios[1].Runs[0].Weights.Ratios)
	require.Equal(t, bench.Duration(500*time.Millisecond), back.Config.WeightsWindow)

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	for _, s := range []string{"fairness/flood", "B behind A's backlog: p99 ms", "fairness/weights", "A/B per 500ms window (2 windows)",
		"fairness/many", "10 personalities: calls/s", "target fairness/many throughput / one personality"} {
		require.Contains(t, table.String(), s)
	}
	require.NotContains(t, table.String(), "p99.9 ms", "no table of the raw and Capstan scenarios")
}

// TestHeldSmoke runs approvals/held once, briefly and small, and checks
// that it reports its measures. It never checks a timing threshold or the
// ratio's value.
func TestHeldSmoke(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Config{
		Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Repeats: 1, Scenarios: []string{bench.Held},
		Concurrency: 4, ArgBytes: 256, HeldCalls: 50, DataDir: t.TempDir(), Progress: &progress,
	})
	require.NoError(t, err)
	require.Len(t, rep.Scenarios, 1)
	s := rep.Scenarios[0]
	require.Equal(t, "approvals/held", s.Name)
	require.Equal(t, 50, s.HeldCalls)
	require.Equal(t, 8, s.Outstanding)
	require.Len(t, s.Runs, 1)
	r := s.Runs[0]
	require.Zero(t, r.Errors, r.FirstError)
	require.NotNil(t, r.Held)
	h := r.Held
	require.Equal(t, 50, h.Held)
	require.Positive(t, h.WithoutCallsPerSec)
	require.Positive(t, h.WithCallsPerSec)
	require.Positive(t, h.AfterCallsPerSec)
	require.Positive(t, h.Ratio)
	require.Positive(t, h.HoldMS)
	require.Equal(t, h.WithCallsPerSec, r.CallsPerSec)
	require.Positive(t, r.Published)
	require.NotNil(t, s.Held)
	require.Equal(t, h.Ratio, s.Held.Ratio.Median)
	require.Contains(t, progress.String(), "approvals/held")

	require.Len(t, rep.Targets, 6)
	for i, tg := range rep.Targets {
		require.Equal(t, i < 5, tg.Absent, "%s: only the approvals target is measured", tg.Name)
	}
	require.Equal(t, h.Ratio, rep.Targets[5].Value)

	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	var back bench.Report
	require.NoError(t, json.Unmarshal(js.Bytes(), &back), js.String())
	require.Equal(t, *h, *back.Scenarios[0].Runs[0].Held)
	require.Equal(t, 50, back.Config.HeldCalls)
	require.Equal(t, 50, back.Scenarios[0].HeldCalls)

	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	for _, want := range []string{"approvals/held", "before the calls are held: calls/s", "with 50 held: calls/s",
		"after they are denied: calls/s", "ratio with / mean of before and after",
		"target approvals/held throughput with calls held / without"} {
		require.Contains(t, table.String(), want)
	}
	require.NotContains(t, table.String(), "p99.9 ms", "no table of the raw and Capstan scenarios")
}
