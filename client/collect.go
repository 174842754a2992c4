package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// ResultMissing is the error of the execution_failed result given to a call
// that had no result when the wait ended (protocol.md, "Tool catalog").
const ResultMissing = "Tool result missing: no result before deadline"

// WaitSlack is added to a call's timeout_ms to get how long to wait for its result.
const WaitSlack = 10 * time.Second

const (
	// publishParallelism bounds the publishes in flight in one Collect.
	publishParallelism = 64
	// filtersPerTail bounds the filters of one results consumer: one, so
	// that the consumer-create request's subject carries the filter and a
	// tenant's NATS permissions can bind it to its personality's results
	// (security.md section 3; deploy/nats/auth.conf).
	filtersPerTail = 1
)

// Turn describes one LLM turn for ExecuteParallel. The zero value is usable.
type Turn struct {
	// BatchID is the batch_id given to every call of the turn; default NewID().
	BatchID string
	// BudgetChars is the turn's result budget, shared equally by its calls;
	// default 80,000 characters (tools.md, "Turn budget").
	BudgetChars int
	// Wait bounds the wait for results; default the longest timeout_ms of the
	// calls plus 10s (Config.DefaultWait for a call without timeout_ms). A
	// negative Wait waits until every result arrives or ctx ends. ctx's
	// deadline caps it either way.
	Wait time.Duration
}

// ExecuteParallel runs the calls of one turn concurrently and returns their
// results in input order, each its own. Every call gets batch_id =
// turn.BatchID and, unless it sets its own, result_budget_chars =
// floor(BudgetChars / len(calls)) (at least 1; calls the client refuses count
// too). It never fails as a whole: a call the client refuses gets its
// *RefusedError's result, a call that could not be published gets
// execution_failed with the error, and a call with no result when the wait
// ends gets execution_failed / ResultMissing.
func (c *Client) ExecuteParallel(ctx context.Context, turn Turn, calls []Call) []Result {
	if len(calls) == 0 {
		return []Result{}
	}
	if turn.BatchID == "" {
		turn.BatchID = NewID()
	}
	budget := turn.BudgetChars
	if budget <= 0 {
		budget = protocol.DefaultTurnBudgetChars
	}
	share := max(int64(budget/len(calls)), 1)
	calls = slices.Clone(calls)
	for i := range calls {
		calls[i].BatchID = turn.BatchID
		if calls[i].ResultBudgetChars == 0 {
			calls[i].ResultBudgetChars = share
		}
	}
	return c.Collect(ctx, calls, turn.Wait, nil)
}

