package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/tools/echo"
)

// The fairness scenarios (scheduling.md, "Measured, not asserted") measure
// the scheduler of a real worker: which waiting call of which personality
// takes each free slot. Each run has an embedded server of its own, so the
// personalities and the consumers it leaves (one durable consumer per
// personality on the calls stream, and every ack on the stream visits every
// consumer of the stream) never weigh on another scenario.
const (
	// Flood: personality A keeps a backlog of calls waiting while B sends
	// one call per second; B's time to result, alone and behind A.
	Flood = "flood"
	// Weights: A (weight 3) and B (weight 1) both backlogged; the ratio of
	// their completions per window.
	Weights = "weights"
	// Many: calls of many personalities waiting against as many calls of
	// one; the throughput of each.
	Many = "many"
	// Fairness is the family of the scheduling scenarios.
	Fairness = "fairness"
)

const (
	// floodInterval spaces B's calls in fairness/flood.
	floodInterval = time.Second
	// weightA and weightB are the scheduling weights of fairness/weights.
	weightA, weightB = 3, 1
	// backlogTimeout bounds publishing a backlog once; primeTimeout the
	// first call of every personality (a lane each: a consumer create).
	backlogTimeout = 2 * time.Minute
	primeTimeout   = time.Minute
)

// FloodRun is one run of fairness/flood. Latencies are in milliseconds,
// from just before a call's publish to the arrival of its result.
type FloodRun struct {
	// Backlog is the calls A kept waiting or running; SlotMS the echo
	// sleep_ms of A's and B's calls.
	Backlog int `json:"backlog"`
	SlotMS  int `json:"slot_ms"`
	// BAlone* is B's time to result with nothing else in the pool.
	BAloneCalls int     `json:"b_alone_calls"`
	BAloneP50MS float64 `json:"b_alone_p50_ms"`
	BAloneP99MS float64 `json:"b_alone_p99_ms"`
	// B* is B's time to result behind A's backlog.
	BCalls int     `json:"b_calls"`
	BP50MS float64 `json:"b_p50_ms"`
	BP99MS float64 `json:"b_p99_ms"`
	BMaxMS float64 `json:"b_max_ms"`
	// ACallsPerSec is A's results per second in the window.
	ACallsPerSec float64 `json:"a_calls_per_sec"`
}

// WeightsRun is one run of fairness/weights.
type WeightsRun struct {
	WeightA int      `json:"weight_a"`
	WeightB int      `json:"weight_b"`
	Window  Duration `json:"window"`
	// ACalls and BCalls are each personality's results per window; Ratios
	// their quotient A/B per window, Ratio over the whole run.
	ACalls []int     `json:"a_calls"`
	BCalls []int     `json:"b_calls"`
	Ratios []float64 `json:"ratios"`
	Ratio  float64   `json:"ratio"`
}

// ManyRun is one run of fairness/many.
type ManyRun struct {
	Personalities int `json:"personalities"`
	// CallsEach is the calls each personality kept waiting or running;
	// the single personality kept Personalities × CallsEach.
	CallsEach         int     `json:"calls_each"`
	SingleCallsPerSec float64 `json:"single_calls_per_sec"`
	ManyCallsPerSec   float64 `json:"many_calls_per_sec"`
	// Ratio is ManyCallsPerSec / SingleCallsPerSec.
	Ratio float64 `json:"ratio"`
	// SingleAfterCallsPerSec is the single personality's again, after the
	// many personalities' run: their consumers exist, idle.
	SingleAfterCallsPerSec float64 `json:"single_after_calls_per_sec"`
	// FirstCallsMS is the time from storing the personalities to the result
	// of the first call of every one of them (a lane each).
	FirstCallsMS float64 `json:"first_calls_ms"`
}

// fairnessScenarios returns the scheduling scenarios of cfg.
func fairnessScenarios(cfg Config) []Scenario {
	return []Scenario{
		{Name: Fairness + "/" + Flood, System: Capstan, SleepMS: cfg.FloodSleepMS, Concurrency: cfg.Concurrency, Load: Flood,
			Backlog: cfg.FloodBacklog, Personalities: 2, Rate: float64(time.Second / floodInterval)},
		{Name: Fairness + "/" + Weights, System: Capstan, SleepMS: cfg.WeightsSleepMS, Concurrency: cfg.Concurrency, Load: Weights,
			Backlog: 2 * cfg.Concurrency, Personalities: 2},
		{Name: Fairness + "/" + Many, System: Capstan, Concurrency: cfg.Concurrency, Load: Many,
			Backlog: cfg.ManyCalls, Personalities: cfg.ManyPersonalities},
	}
}

