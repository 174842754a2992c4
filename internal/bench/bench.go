// Package bench measures Capstan against a raw JetStream consumer, side by
// side in one run on one embedded JetStream server (docs/benchmarks.md).
//
// Every scenario runs the same load against the same server, streams, file
// storage, message sizes and concurrency: a load generator publishes calls
// with the headers a client sends (Nats-Msg-Id, Capstan-Protocol and, when
// traced, traceparent) and measures each call from just before its publish
// to the moment its result arrives on an ordered consumer of the results
// stream. The systems under test are bus.Baseline (the raw ceiling) and a
// real worker.Worker hosting echo under a stored personality.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/bus/embedded"
	"github.com/capstanhq/capstan/internal/protocol"
)

// Loads.
const (
	// Saturate keeps Outstanding calls in flight (a closed loop): as soon as
	// a result arrives, the next call is published.
	Saturate = "saturate"
	// Rate publishes calls at a fixed rate (an open loop), whatever the
	// results do.
	Rate = "rate"
)

// Systems.
const (
	// Raw is bus.Baseline, the hand-written JetStream consumer.
	Raw = "raw"
	// Capstan is a worker.Worker running echo through the whole pipeline.
	Capstan = "capstan"
)

// Config configures a benchmark run. The zero value of every field means
// its default.
type Config struct {
	// Duration is how long each run is measured; default 5s.
	Duration time.Duration
	// Warmup runs the load before each measurement; default 1s.
	Warmup time.Duration
	// Repeats is how many times every scenario runs (interleaved, so noise
	// spreads over all of them); default 3.
	Repeats int
	// Concurrency is the worker's slots and the raw consumer's handlers in
	// the echo scenarios; default 64.
	Concurrency int
	// SleepConcurrency is the same for the sleep_ms=10 scenarios; default 256.
	SleepConcurrency int
	// Outstanding is how many calls a saturating load keeps in flight, as a
	// multiple of the scenario's concurrency; default 2 (calls wait in the
	// stream, so the system is never idle).
	Outstanding int
	// Rate is the moderate rate, calls per second; default 1000.
	Rate float64
	// ArgBytes is the size of a call's args object (its text makes the
	// result about as large); default 1024.
	ArgBytes int
	// SleepMS is the echo sleep of the I/O-bound scenarios; default 10.
	SleepMS int
	// FloodBacklog is the calls personality A keeps waiting or running in
	// fairness/flood; default 10000.
	FloodBacklog int
	// FloodSleepMS is the echo sleep_ms of fairness/flood's calls, the
	// time a call holds its slot; default 100.
	FloodSleepMS int
	// WeightsSleepMS is the echo sleep_ms of fairness/weights' calls;
	// default 10.
	WeightsSleepMS int
	// WeightsWindow is the window over which fairness/weights compares the
	// completions of A and B; default 10s.
	WeightsWindow time.Duration
	// WeightsWindows is how many windows fairness/weights measures (after
	// Warmup, instead of Duration); default 3.
	WeightsWindows int
	// ManyPersonalities is the number of personalities of fairness/many;
	// default 1000.
	ManyPersonalities int
	// ManyCalls is the calls each of them keeps waiting or running;
	// default 20.
	ManyCalls int
	// HeldCalls is the calls approvals/held puts on hold; default 1000.
	HeldCalls int
	// Scenarios selects scenarios by name ("capstan-echo/saturate"), name
	// without the load ("capstan-echo"), system ("raw", "capstan") or load
	// ("saturate", "rate"); empty runs them all.
	Scenarios []string
	// DataDir holds the embedded server's store; default a temporary
	// directory removed at the end.
	DataDir string
	// ServerURL, when set, is a JetStream server to use instead of starting
	// the embedded one in this process (capstan-bench -server-process starts
	// it in a child process, so that its heap is not this process's). The
	// fairness scenarios start servers of their own in this process anyway.
	ServerURL string
	// ServerCreds is the credentials file of ServerURL (the embedded
	// server's embedded.creds); "" for none.
	ServerCreds string
	// ServerPID is the process of ServerURL's server on this machine, when
	// known: its CPU time per call is then reported apart from this
	// process's (RunResult.ServerCPUUSPerCall); 0 for none.
	ServerPID int
	// Progress receives one line per run; nil is silent.
	Progress io.Writer
	// OnCall, when set, is called for every call of an echo scenario
	// published inside the measurement window, as its result arrives, on
	// the goroutine that receives the results: it must return quickly
	// (capstan-bench -exectrace uses it to snapshot the execution trace
	// around the slowest calls).
	OnCall func(CallSample)
}

