package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Duration is a time.Duration written in JSON as Go text ("5s").
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"5s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Report is the outcome of a benchmark run; it is written as JSON as is.
type Report struct {
	Started    time.Time    `json:"started"`
	Elapsed    Duration     `json:"elapsed"`
	GoVersion  string       `json:"go_version"`
	GOOS       string       `json:"goos"`
	GOARCH     string       `json:"goarch"`
	CPUs       int          `json:"cpus"`
	GOMAXPROCS int          `json:"gomaxprocs"`
	NATSServer string       `json:"nats_server"`
	Config     ReportConfig `json:"config"`
	Scenarios  []Summary    `json:"scenarios"`
	Ratios     []Ratio      `json:"ratios"`
	Targets    []Target     `json:"targets"`
}

// ReportConfig is the configuration a report was measured with.
type ReportConfig struct {
	Duration          Duration `json:"duration"`
	Warmup            Duration `json:"warmup"`
	Repeats           int      `json:"repeats"`
	Concurrency       int      `json:"concurrency"`
	SleepConcurrency  int      `json:"sleep_concurrency"`
	OutstandingFactor int      `json:"outstanding_factor"`
	Rate              float64  `json:"rate"`
	ArgBytes          int      `json:"arg_bytes"`
	SleepMS           int      `json:"sleep_ms"`
	FloodBacklog      int      `json:"flood_backlog"`
	FloodSleepMS      int      `json:"flood_sleep_ms"`
	WeightsSleepMS    int      `json:"weights_sleep_ms"`
	WeightsWindow     Duration `json:"weights_window"`
	WeightsWindows    int      `json:"weights_windows"`
	ManyPersonalities int      `json:"many_personalities"`
	ManyCalls         int      `json:"many_calls"`
	HeldCalls         int      `json:"held_calls"`
	Storage           string   `json:"storage"`
	ServerInProcess   bool     `json:"server_in_process"`
	Scenarios         []string `json:"scenarios,omitempty"`
	Personality       string   `json:"personality"`
	Tool              string   `json:"tool"`
	Prefix            string   `json:"prefix"`
}

// RunResult is one measured run of a scenario. Latencies are in
// milliseconds, from just before a call's publish to the arrival of its
// result, over the calls published inside the measurement window.
type RunResult struct {
	Repeat int `json:"repeat"`
	// Calls is the results received inside the window; CallsPerSec is
	// Calls over the window's length.
	Calls       int     `json:"calls"`
	CallsPerSec float64 `json:"calls_per_sec"`
	// OfferedPerS is the calls published per second inside the window.
	OfferedPerS float64 `json:"offered_per_sec"`
	Published   int64   `json:"published"`
	Samples     int     `json:"samples"`
	P50MS       float64 `json:"p50_ms"`
	P90MS       float64 `json:"p90_ms"`
	P99MS       float64 `json:"p99_ms"`
	P999MS      float64 `json:"p999_ms"`
	MaxMS       float64 `json:"max_ms"`
	// Errors counts failed publishes, results that are not ok and results
	// that never came; FirstError describes the first.
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Duplicates counts second results for a call (at-least-once delivery).
	Duplicates  int64 `json:"duplicates,omitempty"`
	CallBytes   int64 `json:"call_bytes"`
	ResultBytes int64 `json:"result_bytes"`
	// SpansExported and SpansDropped count the worker's spans (traced
	// scenarios).
	SpansExported uint64 `json:"spans_exported,omitempty"`
	SpansDropped  uint64 `json:"spans_dropped,omitempty"`
	// GCCycles, GCPauseMS and AllocBytesPerCall describe the Go garbage
	// collector over the whole run (warm-up and stragglers included) of the
	// one process that holds the server, the system under test and the
	// load generator; bytes allocated are per call published.
	// ProcessCPUUSPerCall is the CPU time (user and system, every thread)
	// of the benchmark's process inside the measurement window, in
	// microseconds per call answered in it (Calls); ProcessCPUCores is the
	// same CPU time over the window's length. The process holds the load
	// generator and the system under test, and the server too unless
	// ServerCPUUSPerCall is set: raw and Capstan share the load generator,
	// so the difference of their values is what the system under test
	// costs beyond the other.
	ProcessCPUUSPerCall float64 `json:"process_cpu_us_per_call"`
	ProcessCPUCores     float64 `json:"process_cpu_cores"`
	// ServerCPUUSPerCall and ServerCPUCores are the same for the server's
	// process, when it runs in one of its own (capstan-bench
	// -server-process); absent otherwise.
	ServerCPUUSPerCall float64 `json:"server_cpu_us_per_call,omitempty"`
	ServerCPUCores     float64 `json:"server_cpu_cores,omitempty"`
	GCCycles           uint32  `json:"gc_cycles"`
	GCPauseMS          float64 `json:"gc_pause_ms"`
	AllocBytesPerCall  int64   `json:"alloc_bytes_per_call"`
	// Flood, Weights and Many are the measures of the fairness scenarios
	// (one of them, in a run of one). Calls and CallsPerSec are then A's
	// results (fairness/flood), A's and B's (fairness/weights) or the many
	// personalities' (fairness/many) in the window, and the latencies B's
	// behind A's backlog (fairness/flood).
	Flood   *FloodRun   `json:"flood,omitempty"`
	Weights *WeightsRun `json:"weights,omitempty"`
	Many    *ManyRun    `json:"many,omitempty"`
	// Held is the measures of approvals/held; Calls and CallsPerSec are
	// then the ordinary calls' with the held calls on hold.
	Held *HeldRun `json:"held,omitempty"`
}