// fairPersonality is the document of a fairness scenario's personality:
// the benchmark's policy with a scheduling section.
func fairPersonality(id string, weight int) []byte {
	return fmt.Appendf(nil, "id: %s\ntoolset: [echo]\nsecrets: {allow: []}\nprocess: {allow: []}\nbudget: {result_chars: 80000}\nscheduling: {priority: 3, weight: %d}\n", id, weight)
}

// storePersonalities puts the documents of ids (weight 1 unless weights
// says otherwise) in the personalities bucket, 16 at a time.
func storePersonalities(ctx context.Context, conn *bus.Conn, ids []string, weights map[string]int) error {
	docs := make(map[string][]byte, len(ids))
	for _, id := range ids {
		w, ok := weights[id]
		if !ok {
			w = 1
		}
		docs[id] = fairPersonality(id, w)
	}
	return storeDocs(ctx, conn, docs)
}

// storeDocs puts docs (personality id → document) in the personalities
// bucket, 16 at a time.
func storeDocs(ctx context.Context, conn *bus.Conn, docs map[string][]byte) error {
	kv, err := conn.KV(ctx, bus.Personalities)
	if err != nil {
		return fmt.Errorf("store personalities: %w", err)
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for id, doc := range docs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := kv.Put(ctx, id, doc); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("store personality %s: %w", id, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fairRun is a fairness run's own server and worker.
type fairRun struct {
	e    *env
	sys  *system
	dir  string
	warn *warnings
}

// startFair starts a server of its own for one fairness run (storing in a
// new directory, under the run's data directory when it has one), stores
// the personalities ids, and starts a worker of s.Concurrency slots.
func (e *env) startFair(ctx context.Context, s Scenario, ids []string, weights map[string]int) (*fairRun, error) {
	// The pool's default personality too: its consumer exists anyway (the
	// worker opens it at start), and a worker without one warns.
	docs := make(map[string][]byte, len(ids)+1)
	for _, id := range append(slices.Clone(ids), "default") {
		w, ok := weights[id]
		if !ok {
			w = 1
		}
		docs[id] = fairPersonality(id, w)
	}
	return e.startOwn(ctx, s, docs)
}

// startOwn starts a server of its own for one run (storing in a new
// directory, under the run's data directory when it has one), stores docs
// (personality id → document) besides the benchmark's personality, and
// starts a worker of s.Concurrency slots.
func (e *env) startOwn(ctx context.Context, s Scenario, docs map[string][]byte) (*fairRun, error) {
	dir, err := os.MkdirTemp(e.dir, "capstan-bench-"+s.Family()+"-")
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	fe, err := newEnv(ctx, dir, "", "")
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	r := &fairRun{e: fe, dir: dir}
	if err := storeDocs(ctx, fe.conn, docs); err != nil {
		r.stop()
		return nil, err
	}
	r.warn = newWarnings(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if r.sys, err = fe.startLogging(ctx, Scenario{System: Capstan, Concurrency: s.Concurrency}, r.warn); err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

// explain adds the worker's warnings to err.
func (r *fairRun) explain(err error) error {
	if w := r.warn.String(); err != nil && w != "" {
		return fmt.Errorf("%w (the worker warned: %s)", err, w)
	}
	return err
}

// stop stops the worker and the server and removes the server's store.
func (r *fairRun) stop() error {
	var err error
	if r.sys != nil {
		err = r.sys.stop()
	}
	r.e.close()
	return errors.Join(err, os.RemoveAll(r.dir))
}

// mixResult is the common part of a fairness run's result: calls counted
// in the window over d, and the load's failures.
func mixResult(m *mix, c *class, d time.Duration) RunResult {
	n, _, _ := m.measures(c)
	errs, first := m.errors()
	var published int64
	for _, c := range m.classes {
		published += c.published.Load()
	}
	return RunResult{Calls: n, CallsPerSec: float64(n) / d.Seconds(), Published: published, Errors: errs, FirstError: first}
}

// measureFlood runs fairness/flood: B alone, then B behind A's backlog.
func (e *env) measureFlood(ctx context.Context, cfg Config, s Scenario, batch string) (res RunResult, err error) {
	a := &class{personalities: []string{"flood-a"}, sleepMS: s.SleepMS, backlog: s.Backlog}
	b := &class{personalities: []string{"flood-b"}, sleepMS: s.SleepMS}
	r, err := e.startFair(ctx, s, []string{"flood-a", "flood-b"}, nil)
	if err != nil {
		return RunResult{}, err
	}
	defer func() { err = errors.Join(r.explain(err), r.stop()) }()
	m, err := newMix(r.e.conn, batch, r.sys.pool, cfg.ArgBytes, a, b)
	if err != nil {
		return RunResult{}, err
	}
	if err := m.start(ctx); err != nil {
		return RunResult{}, err
	}
	defer m.close()
	for _, c := range []*class{a, b} {
		if _, err := m.prime(ctx, c, primeTimeout); err != nil {
			return RunResult{}, err
		}
	}
	fr := &FloodRun{Backlog: s.Backlog, SlotMS: s.SleepMS}

	// B alone.
	m.window(time.Now(), cfg.Duration, 0)
	m.pace(ctx, b, floodInterval)
	if err := m.waitAnswered(ctx, b, drainTimeout); err != nil {
		return RunResult{}, fmt.Errorf("personality B alone: %w", err)
	}
	_, _, alone := m.measures(b)
	fr.BAloneCalls, fr.BAloneP50MS, fr.BAloneP99MS = len(alone), ms(percentile(alone, 0.5)), ms(percentile(alone, 0.99))

	// B behind A's backlog.
	m.fill(a)
	if err := m.waitPublished(ctx, a, backlogTimeout); err != nil {
		return RunResult{}, fmt.Errorf("the backlog of personality A: %w", err)
	}
	m.window(time.Now().Add(cfg.Warmup), cfg.Duration, 0)
	m.pace(ctx, b, floodInterval)
	m.stopRefill()
	if err := m.waitAnswered(ctx, b, drainTimeout); err != nil {
		return RunResult{}, fmt.Errorf("personality B behind A: %w", err)
	}
	res = mixResult(m, a, cfg.Duration)
	fr.ACallsPerSec = res.CallsPerSec
	_, _, behind := m.measures(b)
	fr.BCalls, fr.BP50MS, fr.BP99MS = len(behind), ms(percentile(behind, 0.5)), ms(percentile(behind, 0.99))
	if n := len(behind); n > 0 {
		fr.BMaxMS = ms(behind[n-1])
	}
	res.Samples, res.P50MS, res.P99MS, res.MaxMS = fr.BCalls, fr.BP50MS, fr.BP99MS, fr.BMaxMS
	res.Flood = fr
	return res, nil
}

// measureWeights runs fairness/weights: A and B both backlogged, their
// completions counted per window.
func (e *env) measureWeights(ctx context.Context, cfg Config, s Scenario, batch string) (res RunResult, err error) {
	a := &class{personalities: []string{"weights-a"}, sleepMS: s.SleepMS, backlog: s.Backlog}
	b := &class{personalities: []string{"weights-b"}, sleepMS: s.SleepMS, backlog: s.Backlog}
	r, err := e.startFair(ctx, s, []string{"weights-a", "weights-b"}, map[string]int{"weights-a": weightA, "weights-b": weightB})
	if err != nil {
		return RunResult{}, err
	}
	defer func() { err = errors.Join(r.explain(err), r.stop()) }()
	m, err := newMix(r.e.conn, batch, r.sys.pool, cfg.ArgBytes, a, b)
	if err != nil {
		return RunResult{}, err
	}
	if err := m.start(ctx); err != nil {
		return RunResult{}, err
	}
	defer m.close()
	for _, c := range []*class{a, b} {
		if _, err := m.prime(ctx, c, primeTimeout); err != nil {
			return RunResult{}, err
		}
	}
	m.fill(a)
	m.fill(b)
	for _, c := range []*class{a, b} {
		if err := m.waitPublished(ctx, c, backlogTimeout); err != nil {
			return RunResult{}, err
		}
	}
	d := cfg.WeightsWindow * time.Duration(cfg.WeightsWindows)
	m.window(time.Now().Add(cfg.Warmup), d, cfg.WeightsWindow)
	m.until(ctx)
	m.stopRefill()

	aN, aWin, _ := m.measures(a)
	bN, bWin, _ := m.measures(b)
	res = mixResult(m, a, d)
	res.Calls, res.CallsPerSec = aN+bN, float64(aN+bN)/d.Seconds()
	wr := &WeightsRun{WeightA: weightA, WeightB: weightB, Window: Duration(cfg.WeightsWindow), ACalls: aWin, BCalls: bWin,
		Ratio: quotient(aN, bN)}
	for i := range aWin {
		wr.Ratios = append(wr.Ratios, quotient(aWin[i], bWin[i]))
	}
	res.Weights = wr
	return res, nil
}

// quotient is a/b rounded to 3 digits, 0 when b is 0.
func quotient(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return round(float64(a)/float64(b), 3)
}

// measureMany runs fairness/many on one worker: a backlog of one
// personality, then as many calls spread over many personalities, then the
// single personality's again.
func (e *env) measureMany(ctx context.Context, cfg Config, s Scenario, batch string) (res RunResult, err error) {
	r, err := e.startFair(ctx, s, []string{"single"}, nil)
	if err != nil {
		return RunResult{}, err
	}
	defer func() { err = errors.Join(r.explain(err), r.stop()) }()
	mr := &ManyRun{Personalities: s.Personalities, CallsEach: s.Backlog}

	single := &class{personalities: []string{"single"}, backlog: s.Personalities * s.Backlog}
	sres, _, err := r.saturate(ctx, cfg, batch+"a", single)
	if err != nil {
		return RunResult{}, fmt.Errorf("single personality: %w", err)
	}
	mr.SingleCallsPerSec = sres.CallsPerSec
	// What the single personality left waiting goes before the others come.
	subject, err := r.e.names.CallSubject(r.sys.pool, "single", echo.Name)
	if err != nil {
		return RunResult{}, err
	}
	if err := r.e.conn.PurgeSubject(ctx, r.e.names.CallsStream(), subject); err != nil {
		return RunResult{}, err
	}

	ids := make([]string, s.Personalities)
	for i := range ids {
		ids[i] = fmt.Sprintf("many-%04d", i+1)
	}
	start := time.Now()
	if err := storePersonalities(ctx, r.e.conn, ids, nil); err != nil {
		return RunResult{}, err
	}
	many := &class{personalities: ids, backlog: s.Backlog}
	res, primed, err := r.saturate(ctx, cfg, batch+"b", many)
	if err != nil {
		return RunResult{}, fmt.Errorf("%d personalities: %w", s.Personalities, err)
	}
	mr.FirstCallsMS = ms(primed.Sub(start))
	mr.ManyCallsPerSec = res.CallsPerSec
	if mr.SingleCallsPerSec > 0 {
		mr.Ratio = round(mr.ManyCallsPerSec/mr.SingleCallsPerSec, 3)
	}

	// The single personality again, the many personalities' consumers
	// idle: what their number costs apart from the scheduling.
	if err := r.e.conn.PurgeSubject(ctx, r.e.names.CallsStream(), r.e.names.Prefix()+".call."+r.sys.pool+".>"); err != nil {
		return RunResult{}, err
	}
	again := &class{personalities: []string{"single"}, backlog: s.Personalities * s.Backlog}
	ares, _, err := r.saturate(ctx, cfg, batch+"c", again)
	if err != nil {
		return RunResult{}, fmt.Errorf("single personality after %d: %w", s.Personalities, err)
	}
	mr.SingleAfterCallsPerSec = ares.CallsPerSec
	for _, x := range []RunResult{sres, ares} {
		res.Published += x.Published
		res.Errors += x.Errors
		res.FirstError = cmp.Or(res.FirstError, x.FirstError)
	}
	res.Many = mr
	return res, nil
}

// saturate measures the throughput of c's backlog on the run's worker: the
// first call of each personality, then the backlog published once, then
// the results counted in a window of cfg.Duration after cfg.Warmup. It
// returns when every personality's first call was answered.
func (r *fairRun) saturate(ctx context.Context, cfg Config, batch string, c *class) (RunResult, time.Time, error) {
	m, err := newMix(r.e.conn, batch, r.sys.pool, cfg.ArgBytes, c)
	if err != nil {
		return RunResult{}, time.Time{}, err
	}
	if err := m.start(ctx); err != nil {
		return RunResult{}, time.Time{}, err
	}
	defer m.close()
	if _, err := m.prime(ctx, c, primeTimeout); err != nil {
		return RunResult{}, time.Time{}, err
	}
	primed := time.Now()
	m.fill(c)
	if err := m.waitPublished(ctx, c, backlogTimeout); err != nil {
		return RunResult{}, primed, err
	}
	m.window(time.Now().Add(cfg.Warmup), cfg.Duration, 0)
	m.until(ctx)
	m.stopRefill()
	return mixResult(m, c, cfg.Duration), primed, ctx.Err()
}