// CallSample is one measured call, as Config.OnCall receives it.
type CallSample struct {
	// Scenario is the scenario's name, e.g. "capstan-echo/rate".
	Scenario string
	// CallID is the call's id.
	CallID string
	// Start is when the call was published; Latency the time from then to
	// the arrival of its result.
	Start   time.Time
	Latency time.Duration
}

func (c Config) withDefaults() Config {
	c.Duration = cmp.Or(c.Duration, 5*time.Second)
	c.Warmup = cmp.Or(c.Warmup, time.Second)
	c.Repeats = cmp.Or(c.Repeats, 3)
	c.Concurrency = cmp.Or(c.Concurrency, 64)
	c.SleepConcurrency = cmp.Or(c.SleepConcurrency, 256)
	c.Outstanding = cmp.Or(c.Outstanding, 2)
	c.Rate = cmp.Or(c.Rate, 1000)
	c.ArgBytes = cmp.Or(c.ArgBytes, 1024)
	c.SleepMS = cmp.Or(c.SleepMS, 10)
	c.FloodBacklog = cmp.Or(c.FloodBacklog, 10000)
	c.FloodSleepMS = cmp.Or(c.FloodSleepMS, 100)
	c.WeightsSleepMS = cmp.Or(c.WeightsSleepMS, 10)
	c.WeightsWindow = cmp.Or(c.WeightsWindow, 10*time.Second)
	c.WeightsWindows = cmp.Or(c.WeightsWindows, 3)
	c.ManyPersonalities = cmp.Or(c.ManyPersonalities, 1000)
	c.ManyCalls = cmp.Or(c.ManyCalls, 20)
	c.HeldCalls = cmp.Or(c.HeldCalls, 1000)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Duration <= 0 {
		errs = append(errs, fmt.Errorf("duration must be positive, got %s", c.Duration))
	}
	if c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("warmup must not be negative, got %s", c.Warmup))
	}
	if c.Repeats < 1 {
		errs = append(errs, fmt.Errorf("repeats must be at least 1, got %d", c.Repeats))
	}
	if c.Concurrency < 1 || c.SleepConcurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency must be at least 1, got %d and %d (sleep)", c.Concurrency, c.SleepConcurrency))
	}
	if c.Outstanding < 1 {
		errs = append(errs, fmt.Errorf("outstanding must be at least 1, got %d", c.Outstanding))
	}
	if c.Rate <= 0 {
		errs = append(errs, fmt.Errorf("rate must be positive, got %g", c.Rate))
	}
	if c.ArgBytes < 64 || c.ArgBytes > 512<<10 {
		errs = append(errs, fmt.Errorf("arg bytes must be 64 to 524288, got %d", c.ArgBytes))
	}
	if c.SleepMS < 1 || c.SleepMS > 10000 {
		errs = append(errs, fmt.Errorf("sleep ms must be 1 to 10000, got %d", c.SleepMS))
	}
	if c.FloodBacklog < 1 || c.FloodBacklog > 1_000_000 {
		errs = append(errs, fmt.Errorf("flood backlog must be 1 to 1000000, got %d", c.FloodBacklog))
	}
	if c.FloodSleepMS < 1 || c.FloodSleepMS > 10000 || c.WeightsSleepMS < 1 || c.WeightsSleepMS > 10000 {
		errs = append(errs, fmt.Errorf("flood and weights sleep ms must be 1 to 10000, got %d and %d", c.FloodSleepMS, c.WeightsSleepMS))
	}
	if c.WeightsWindow <= 0 || c.WeightsWindows < 1 {
		errs = append(errs, fmt.Errorf("weights window must be positive and weights windows at least 1, got %s and %d", c.WeightsWindow, c.WeightsWindows))
	}
	if c.ManyPersonalities < 1 || c.ManyPersonalities > 9999 {
		errs = append(errs, fmt.Errorf("many personalities must be 1 to 9999, got %d", c.ManyPersonalities))
	}
	if c.ManyCalls < 1 || c.ManyPersonalities*c.ManyCalls > 1_000_000 {
		errs = append(errs, fmt.Errorf("many calls must be at least 1 and at most 1000000 in all, got %d for each of %d personalities", c.ManyCalls, c.ManyPersonalities))
	}
	if c.HeldCalls < 1 || c.HeldCalls > 100_000 {
		errs = append(errs, fmt.Errorf("held calls must be 1 to 100000, got %d", c.HeldCalls))
	}
	if c.ServerPID < 0 || (c.ServerPID > 0 && c.ServerURL == "") {
		errs = append(errs, fmt.Errorf("server pid must be 0, or a process's with a server url, got %d", c.ServerPID))
	}
	return errors.Join(errs...)
}