// progress is the run's line of progress.
func (r RunResult) progress() string {
	switch {
	case r.Flood != nil:
		f := r.Flood
		return fmt.Sprintf("B alone p50 %.1f ms p99 %.1f ms (%d calls); behind A p50 %.1f ms p99 %.1f ms (%d calls); A %.0f calls/s  errors %d",
			f.BAloneP50MS, f.BAloneP99MS, f.BAloneCalls, f.BP50MS, f.BP99MS, f.BCalls, f.ACallsPerSec, r.Errors)
	case r.Weights != nil:
		return fmt.Sprintf("A/B %.3f, per window %v; %.0f calls/s  errors %d", r.Weights.Ratio, r.Weights.Ratios, r.CallsPerSec, r.Errors)
	case r.Many != nil:
		m := r.Many
		return fmt.Sprintf("%d personalities %.0f calls/s, one %.0f calls/s: %.3f×; first calls %.0f ms; one again %.0f calls/s  errors %d",
			m.Personalities, m.ManyCallsPerSec, m.SingleCallsPerSec, m.Ratio, m.FirstCallsMS, m.SingleAfterCallsPerSec, r.Errors)
	case r.Held != nil:
		h := r.Held
		return fmt.Sprintf("before %.0f calls/s, with %d held %.0f calls/s, after %.0f calls/s: %.3f×; held in %.0f ms  errors %d",
			h.WithoutCallsPerSec, h.Held, h.WithCallsPerSec, h.AfterCallsPerSec, h.Ratio, h.HoldMS, r.Errors)
	}
	if r.Calls == 0 && r.FirstError != "" {
		return "failed: " + r.FirstError
	}
	return fmt.Sprintf("%8.0f calls/s  p50 %6.2f ms  p99 %6.2f ms  p99.9 %6.2f ms  errors %d", r.CallsPerSec, r.P50MS, r.P99MS, r.P999MS, r.Errors)
}

// Stat is the median of a measure over the repeats and its spread.
type Stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summary is a scenario with its runs and their medians.
type Summary struct {
	Scenario
	CallsPerSec Stat `json:"calls_per_sec"`
	P50MS       Stat `json:"p50_ms"`
	P99MS       Stat `json:"p99_ms"`
	P999MS      Stat `json:"p999_ms"`
	// ProcessCPUUSPerCall and ServerCPUUSPerCall summarize the runs' CPU
	// per call (RunResult); ServerCPUUSPerCall is absent without a server
	// process.
	ProcessCPUUSPerCall Stat        `json:"process_cpu_us_per_call"`
	ServerCPUUSPerCall  *Stat       `json:"server_cpu_us_per_call,omitempty"`
	Errors              int64       `json:"errors"`
	Runs                []RunResult `json:"runs"`
	// Flood, Weights and Many summarize the fairness scenarios' runs.
	Flood   *FloodSummary   `json:"flood,omitempty"`
	Weights *WeightsSummary `json:"weights,omitempty"`
	Many    *ManySummary    `json:"many,omitempty"`
	// Held summarizes approvals/held's runs.
	Held *HeldSummary `json:"held,omitempty"`
}