// Collect publishes calls (in parallel, at most 64 publishes in flight) and
// returns their results in input order. Calls may belong to different
// batches; the results of each batch are read from the start of the results
// stream, so results stored before Collect are found too. A call_id that
// already has a stored result, or was submitted within the de-duplication
// window, is not run again: Collect returns the first submission's result,
// whatever its batch. Collect does not
// change calls: ids it generates are in the results.
//
// wait bounds the wait for results: 0 means the default of Turn.Wait, a
// negative wait lasts until every result arrives or ctx ends. Collect never
// fails as a whole; refused, unpublished and unanswered calls get results as
// described in ExecuteParallel. Duplicate results (at-least-once delivery)
// are ignored: the first one wins.
//
// onResult, if not nil, is called once per call as its result becomes known,
// in completion order, on Collect's goroutine.
func (c *Client) Collect(ctx context.Context, calls []Call, wait time.Duration, onResult func(i int, r Result)) []Result {
	calls = slices.Clone(calls)
	col := &collector{results: make([]Result, len(calls)), done: make([]bool, len(calls)), onResult: onResult}
	outs := make([]outgoing, len(calls))
	waiting := make(map[string][]int) // call_id → indices in calls
	var filters []string
	seenBatch := make(map[string]bool)
	var toPublish []int
	supplied := make([]bool, len(calls)) // the caller chose the call_id
	for i := range calls {
		supplied[i] = calls[i].CallID != ""
		out, err := c.prepare(&calls[i])
		if err != nil {
			var re *RefusedError
			if errors.As(err, &re) {
				col.set(i, re.Result)
			} else {
				col.set(i, protocol.Failure(&calls[i], protocol.CodeExecutionFailed, err.Error()))
			}
			continue
		}
		outs[i] = out
		waiting[calls[i].CallID] = append(waiting[calls[i].CallID], i)
		if b := calls[i].PersonalityID + "." + calls[i].EffectiveBatchID(); !seenBatch[b] {
			seenBatch[b] = true
			f, _ := c.names.BatchResultsFilter(calls[i].PersonalityID, calls[i].EffectiveBatchID()) // checked by prepare
			filters = append(filters, f)
		}
		toPublish = append(toPublish, i)
	}
	if len(toPublish) == 0 {
		return col.results
	}

	if wait == 0 {
		wait = c.defaultWait(calls)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if wait > 0 {
		var cancelWait context.CancelFunc
		ctx, cancelWait = context.WithTimeout(ctx, wait)
		defer cancelWait()
	}

	events := make(chan event, 256)
	quit := make(chan struct{})
	send := func(ev event) {
		select {
		case events <- ev:
		case <-quit:
		}
	}
	tails := &tailSet{}
	defer tails.stop()
	if err := c.tailResults(ctx, tails, filters, send); err != nil {
		for _, i := range toPublish {
			col.set(i, protocol.Failure(&calls[i], protocol.CodeExecutionFailed, err.Error()))
		}
		return col.results
	}

	var wg sync.WaitGroup
	next := make(chan int)
	for range min(publishParallelism, len(toPublish)) {
		wg.Go(func() {
			for i := range next {
				if supplied[i] {
					// call_id is the idempotency key: a call answered before
					// (perhaps in another batch, perhaps before a server
					// restart erased the de-duplication window) is not run again.
					if r, found, err := c.result(ctx, calls[i].PersonalityID, calls[i].CallID); err == nil && found {
						send(event{callID: calls[i].CallID, res: r})
						continue
					}
				}
				dup, err := c.publish(ctx, calls[i].CallID, outs[i])
				switch {
				case err != nil && ctx.Err() == nil:
					send(event{idx: i, res: protocol.Failure(&calls[i], protocol.CodeExecutionFailed, err.Error())})
				case dup:
					// Submitted before, maybe in another batch: follow that result.
					if err := c.tailResults(ctx, tails, []string{callResultFilter(c.names, calls[i].PersonalityID, calls[i].CallID)}, send); err != nil && ctx.Err() == nil {
						send(event{idx: i, res: protocol.Failure(&calls[i], protocol.CodeExecutionFailed, err.Error())})
					}
				}
			}
		})
	}
	go func() {
		defer close(next)
		for _, i := range toPublish {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()

	remaining := len(toPublish)
	for remaining > 0 && ctx.Err() == nil {
		select {
		case ev := <-events:
			if ev.callID == "" {
				remaining -= col.set(ev.idx, ev.res)
				continue
			}
			for _, i := range waiting[ev.callID] {
				r := ev.res
				if ev.err != nil {
					r = protocol.Failure(&calls[i], protocol.CodeExecutionFailed, ev.err.Error())
				}
				remaining -= col.set(i, r)
			}
		case <-ctx.Done():
		}
	}
	close(quit)
	cancel()
	wg.Wait()
	for _, i := range toPublish {
		col.set(i, protocol.Failure(&calls[i], protocol.CodeExecutionFailed, ResultMissing))
	}
	return col.results
}

// event is a publish failure (callID == "") or a result read from the stream.
type event struct {
	idx    int
	callID string // the call token of a result's subject
	res    Result
	err    error // the result could not be decoded
}

// tailSet holds the results consumers of one Collect.
type tailSet struct {
	mu    sync.Mutex
	stops []func()
}

func (t *tailSet) add(stop func()) {
	t.mu.Lock()
	t.stops = append(t.stops, stop)
	t.mu.Unlock()
}

func (t *tailSet) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.stops {
		s()
	}
	t.stops = nil
}

// tailResults reads the results matching filters from the start of the
// results stream and sends each to send, with at most filtersPerTail filters
// per consumer.
func (c *Client) tailResults(ctx context.Context, tails *tailSet, filters []string, send func(event)) error {
	for chunk := range slices.Chunk(filters, filtersPerTail) {
		stop, err := c.conn.Tail(ctx, c.names.ResultsStream(), chunk, bus.FromStart, func(m *bus.Msg) {
			ev := event{callID: m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]}
			ev.res, ev.err = decodeResult(m.Data)
			send(ev)
		})
		if err != nil {
			return err
		}
		tails.add(stop)
	}
	return nil
}

// callResultFilter is <p>.result.<personality>.*.<call> for a call prepare
// has checked.
func callResultFilter(n protocol.Names, personality, callID string) string {
	f, _ := n.CallResultFilter(personality, callID)
	return f
}

// defaultWait is the longest timeout_ms of calls plus WaitSlack, counting
// Config.DefaultWait for a call without timeout_ms.
func (c *Client) defaultWait(calls []Call) time.Duration {
	var w time.Duration
	for i := range calls {
		d := c.cfg.DefaultWait
		if calls[i].TimeoutMS > 0 {
			d = time.Duration(calls[i].TimeoutMS)*time.Millisecond + WaitSlack
		}
		w = max(w, d)
	}
	return w
}

// collector holds the results of one Collect; only Collect's goroutine uses it.
type collector struct {
	results  []Result
	done     []bool
	onResult func(int, Result)
}

// set records r as call i's result unless it already has one; it returns 1
// when it did, 0 otherwise.
func (c *collector) set(i int, r Result) int {
	if c.done[i] {
		return 0
	}
	c.done[i] = true
	c.results[i] = r
	if c.onResult != nil {
		c.onResult(i, r)
	}
	return 1
}