// Scenario is one system under one load.
type Scenario struct {
	// Name is "<system>-<tool>[-traced]/<load>", e.g. "capstan-echo-traced/rate",
	// or "fairness/<load>" for the scheduling scenarios, "approvals/held"
	// for the approvals one.
	Name string `json:"name"`
	// System is Raw or Capstan.
	System string `json:"system"`
	// Tracing is true when the worker traces every call (always-on sampler)
	// and the load generator sends a sampled traceparent.
	Tracing bool `json:"tracing"`
	// SleepMS is echo's sleep_ms (0: none).
	SleepMS int `json:"sleep_ms"`
	// Concurrency is the worker's slots or the raw consumer's handlers.
	Concurrency int `json:"concurrency"`
	// Load is Saturate or Rate, or for the fairness scenarios Flood,
	// Weights or Many, or Held.
	Load string `json:"load"`
	// Outstanding is the calls kept in flight (Saturate).
	Outstanding int `json:"outstanding,omitempty"`
	// Rate is the calls published per second (Rate; fairness/flood: B's).
	Rate float64 `json:"rate,omitempty"`
	// Backlog is the calls each backlogged personality keeps waiting or
	// running (the fairness scenarios: A's in fairness/flood).
	Backlog int `json:"backlog,omitempty"`
	// Personalities is the number of personalities (the fairness scenarios).
	Personalities int `json:"personalities,omitempty"`
	// HeldCalls is the calls held for approval (approvals/held).
	HeldCalls int `json:"held_calls,omitempty"`
}

// Family is the scenario's name without its load ("capstan-echo-traced").
func (s Scenario) Family() string {
	f, _, _ := strings.Cut(s.Name, "/")
	return f
}

// ownServer reports whether s runs on a server and worker of its own and
// reports measures of its own (the fairness and approvals scenarios), not
// a row of the raw and Capstan table.
func (s Scenario) ownServer() bool { return s.Family() == Fairness || s.Family() == Approvals }

// Scenarios returns every scenario of cfg, in run order.
func Scenarios(cfg Config) []Scenario {
	cfg = cfg.withDefaults()
	type family struct {
		name    string
		system  string
		tracing bool
		sleep   int
		conc    int
	}
	sleep := fmt.Sprintf("sleep%d", cfg.SleepMS)
	families := []family{
		{"raw-echo", Raw, false, 0, cfg.Concurrency},
		{"capstan-echo", Capstan, false, 0, cfg.Concurrency},
		{"capstan-echo-traced", Capstan, true, 0, cfg.Concurrency},
		{"raw-" + sleep, Raw, false, cfg.SleepMS, cfg.SleepConcurrency},
		{"capstan-" + sleep, Capstan, false, cfg.SleepMS, cfg.SleepConcurrency},
	}
	var out []Scenario
	for _, load := range []string{Saturate, Rate} {
		for _, f := range families {
			s := Scenario{Name: f.name + "/" + load, System: f.system, Tracing: f.tracing, SleepMS: f.sleep, Concurrency: f.conc, Load: load}
			if load == Saturate {
				s.Outstanding = f.conc * cfg.Outstanding
			} else {
				s.Rate = cfg.Rate
			}
			if selected(s, cfg.Scenarios) {
				out = append(out, s)
			}
		}
	}
	for _, s := range append(fairnessScenarios(cfg), heldScenarios(cfg)...) {
		if selected(s, cfg.Scenarios) {
			out = append(out, s)
		}
	}
	return out
}