// FloodSummary is fairness/flood over the repeats: B's time to result
// alone and behind A's backlog, and A's throughput.
type FloodSummary struct {
	BAloneP50MS  Stat `json:"b_alone_p50_ms"`
	BAloneP99MS  Stat `json:"b_alone_p99_ms"`
	BP50MS       Stat `json:"b_p50_ms"`
	BP99MS       Stat `json:"b_p99_ms"`
	ACallsPerSec Stat `json:"a_calls_per_sec"`
	// Runs is the runs measured (a run that failed has no measures).
	Runs int `json:"runs"`
}

// WeightsSummary is fairness/weights over the repeats: the ratio A/B of
// every window of every run, and of every run as a whole.
type WeightsSummary struct {
	Windows     int  `json:"windows"`
	WindowRatio Stat `json:"window_ratio"`
	RunRatio    Stat `json:"run_ratio"`
	Runs        int  `json:"runs"`
}

// ManySummary is fairness/many over the repeats.
type ManySummary struct {
	SingleCallsPerSec Stat `json:"single_calls_per_sec"`
	ManyCallsPerSec   Stat `json:"many_calls_per_sec"`
	Ratio             Stat `json:"ratio"`
	FirstCallsMS      Stat `json:"first_calls_ms"`
	// SingleAfterCallsPerSec is the single personality's throughput with
	// the many personalities' consumers idle.
	SingleAfterCallsPerSec Stat `json:"single_after_calls_per_sec"`
	Runs                   int  `json:"runs"`
}

// Ratio compares a Capstan scenario with its raw counterpart under the same
// load, from the medians.
type Ratio struct {
	Capstan string `json:"capstan"`
	Raw     string `json:"raw"`
	// Throughput is Capstan's calls/s over raw's.
	Throughput float64 `json:"throughput"`
	// P50DeltaMS, P99DeltaMS and P999DeltaMS are Capstan's latency minus
	// raw's, in milliseconds.
	P50DeltaMS  float64 `json:"p50_delta_ms"`
	P99DeltaMS  float64 `json:"p99_delta_ms"`
	P999DeltaMS float64 `json:"p999_delta_ms"`
	// P50Ratio is Capstan's median latency over raw's.
	P50Ratio float64 `json:"p50_ratio"`
	// ProcessCPUDeltaUS is Capstan's median process CPU per call minus
	// raw's, in microseconds: both run the same load generator in the same
	// process, so this is what the worker adds over the raw consumer (and,
	// with the server in the process, the server's extra work for it).
	ProcessCPUDeltaUS float64 `json:"process_cpu_delta_us"`
	// ServerCPUDeltaUS is the same for the server's process, when it runs
	// in one of its own; absent otherwise.
	ServerCPUDeltaUS *float64 `json:"server_cpu_delta_us,omitempty"`
}

// Target is one of the goals and whether this run met it.
type Target struct {
	Name   string  `json:"name"`
	Goal   string  `json:"goal"`
	Value  float64 `json:"value"`
	Met    bool    `json:"met"`
	Absent bool    `json:"absent,omitempty"`
}

