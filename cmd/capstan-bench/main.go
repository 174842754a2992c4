// Command capstan-bench measures Capstan against a raw JetStream consumer in
// one run on one embedded JetStream server and prints the comparison as a
// table (and, with -json, as JSON). See docs/benchmarks.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "capstan-bench:", err)
		os.Exit(1)
	}
}

const usage = `usage: capstan-bench [flags]

Runs the raw JetStream baseline and Capstan side by side on one embedded
JetStream server (file storage) and reports calls/s and p50/p99/p99.9
latency (publish → result received) for each scenario, at saturation and at
a fixed moderate rate, with the Capstan/raw ratios. Scenarios:

  raw-echo, capstan-echo, capstan-echo-traced     echo, -concurrency slots
  raw-sleep10, capstan-sleep10                    echo sleep_ms=10, -sleep-concurrency slots

each under the loads saturate and rate, and the scheduling scenarios (each
run on a server of its own, a worker of -concurrency slots):

  fairness/flood     A keeps -flood-backlog calls of -flood-sleep-ms waiting;
                     B sends one call per second: B's time to result, alone
                     and behind A's backlog, and A's calls/s
  fairness/weights   A (weight 3) and B (weight 1) both backlogged: A/B per
                     -weights-window, -weights-windows windows
  fairness/many      -many-personalities keep -many-calls echo calls waiting
                     each, against as many calls of one personality: calls/s

and the approvals scenario (a server and worker of its own too):

  approvals/held     echo calls at saturation (-outstanding × -concurrency in
                     flight), without and then with -held-calls calls held
                     for approval: calls/s of each and their ratio

-scenarios selects by full name (capstan-echo/saturate), name without the
load (capstan-echo, fairness, approvals), system (raw, capstan) or load
(saturate, rate, flood, weights, many, held).

Flags:
`