func selected(s Scenario, names []string) bool {
	if len(names) == 0 {
		return true
	}
	for _, n := range names {
		if n == s.Name || n == s.Family() || n == s.System || n == s.Load {
			return true
		}
	}
	return false
}

// Run runs every selected scenario Repeats times on one embedded server and
// returns the report. Runs are interleaved: every scenario once, then again,
// in the reverse order every second time (runOrder).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	scenarios := Scenarios(cfg)
	if len(scenarios) == 0 {
		return nil, fmt.Errorf("bench: no scenario matches %q", cfg.Scenarios)
	}
	dir := cfg.DataDir
	if dir == "" && cfg.ServerURL == "" {
		tmp, err := os.MkdirTemp("", "capstan-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: data dir: %w", err)
		}
		defer func() { _ = os.RemoveAll(tmp) }()
		dir = tmp
	}
	e, err := newEnv(ctx, dir, cfg.ServerURL, cfg.ServerCreds)
	if err != nil {
		return nil, err
	}
	defer e.close()

	rep := &Report{
		Started: time.Now().UTC(), GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), NATSServer: embedded.Version(),
		Config: reportConfig(cfg),
	}
	results := make(map[string][]RunResult)
	for r := range cfg.Repeats {
		for i, s := range runOrder(scenarios, r) {
			batch := fmt.Sprintf("r%ds%d", r+1, i+1)
			res, err := e.measure(ctx, cfg, s, batch)
			if err != nil && s.ownServer() && ctx.Err() == nil {
				// A scheduling or approvals scenario that fails (calls
				// never answered or held) is a finding: it is reported
				// with its run.
				res, err = RunResult{Errors: 1, FirstError: err.Error()}, nil
			}
			if err != nil {
				return nil, fmt.Errorf("bench: %s run %d: %w", s.Name, r+1, err)
			}
			res.Repeat = r + 1
			results[s.Name] = append(results[s.Name], res)
			fmt.Fprintf(cfg.Progress, "%-28s run %d/%d: %s\n", s.Name, r+1, cfg.Repeats, res.progress())
		}
	}
	for _, s := range scenarios {
		rep.Scenarios = append(rep.Scenarios, summarize(s, results[s.Name]))
	}
	rep.Ratios = ratios(rep.Scenarios, cfg.SleepMS)
	rep.Targets = targets(rep.Ratios, rep.Scenarios)
	rep.Elapsed = Duration(time.Since(rep.Started))
	return rep, nil
}

func reportConfig(cfg Config) ReportConfig {
	return ReportConfig{
		Duration: Duration(cfg.Duration), Warmup: Duration(cfg.Warmup), Repeats: cfg.Repeats,
		Concurrency: cfg.Concurrency, SleepConcurrency: cfg.SleepConcurrency, OutstandingFactor: cfg.Outstanding,
		Rate: cfg.Rate, ArgBytes: cfg.ArgBytes, SleepMS: cfg.SleepMS,
		FloodBacklog: cfg.FloodBacklog, FloodSleepMS: cfg.FloodSleepMS, WeightsSleepMS: cfg.WeightsSleepMS,
		WeightsWindow: Duration(cfg.WeightsWindow), WeightsWindows: cfg.WeightsWindows,
		ManyPersonalities: cfg.ManyPersonalities, ManyCalls: cfg.ManyCalls, HeldCalls: cfg.HeldCalls, Storage: "file", ServerInProcess: cfg.ServerURL == "",
		Scenarios: slices.Clone(cfg.Scenarios), Personality: personalityID, Tool: "echo", Prefix: protocol.DefaultPrefix,
	}
}

// runOrder is the order of the scenarios in repeat r (from 0): as given in
// even repeats, reversed in odd ones (A B, B A, A B, ...). The cost of a
// call drifts during a run (the server's de-duplication windows keep every
// message id for minutes, and with the server in this process its heap
// grows with them); with one fixed order the drift would always fall on the
// scenario that runs second, Capstan after raw.
func runOrder(scenarios []Scenario, r int) []Scenario {
	if r%2 == 0 {
		return scenarios
	}
	rev := slices.Clone(scenarios)
	slices.Reverse(rev)
	return rev
}
