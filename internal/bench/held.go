package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/tools/echo"
)

// The approvals scenario (approvals.md: a held call "takes no slot") puts
// calls on hold and measures what they cost the ordinary calls of the same
// worker.
const (
	// Held: ordinary echo calls at saturation, without and then with
	// HeldCalls calls held for approval; the ratio of their throughputs.
	Held = "held"
	// Approvals is the family of the approvals scenario.
	Approvals = "approvals"
)

const (
	// heldPersonality is the personality of the held calls: its approval
	// section names echo when the text is heldText.
	heldPersonality = "held"
	heldText        = "hold"
	// holdTimeout bounds putting every held call on hold, and answering
	// every one once denied.
	holdTimeout = 2 * time.Minute
)

// heldDoc is the held calls' personality: the benchmark's policy and an
// approval section that holds echo calls whose text is heldText (none
// expires during a run).
var heldDoc = []byte(`id: ` + heldPersonality + `
toolset: [echo]
secrets: {allow: []}
process: {allow: []}
budget: {result_chars: 80000}
approval:
  require:
    - tool: echo
      when: {text: [` + heldText + `]}
  timeout: 168h
`)

// HeldRun is one run of approvals/held.
type HeldRun struct {
	// Held is the calls held for approval during the second window.
	Held int `json:"held"`
	// HoldMS is the time from the first held call's publish until every
	// one was held (stored in the approvals bucket).
	HoldMS float64 `json:"hold_ms"`
	// WithoutCallsPerSec, WithCallsPerSec and AfterCallsPerSec are the
	// ordinary calls' results per second before the calls are held, while
	// they are held, and once they are denied (answered, no longer held).
	WithoutCallsPerSec float64 `json:"without_calls_per_sec"`
	WithCallsPerSec    float64 `json:"with_calls_per_sec"`
	AfterCallsPerSec   float64 `json:"after_calls_per_sec"`
	// Ratio is WithCallsPerSec over the mean of WithoutCallsPerSec and
	// AfterCallsPerSec, the windows on either side (a drift of the
	// machine or the server during the run falls on both; goal: about 1).
	Ratio float64 `json:"ratio"`
}

// HeldSummary is approvals/held over the repeats.
type HeldSummary struct {
	WithoutCallsPerSec Stat `json:"without_calls_per_sec"`
	WithCallsPerSec    Stat `json:"with_calls_per_sec"`
	AfterCallsPerSec   Stat `json:"after_calls_per_sec"`
	Ratio              Stat `json:"ratio"`
	HoldMS             Stat `json:"hold_ms"`
	// Runs is the runs measured (a run that failed has no measures).
	Runs int `json:"runs"`
}

// heldScenarios returns the approvals scenario of cfg.
func heldScenarios(cfg Config) []Scenario {
	return []Scenario{{Name: Approvals + "/" + Held, System: Capstan, Concurrency: cfg.Concurrency, Load: Held,
		Outstanding: cfg.Outstanding * cfg.Concurrency, HeldCalls: cfg.HeldCalls, Personalities: 2}}
}

// measureHeld runs approvals/held on a server and worker of its own: the
// benchmark personality's echo calls kept at saturation (a closed loop of
// s.Outstanding calls), measured over cfg.Duration after cfg.Warmup three
// times: before, while and after s.HeldCalls calls of the held personality
// are held (they are put on hold, then denied, while the load goes on).
// The held personality's lane exists from the start (its first call does
// not match the approval rule), so the windows differ only by the holds.
func (e *env) measureHeld(ctx context.Context, cfg Config, s Scenario, batch string) (res RunResult, err error) {
	r, err := e.startOwn(ctx, s, map[string][]byte{heldPersonality: heldDoc, "default": fairPersonality("default", 1)})
	if err != nil {
		return RunResult{}, err
	}
	defer func() { err = errors.Join(r.explain(err), r.stop()) }()
	ordinary := &class{personalities: []string{personalityID}, backlog: s.Outstanding}
	lane := &class{personalities: []string{heldPersonality}}
	m, err := newMix(r.e.conn, batch, r.sys.pool, cfg.ArgBytes, ordinary, lane)
	if err != nil {
		return RunResult{}, err
	}
	if err := m.start(ctx); err != nil {
		return RunResult{}, err
	}
	defer m.close()
	for _, c := range []*class{ordinary, lane} {
		if _, err := m.prime(ctx, c, primeTimeout); err != nil {
			return RunResult{}, err
		}
	}
	heldBatch := batch + "h"
	var answered atomic.Int64
	stopTail, err := r.countResults(ctx, heldBatch, &answered)
	if err != nil {
		return RunResult{}, err
	}
	defer stopTail()
	m.fill(ordinary)
	if err := m.waitPublished(ctx, ordinary, backlogTimeout); err != nil {
		return RunResult{}, err
	}
	measure := func() RunResult {
		m.window(time.Now().Add(cfg.Warmup), cfg.Duration, 0)
		m.until(ctx)
		return mixResult(m, ordinary, cfg.Duration)
	}
	hr := &HeldRun{Held: s.HeldCalls}

	hr.WithoutCallsPerSec = measure().CallsPerSec

	start := time.Now()
	ids, err := r.hold(ctx, heldBatch, s.HeldCalls)
	if err != nil {
		return RunResult{}, err
	}
	if err := r.waitHeld(ctx, s.HeldCalls); err != nil {
		return RunResult{}, err
	}
	hr.HoldMS = ms(time.Since(start))
	with := measure()
	hr.WithCallsPerSec = with.CallsPerSec
	if n := answered.Load(); n > 0 {
		return RunResult{}, fmt.Errorf("%d of %d held calls were answered while held", n, s.HeldCalls)
	}

	if err := r.deny(ctx, ids); err != nil {
		return RunResult{}, err
	}
	if err := m.waitFor(ctx, holdTimeout, func() bool { return answered.Load() >= int64(s.HeldCalls) }, func() string {
		return fmt.Sprintf("%d of %d denied calls answered", answered.Load(), s.HeldCalls)
	}); err != nil {
		return RunResult{}, err
	}
	res = measure()
	hr.AfterCallsPerSec = res.CallsPerSec
	m.stopRefill()
	if n, err := countHolds(ctx, r.e.conn); err != nil || n != 0 {
		return RunResult{}, fmt.Errorf("%d calls still held after every one was denied (%v)", n, err)
	}
	if mean := (hr.WithoutCallsPerSec + hr.AfterCallsPerSec) / 2; mean > 0 {
		hr.Ratio = round(hr.WithCallsPerSec/mean, 3)
	}
	// The counts of the whole run (publishes, failures: res's, the last)
	// and the window with the held calls.
	res.Calls, res.CallsPerSec = with.Calls, with.CallsPerSec
	res.Held = hr
	return res, nil
}