func run(ctx context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("capstan-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	var cfg bench.Config
	var scenarios, jsonPath, cpuProfile, memProfile, serverMemProfile string
	var quiet, serverProcess bool
	var execTrace string
	var execTraceSlow time.Duration
	var execTraceMax int
	var serveDir string
	var soak int
	var soakChunk, soakSettle time.Duration
	fs.DurationVar(&cfg.Duration, "duration", 0, "measured time of each run (default 5s)")
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "load before each measurement (default 1s)")
	fs.IntVar(&cfg.Repeats, "repeats", 0, "runs of every scenario, interleaved (the order reversed every second repeat); medians and min–max are reported (default 3)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, "worker slots and raw handlers for echo (default 64)")
	fs.IntVar(&cfg.SleepConcurrency, "sleep-concurrency", 0, "worker slots and raw handlers for echo sleep_ms (default 256)")
	fs.IntVar(&cfg.Outstanding, "outstanding", 0, "calls in flight at saturation, as a multiple of the slots (default 2)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "the moderate rate, calls/s (default 1000)")
	fs.IntVar(&cfg.ArgBytes, "arg-bytes", 0, "size of each call's args; the result is about as large (default 1024)")
	fs.IntVar(&cfg.SleepMS, "sleep-ms", 0, "echo sleep_ms of the I/O-bound scenarios (default 10)")
	fs.IntVar(&cfg.FloodBacklog, "flood-backlog", 0, "fairness/flood: calls personality A keeps waiting or running (default 10000)")
	fs.IntVar(&cfg.FloodSleepMS, "flood-sleep-ms", 0, "fairness/flood: echo sleep_ms of A's and B's calls, the slot time (default 100)")
	fs.IntVar(&cfg.WeightsSleepMS, "weights-sleep-ms", 0, "fairness/weights: echo sleep_ms of the calls (default 10)")
	fs.DurationVar(&cfg.WeightsWindow, "weights-window", 0, "fairness/weights: the window of each A/B ratio (default 10s)")
	fs.IntVar(&cfg.WeightsWindows, "weights-windows", 0, "fairness/weights: windows measured, instead of -duration (default 3)")
	fs.IntVar(&cfg.ManyPersonalities, "many-personalities", 0, "fairness/many: personalities with calls waiting (default 1000)")
	fs.IntVar(&cfg.ManyCalls, "many-calls", 0, "fairness/many: calls each personality keeps waiting or running (default 20)")
	fs.IntVar(&cfg.HeldCalls, "held-calls", 0, "approvals/held: calls held for approval during the second measure (default 1000)")
	fs.StringVar(&scenarios, "scenarios", "", "comma-separated scenarios: names, names without the load, systems or loads (default all)")
	fs.StringVar(&cfg.DataDir, "dir", "", "the embedded server's store (default a temporary directory, removed)")
	fs.StringVar(&jsonPath, "json", "", "also write the report as JSON to this file (- for stdout, instead of the table)")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (server, worker and load) to this file")
	fs.StringVar(&memProfile, "memprofile", "", "write an allocation profile of the whole run to this file")
	fs.StringVar(&execTrace, "exectrace", "", "capture the process's execution trace (runtime/trace; go tool trace reads it): with -exectrace-slow, a snapshot of the window around each slow call to this file with .1, .2, ... appended; with -exectrace-slow 0, the whole run to this file")
	fs.DurationVar(&execTraceSlow, "exectrace-slow", 5*time.Millisecond, "with -exectrace: a call whose result takes this long or more is slow (0: trace the whole run instead)")
	fs.IntVar(&execTraceMax, "exectrace-max", 10, "with -exectrace: the most snapshots written")
	fs.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	fs.BoolVar(&serverProcess, "server-process", false, "run the embedded server in a child process, so the garbage collector of the benchmark's process does not mark the server's heap")
	fs.IntVar(&soak, "soak", 0, "instead of the scenarios, answer this many echo calls at saturation and print the server's state before and after (memory, and every stream's messages, bytes and keys) and its cost per retained result; with -server-process, the server process's own memory")
	fs.DurationVar(&soakChunk, "soak-chunk", 0, "with -soak: how long each chunk of load runs, a progress line each (default 10s)")
	fs.DurationVar(&soakSettle, "soak-settle", 0, "with -soak: wait this long, idle, after the load and report the state once more (16m outlasts the calls stream's 15 min de-duplication window: what is left is what the retained results cost)")
	fs.StringVar(&serverMemProfile, "server-memprofile", "", "with -soak and -server-process: write the server process's heap profile to this file at the end of the soak (and, with -soak-settle, once settled to this file with .settled appended)")
	fs.StringVar(&serveDir, "serve", "", "run only the embedded server, storing in this directory, print its URL and serve until stdin closes, answering the commands memory and heapprofile <path> read from stdin (what -server-process runs)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (capstan-bench takes only flags)", fs.Arg(0))
	}
	if serveDir != "" {
		return bench.Serve(ctx, serveDir, os.Stdin, stdout)
	}
	for s := range strings.SplitSeq(scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Scenarios = append(cfg.Scenarios, s)
		}
	}
	if !quiet {
		cfg.Progress = stderr
	}
	if execTraceSlow < 0 || execTraceMax < 1 {
		return fmt.Errorf("-exectrace-slow must not be negative and -exectrace-max must be at least 1, got %s and %d", execTraceSlow, execTraceMax)
	}
	if execTrace != "" && soak != 0 {
		return errors.New("-exectrace traces the scenarios, not -soak")
	}
	if serverMemProfile != "" && (soak == 0 || !serverProcess) {
		return errors.New("-server-memprofile needs -soak and -server-process")
	}
	if soak != 0 {
		if soak < 0 {
			return fmt.Errorf("-soak must be a positive number of calls, got %d", soak)
		}
		if soakChunk < 0 {
			return fmt.Errorf("-soak-chunk must be positive, got %s", soakChunk)
		}
		if soakSettle < 0 {
			return fmt.Errorf("-soak-settle must not be negative, got %s", soakSettle)
		}
		return runSoak(ctx, bench.SoakConfig{Calls: soak, Concurrency: cfg.Concurrency, ArgBytes: cfg.ArgBytes,
			Dir: cfg.DataDir, Chunk: soakChunk, Settle: soakSettle, Progress: cfg.Progress}, serverProcess, serverMemProfile, jsonPath, stdout, stderr)
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if serverProcess {
		srv, err := startServerProcess(ctx, cfg.DataDir, stderr)
		if err != nil {
			return fmt.Errorf("-server-process: %w", err)
		}
		defer srv.stop()
		cfg.ServerURL, cfg.ServerCreds, cfg.ServerPID = srv.URL(), srv.creds, srv.pid
	}
	var tracer *execTracer
	if execTrace != "" {
		var err error
		if tracer, err = startExecTrace(execTrace, execTraceSlow, execTraceMax, stderr); err != nil {
			return fmt.Errorf("-exectrace: %w", err)
		}
		cfg.OnCall = tracer.onCall
	}
	rep, err := bench.Run(ctx, cfg)
	if tracer != nil {
		err = errors.Join(err, tracer.stop())
	}
	if err != nil {
		return err
	}
	if memProfile != "" {
		if err := writeProfile("allocs", memProfile); err != nil {
			return fmt.Errorf("-memprofile: %w", err)
		}
	}
	if jsonPath != "-" {
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
	}
	return writeJSON(jsonPath, rep, stdout)
}

// runSoak runs the soak of cfg, with the server in a child process when
// serverProcess is set, and writes its table and JSON as a benchmark run
// does (-json).
func runSoak(ctx context.Context, cfg bench.SoakConfig, serverProcess bool, serverMemProfile, jsonPath string, stdout, stderr io.Writer) error {
	if serverProcess {
		srv, err := startServerProcess(ctx, cfg.Dir, stderr)
		if err != nil {
			return fmt.Errorf("-server-process: %w", err)
		}
		defer srv.stop()
		cfg.ServerURL, cfg.ServerCreds, cfg.Server = srv.URL(), srv.creds, srv
		if serverMemProfile != "" {
			// The child writes the file: give it a path that does not
			// depend on its working directory.
			abs, err := filepath.Abs(serverMemProfile)
			if err != nil {
				return fmt.Errorf("-server-memprofile: %w", err)
			}
			cfg.ServerHeapProfile = abs
		}
	}
	rep, err := bench.Soak(ctx, cfg)
	if err != nil {
		return err
	}
	if jsonPath != "-" {
		if err := rep.WriteTable(stdout); err != nil {
			return err
		}
	}
	return writeJSON(jsonPath, rep, stdout)
}

// writeJSON writes v as indented JSON to path: nowhere for "", stdout for
// "-".
func writeJSON(path string, v any, stdout io.Writer) error {
	enc := func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(v)
	}
	switch path {
	case "":
		return nil
	case "-":
		return enc(stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	if err := enc(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("-json: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	return nil
}

// writeProfile writes the named runtime profile to path.
func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// serverProcess is the embedded server running in a child process.
type serverProcess struct {
	*bench.ServerClient
	creds string
	// pid is the child's process id (its CPU time is measured apart).
	pid  int
	stop func()
}

// startServerProcess runs this program with -serve in a child process and
// returns it: a client of its protocol (its URL, its memory, its heap
// profile), its credentials file and a function that stops the child (by
// closing its stdin) and waits for it. dir "" stores in a temporary
// directory, removed by stop.
func startServerProcess(ctx context.Context, dir string, stderr io.Writer) (*serverProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cleanup := func() {}
	if dir == "" {
		tmp, err := os.MkdirTemp("", "capstan-bench-server-")
		if err != nil {
			return nil, err
		}
		dir, cleanup = tmp, func() { _ = os.RemoveAll(tmp) }
	}
	cmd := exec.CommandContext(ctx, exe, "-serve", dir)
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		cleanup()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		cleanup()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		cleanup()
		return nil, err
	}
	stop := func() {
		_ = in.Close()
		_ = cmd.Wait()
		cleanup()
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := bench.NewServerClient(cctx, in, out)
	if err != nil {
		stop()
		return nil, err
	}
	return &serverProcess{ServerClient: c, creds: bench.ServeCredsFile(dir), pid: cmd.Process.Pid, stop: stop}, nil
}