func stat(vals []float64) Stat {
	if len(vals) == 0 {
		return Stat{}
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	mid := len(s) / 2
	med := s[mid]
	if len(s)%2 == 0 {
		med = (s[mid-1] + s[mid]) / 2
	}
	return Stat{Median: round(med, 3), Min: s[0], Max: s[len(s)-1]}
}

// pickOf returns f of every run.
func pickOf(runs []RunResult, f func(RunResult) float64) []float64 {
	out := make([]float64, len(runs))
	for i, r := range runs {
		out[i] = f(r)
	}
	return out
}

// valid returns the runs for which ok holds (a fairness run that failed
// has no measures).
func valid(runs []RunResult, ok func(RunResult) bool) []RunResult {
	var out []RunResult
	for _, r := range runs {
		if ok(r) {
			out = append(out, r)
		}
	}
	return out
}

func summarize(s Scenario, runs []RunResult) Summary {
	pick := func(f func(RunResult) float64) []float64 { return pickOf(runs, f) }
	sum := Summary{Scenario: s, Runs: runs,
		CallsPerSec:         stat(pick(func(r RunResult) float64 { return math.Round(r.CallsPerSec) })),
		P50MS:               stat(pick(func(r RunResult) float64 { return r.P50MS })),
		P99MS:               stat(pick(func(r RunResult) float64 { return r.P99MS })),
		P999MS:              stat(pick(func(r RunResult) float64 { return r.P999MS })),
		ProcessCPUUSPerCall: stat(pick(func(r RunResult) float64 { return r.ProcessCPUUSPerCall })),
	}
	if slices.ContainsFunc(runs, func(r RunResult) bool { return r.ServerCPUUSPerCall > 0 }) {
		st := stat(pick(func(r RunResult) float64 { return r.ServerCPUUSPerCall }))
		sum.ServerCPUUSPerCall = &st
	}
	for _, r := range runs {
		sum.Errors += r.Errors
	}
	switch s.Load {
	case Flood:
		runs := valid(runs, func(r RunResult) bool { return r.Flood != nil })
		sum.Flood = &FloodSummary{
			BAloneP50MS:  stat(pickOf(runs, func(r RunResult) float64 { return r.Flood.BAloneP50MS })),
			BAloneP99MS:  stat(pickOf(runs, func(r RunResult) float64 { return r.Flood.BAloneP99MS })),
			BP50MS:       stat(pickOf(runs, func(r RunResult) float64 { return r.Flood.BP50MS })),
			BP99MS:       stat(pickOf(runs, func(r RunResult) float64 { return r.Flood.BP99MS })),
			ACallsPerSec: stat(pickOf(runs, func(r RunResult) float64 { return math.Round(r.Flood.ACallsPerSec) })),
			Runs:         len(runs),
		}
	case Weights:
		runs := valid(runs, func(r RunResult) bool { return r.Weights != nil })
		var windows []float64
		for _, r := range runs {
			windows = append(windows, r.Weights.Ratios...)
		}
		sum.Weights = &WeightsSummary{Windows: len(windows), WindowRatio: stat(windows),
			RunRatio: stat(pickOf(runs, func(r RunResult) float64 { return r.Weights.Ratio })),
			Runs:     len(runs)}
	case Many:
		runs := valid(runs, func(r RunResult) bool { return r.Many != nil })
		sum.Many = &ManySummary{
			SingleCallsPerSec:      stat(pickOf(runs, func(r RunResult) float64 { return math.Round(r.Many.SingleCallsPerSec) })),
			ManyCallsPerSec:        stat(pickOf(runs, func(r RunResult) float64 { return math.Round(r.Many.ManyCallsPerSec) })),
			Ratio:                  stat(pickOf(runs, func(r RunResult) float64 { return r.Many.Ratio })),
			FirstCallsMS:           stat(pickOf(runs, func(r RunResult) float64 { return r.Many.FirstCallsMS })),
			SingleAfterCallsPerSec: stat(pickOf(runs, func(r RunResult) float64 { return math.Round(r.Many.SingleAfterCallsPerSec) })),
			Runs:                   len(runs),
		}
	case Held:
		runs := valid(runs, func(r RunResult) bool { return r.Held != nil })
		sum.Held = &HeldSummary{
			WithoutCallsPerSec: stat(pickOf(runs, func(r RunResult) float64 { return math.Round(r.Held.WithoutCallsPerSec) })),
			WithCallsPerSec:    stat(pickOf(runs, func(r RunResult) float64 { return math.Round(r.Held.WithCallsPerSec) })),
			AfterCallsPerSec:   stat(pickOf(runs, func(r RunResult) float64 { return math.Round(r.Held.AfterCallsPerSec) })),
			Ratio:              stat(pickOf(runs, func(r RunResult) float64 { return r.Held.Ratio })),
			HoldMS:             stat(pickOf(runs, func(r RunResult) float64 { return math.Round(r.Held.HoldMS) })),
			Runs:               len(runs),
		}
	}
	return sum
}

// ratios pairs every Capstan scenario with the raw one of the same tool and
// load.
func ratios(sums []Summary, sleepMS int) []Ratio {
	byName := make(map[string]Summary, len(sums))
	for _, s := range sums {
		byName[s.Name] = s
	}
	var out []Ratio
	for _, c := range sums {
		if c.System != Capstan || (c.Load != Saturate && c.Load != Rate) {
			continue
		}
		rawFamily := "raw-echo"
		if c.SleepMS > 0 {
			rawFamily = fmt.Sprintf("raw-sleep%d", sleepMS)
		}
		r, ok := byName[rawFamily+"/"+c.Load]
		if !ok || r.CallsPerSec.Median == 0 {
			continue
		}
		ratio := Ratio{Capstan: c.Name, Raw: r.Name,
			Throughput:  round(c.CallsPerSec.Median/r.CallsPerSec.Median, 3),
			P50DeltaMS:  round(c.P50MS.Median-r.P50MS.Median, 3),
			P99DeltaMS:  round(c.P99MS.Median-r.P99MS.Median, 3),
			P999DeltaMS: round(c.P999MS.Median-r.P999MS.Median, 3),
		}
		if r.P50MS.Median > 0 {
			ratio.P50Ratio = round(c.P50MS.Median/r.P50MS.Median, 3)
		}
		ratio.ProcessCPUDeltaUS = round(c.ProcessCPUUSPerCall.Median-r.ProcessCPUUSPerCall.Median, 1)
		if c.ServerCPUUSPerCall != nil && r.ServerCPUUSPerCall != nil {
			d := round(c.ServerCPUUSPerCall.Median-r.ServerCPUUSPerCall.Median, 1)
			ratio.ServerCPUDeltaUS = &d
		}
		out = append(out, ratio)
	}
	return out
}

// targets checks the issues' goals: echo at saturation at least 0.8 of the
// raw throughput, echo's p99 at the moderate rate at most 2 ms above raw,
// the scheduling goals (fairnessTargets) and the approvals goal
// (heldTarget).
func targets(rs []Ratio, sums []Summary) []Target {
	tput := Target{Name: "capstan-echo/saturate throughput / raw", Goal: ">= 0.8", Absent: true}
	p99 := Target{Name: "capstan-echo/rate p99 - raw p99 (ms)", Goal: "<= 2", Absent: true}
	for _, r := range rs {
		switch r.Capstan {
		case "capstan-echo/" + Saturate:
			tput.Value, tput.Met, tput.Absent = r.Throughput, r.Throughput >= 0.8, false
		case "capstan-echo/" + Rate:
			p99.Value, p99.Met, p99.Absent = r.P99DeltaMS, r.P99DeltaMS <= 2, false
		}
	}
	return append(append([]Target{tput, p99}, fairnessTargets(sums)...), heldTarget(sums))
}

// fairnessTargets checks the scheduling goals (scheduling.md): B's p99
// behind A's backlog at most twice the slot time plus 100 ms; A/B within
// 10 % of 3 in every window; many personalities at least 0.95 of one.
func fairnessTargets(sums []Summary) []Target {
	flood := Target{Name: "fairness/flood B p99 behind A's backlog (ms)", Goal: "<= 2 × slot + 100", Absent: true}
	weights := Target{Name: "fairness/weights A/B per window, farthest from 3", Goal: "3 ± 10 %", Absent: true}
	many := Target{Name: "fairness/many throughput / one personality", Goal: ">= 0.95", Absent: true}
	for _, s := range sums {
		switch {
		case s.Flood != nil:
			limit := float64(2*s.SleepMS + 100)
			flood.Goal = fmt.Sprintf("<= %g (2 × %d ms + 100 ms)", limit, s.SleepMS)
			flood.Value, flood.Met, flood.Absent = s.Flood.BP99MS.Median, s.Flood.Runs > 0 && s.Flood.BP99MS.Median <= limit, false
		case s.Weights != nil:
			want := float64(weightA) / float64(weightB)
			worst := s.Weights.WindowRatio.Min
			if math.Abs(s.Weights.WindowRatio.Max-want) > math.Abs(worst-want) {
				worst = s.Weights.WindowRatio.Max
			}
			weights.Value, weights.Absent = worst, false
			weights.Met = s.Weights.Windows > 0 && math.Abs(worst-want) <= 0.1*want
		case s.Many != nil:
			many.Value, many.Met, many.Absent = s.Many.Ratio.Median, s.Many.Runs > 0 && s.Many.Ratio.Median >= 0.95, false
		}
	}
	return []Target{flood, weights, many}
}

// heldTarget checks the approvals goal (approvals.md: a held call takes no
// slot): the ordinary calls' throughput with the held calls on hold at
// least 0.95 of it without (the mean of before and after).
func heldTarget(sums []Summary) Target {
	t := Target{Name: "approvals/held throughput with calls held / without", Goal: ">= 0.95", Absent: true}
	for _, s := range sums {
		if s.Held != nil {
			t.Value, t.Met, t.Absent = s.Held.Ratio.Median, s.Held.Runs > 0 && s.Held.Ratio.Median >= 0.95, false
		}
	}
	return t
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as text tables: the scenarios (medians with
// their min–max over the repeats), the Capstan/raw comparisons and the
// targets.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	where := "in this process"
	if !r.Config.ServerInProcess {
		where = "in its own process"
	}
	fmt.Fprintf(&b, "capstan-bench: %d repeats of %s (after %s warm-up), %d CPUs, %s, nats-server %s %s, file storage, %d-byte args\n\n",
		r.Config.Repeats, time.Duration(r.Config.Duration), time.Duration(r.Config.Warmup), r.CPUs, r.GoVersion, r.NATSServer, where, r.Config.ArgBytes)
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
	serverCPU := slices.ContainsFunc(r.Scenarios, func(s Summary) bool { return s.ServerCPUUSPerCall != nil })
	if slices.ContainsFunc(r.Scenarios, func(s Summary) bool { return !s.ownServer() }) {
		head := "scenario\tslots\tload\tcalls/s (min–max)\tp50 ms\tp99 ms\tp99.9 ms\tprocess CPU µs/call\t"
		if serverCPU {
			head += "server CPU µs/call\t"
		}
		fmt.Fprintln(tw, head+"errors\t")
	}
	for _, s := range r.Scenarios {
		if s.ownServer() {
			continue
		}
		load := fmt.Sprintf("%d in flight", s.Outstanding)
		if s.Load == Rate {
			load = fmt.Sprintf("%g/s", s.Rate)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t", s.Name, s.Concurrency, load,
			span(s.CallsPerSec, 0), span(s.P50MS, 2), span(s.P99MS, 2), span(s.P999MS, 2), span(s.ProcessCPUUSPerCall, 1))
		if serverCPU {
			srv := "–"
			if s.ServerCPUUSPerCall != nil {
				srv = span(*s.ServerCPUUSPerCall, 1)
			}
			fmt.Fprintf(tw, "%s\t", srv)
		}
		fmt.Fprintf(tw, "%d\t\n", s.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Ratios) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 2, 8, 2, ' ', tabwriter.AlignRight)
		head := "capstan vs raw\tthroughput\tp50 Δ ms\tp99 Δ ms\tp99.9 Δ ms\tprocess CPU Δ µs/call\t"
		if serverCPU {
			head += "server CPU Δ µs/call\t"
		}
		fmt.Fprintln(tw, head)
		for _, x := range r.Ratios {
			fmt.Fprintf(tw, "%s / %s\t%.3f×\t%+.2f\t%+.2f\t%+.2f\t%+.1f\t", x.Capstan, x.Raw, x.Throughput, x.P50DeltaMS, x.P99DeltaMS, x.P999DeltaMS, x.ProcessCPUDeltaUS)
			if serverCPU {
				srv := "–"
				if x.ServerCPUDeltaUS != nil {
					srv = fmt.Sprintf("%+.1f", *x.ServerCPUDeltaUS)
				}
				fmt.Fprintf(tw, "%s\t", srv)
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if err := r.writeFairness(&b); err != nil {
		return err
	}
	if err := r.writeHeld(&b); err != nil {
		return err
	}
	b.WriteString("\n")
	for _, t := range r.Targets {
		verdict := "not met"
		switch {
		case t.Absent:
			verdict = "not measured"
		case t.Met:
			verdict = "met"
		}
		if t.Absent {
			fmt.Fprintf(&b, "target %s %s: %s\n", t.Name, t.Goal, verdict)
		} else {
			fmt.Fprintf(&b, "target %s %s: %.3f, %s\n", t.Name, t.Goal, t.Value, verdict)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeFairness writes the scheduling scenarios' table, when any ran: one
// row per measure, medians with their min–max over the repeats.
func (r *Report) writeFairness(b *strings.Builder) error {
	var rows [][3]string
	for _, s := range r.Scenarios {
		switch {
		case s.Flood != nil:
			f := s.Flood
			head := fmt.Sprintf("%d slots, A keeps %d calls of %d ms waiting, B sends %g/s", s.Concurrency, s.Backlog, s.SleepMS, s.Rate)
			rows = append(rows, [3]string{s.Name, head, ""},
				[3]string{"", "B alone: p50 ms", span(f.BAloneP50MS, 1)},
				[3]string{"", "B alone: p99 ms", span(f.BAloneP99MS, 1)},
				[3]string{"", "B behind A's backlog: p50 ms", span(f.BP50MS, 1)},
				[3]string{"", "B behind A's backlog: p99 ms", span(f.BP99MS, 1)},
				[3]string{"", "A: calls/s", span(f.ACallsPerSec, 0)})
		case s.Weights != nil:
			head := fmt.Sprintf("%d slots, A (weight %d) and B (weight %d) keep %d calls of %d ms waiting each", s.Concurrency, weightA, weightB, s.Backlog, s.SleepMS)
			rows = append(rows, [3]string{s.Name, head, ""},
				[3]string{"", fmt.Sprintf("A/B per %s window (%d windows)", time.Duration(r.Config.WeightsWindow), s.Weights.Windows), span(s.Weights.WindowRatio, 3)},
				[3]string{"", "A/B per run", span(s.Weights.RunRatio, 3)},
				[3]string{"", "A and B: calls/s", span(s.CallsPerSec, 0)})
		case s.Many != nil:
			m := s.Many
			head := fmt.Sprintf("%d slots, %d personalities keep %d echo calls waiting each, against %d of one", s.Concurrency, s.Personalities, s.Backlog, s.Personalities*s.Backlog)
			rows = append(rows, [3]string{s.Name, head, ""},
				[3]string{"", "one personality: calls/s", span(m.SingleCallsPerSec, 0)},
				[3]string{"", fmt.Sprintf("%d personalities: calls/s", s.Personalities), span(m.ManyCallsPerSec, 0)},
				[3]string{"", "ratio", span(m.Ratio, 3)},
				[3]string{"", fmt.Sprintf("one personality again, the %d consumers idle: calls/s", s.Personalities), span(m.SingleAfterCallsPerSec, 0)},
				[3]string{"", "first call of every new personality answered, ms", span(m.FirstCallsMS, 0)})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	var failed []string
	for _, s := range r.Scenarios {
		if s.Family() == Fairness && s.Errors > 0 {
			for _, run := range s.Runs {
				if run.FirstError != "" {
					failed = append(failed, fmt.Sprintf("%s run %d: %d errors, the first: %s", s.Name, run.Repeat, run.Errors, run.FirstError))
				}
			}
		}
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(b, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "scheduling\tmeasure\tmedian (min–max)\t")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", row[0], row[1], row[2])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range failed {
		fmt.Fprintf(b, "%s\n", f)
	}
	return nil
}

// writeHeld writes approvals/held's table, when it ran: the ordinary
// calls' throughput before, with and after the held calls, and the ratio.
func (r *Report) writeHeld(b *strings.Builder) error {
	for _, s := range r.Scenarios {
		if s.Held == nil {
			continue
		}
		h := s.Held
		b.WriteString("\n")
		tw := tabwriter.NewWriter(b, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "approvals\tmeasure\tmedian (min–max)\t")
		fmt.Fprintf(tw, "%s\t%d slots, %d echo calls in flight; then %d calls held for approval\t\t\n", s.Name, s.Concurrency, s.Outstanding, s.HeldCalls)
		fmt.Fprintf(tw, "\tbefore the calls are held: calls/s\t%s\t\n", span(h.WithoutCallsPerSec, 0))
		fmt.Fprintf(tw, "\twith %d held: calls/s\t%s\t\n", s.HeldCalls, span(h.WithCallsPerSec, 0))
		fmt.Fprintf(tw, "\tafter they are denied: calls/s\t%s\t\n", span(h.AfterCallsPerSec, 0))
		fmt.Fprintf(tw, "\tratio with / mean of before and after\t%s\t\n", span(h.Ratio, 3))
		fmt.Fprintf(tw, "\tevery call held, ms\t%s\t\n", span(h.HoldMS, 0))
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, run := range s.Runs {
			if run.FirstError != "" {
				fmt.Fprintf(b, "%s run %d: %d errors, the first: %s\n", s.Name, run.Repeat, run.Errors, run.FirstError)
			}
		}
	}
	return nil
}

func span(s Stat, digits int) string {
	return fmt.Sprintf("%.*f (%.*f–%.*f)", digits, s.Median, digits, s.Min, digits, s.Max)
}