// countResults adds one to n for every result of the held personality's
// batch stored from now on, until stop is called.
func (r *fairRun) countResults(ctx context.Context, batch string, n *atomic.Int64) (stop func(), err error) {
	filter, err := r.e.names.BatchResultsFilter(heldPersonality, batch)
	if err != nil {
		return nil, err
	}
	return r.e.conn.Tail(ctx, r.e.names.ResultsStream(), []string{filter}, bus.FromNew, func(*bus.Msg) { n.Add(1) })
}

// hold publishes n echo calls of the held personality (call ids
// <batch><seq>, batch id batch), each acknowledged by the stream, from
// 64 goroutines, and returns their ids.
func (r *fairRun) hold(ctx context.Context, batch string, n int) ([]string, error) {
	subject, err := r.e.names.CallSubject(r.sys.pool, heldPersonality, echo.Name)
	if err != nil {
		return nil, err
	}
	all := make([]string, n)
	for i := range all {
		all[i] = batch + strconv.Itoa(i)
	}
	const publishers = 64
	ids := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range publishers {
		wg.Go(func() {
			for id := range ids {
				body := fmt.Appendf(nil, `{"call_id":%q,"batch_id":%q,"tool":"echo","session_id":"bench","personality_id":%q,"args":{"text":%q}}`,
					id, batch, heldPersonality, heldText)
				if _, err := r.e.conn.Publish(ctx, subject, body, bus.Header{protocol.HeaderProtocol: {protocol.Version}}, id); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("publish held call %s: %w", id, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, id := range all {
		ids <- id
	}
	close(ids)
	wg.Wait()
	return all, errors.Join(errs...)
}

// deny denies every held call of ids with a decision request each, 64 at
// a time, as an approver does (approvals.md).
func (r *fairRun) deny(ctx context.Context, ids []string) error {
	body, err := json.Marshal(approval.Request{Decision: protocol.ApprovalDenied, Reason: "benchmark", By: "capstan-bench"})
	if err != nil {
		return err
	}
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := r.deny1(ctx, id, body)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// deny1 sends one decision request and checks its reply.
func (r *fairRun) deny1(ctx context.Context, id string, body []byte) error {
	subject, err := r.e.names.ApprovalSubject(heldPersonality, id)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	data, err := r.e.conn.Request(rctx, subject, body)
	if err != nil {
		return fmt.Errorf("deny %s: %w", id, err)
	}
	var reply approval.Reply
	if err := json.Unmarshal(data, &reply); err != nil {
		return fmt.Errorf("deny %s: invalid reply: %w", id, err)
	}
	if !reply.OK {
		return fmt.Errorf("deny %s: refused: %s", id, reply.Error)
	}
	return nil
}

// waitHeld polls the approvals bucket's stream until it stores n entries
// (every call held: nothing else writes to it during the run), for at
// most holdTimeout.
func (r *fairRun) waitHeld(ctx context.Context, n int) error {
	stream := "KV_" + r.e.names.ApprovalsBucket()
	deadline := time.Now().Add(holdTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := r.e.conn.StreamMsgs(ctx, stream)
		if err == nil && got >= uint64(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %d of %d calls held (%v)", holdTimeout, got, n, err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// countHolds counts the held personality's hold keys in the approvals
// bucket.
func countHolds(ctx context.Context, conn *bus.Conn) (int, error) {
	kv, err := conn.KV(ctx, bus.Approvals)
	if err != nil {
		return 0, err
	}
	keys, err := kv.Keys(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, k := range keys {
		if strings.HasPrefix(k, "hold."+heldPersonality+".") {
			n++
		}
	}
	return n, nil
}
