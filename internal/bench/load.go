package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// load is the load generator of one run. Every call gets the id
// <batch>c<seq>, so its result subject <p>.result.<personality>.<batch>.<batch>c<seq>
// says which call it answers without decoding the body.
type load struct {
	conn    *bus.Conn
	names   protocol.Names
	subject string
	batch   string
	s       Scenario
	text    string
	// serverPID is the server's process, whose CPU is measured apart; 0
	// when the server is this process's.
	serverPID int
	// onCall is Config.OnCall (nil: none).
	onCall func(CallSample)
	// from and to bound the measurement window; set before any call is
	// published, read-only afterwards.
	from, to time.Time

	seq         atomic.Uint64
	pending     sync.Map // seq → *flight
	outstanding atomic.Int64
	published   atomic.Int64
	pubInWindow atomic.Int64
	callBytes   atomic.Int64

	// Failures are counted from any goroutine; the first is kept.
	failures atomic.Int64
	errMu    sync.Mutex
	firstErr string

	// Written by the results consumer's goroutine; rmu also orders the
	// final read after it.
	rmu         sync.Mutex
	samples     []time.Duration
	inWindow    int
	resultBytes int64
	results     int64
	duplicates  int64
}

// flight is a published call waiting for its result.
type flight struct {
	start time.Time
	// done is closed when the result arrives (Saturate only).
	done chan struct{}
}

func newLoad(conn *bus.Conn, names protocol.Names, subject, batch string, s Scenario, argBytes int) *load {
	return &load{conn: conn, names: names, subject: subject, batch: batch, s: s, text: argText(argBytes, s.SleepMS)}
}

// argText returns the echo text that makes {"text":"<text>"}, plus
// sleep_ms when set, argBytes long.
func argText(argBytes, sleepMS int) string {
	n := argBytes - len(`{"text":""}`)
	if sleepMS > 0 {
		n -= len(`,"sleep_ms":`) + len(strconv.Itoa(sleepMS))
	}
	const alphabet = "Capstan runs LLM-agent tool calls at scale. "
	return strings.Repeat(alphabet, n/len(alphabet)+1)[:max(n, 1)]
}

// body appends the JSON of call seq to buf.
func (g *load) body(buf []byte, seq uint64) []byte {
	buf = append(buf, `{"call_id":"`...)
	buf = append(buf, g.batch...)
	buf = append(buf, 'c')
	buf = strconv.AppendUint(buf, seq, 10)
	buf = append(buf, `","batch_id":"`...)
	buf = append(buf, g.batch...)
	buf = append(buf, `","tool":"echo","session_id":"bench","personality_id":"`+personalityID+`","args":{"text":"`...)
	buf = append(buf, g.text...)
	buf = append(buf, '"')
	if g.s.SleepMS > 0 {
		buf = append(buf, `,"sleep_ms":`...)
		buf = strconv.AppendInt(buf, int64(g.s.SleepMS), 10)
	}
	return append(buf, "}}"...)
}

// publish publishes call seq as a client does: Nats-Msg-Id = call_id,
// Capstan-Protocol and, when traced, a sampled traceparent; it waits for
// the stream's ack. f.start is taken just before the publish.
func (g *load) publish(ctx context.Context, buf []byte, seq uint64, f *flight) []byte {
	buf = g.body(buf[:0], seq)
	id := g.batch + "c" + strconv.FormatUint(seq, 10)
	hdr := bus.Header{protocol.HeaderProtocol: {protocol.Version}}
	if g.s.Tracing {
		hdr.Set(protocol.HeaderTraceparent, traceparent())
	}
	g.outstanding.Add(1)
	f.start = time.Now()
	g.pending.Store(seq, f)
	g.callBytes.Add(int64(len(buf)))
	if _, err := g.conn.Publish(ctx, g.subject, buf, hdr, id); err != nil {
		if _, ok := g.pending.LoadAndDelete(seq); ok {
			g.outstanding.Add(-1)
			if ctx.Err() == nil {
				g.fail(fmt.Sprintf("publish %s: %v", id, err))
			}
			if f.done != nil {
				close(f.done)
			}
		}
		return buf
	}
	g.published.Add(1)
	if g.inside(f.start) {
		g.pubInWindow.Add(1)
	}
	return buf
}

func (g *load) inside(t time.Time) bool { return !t.Before(g.from) && t.Before(g.to) }

func (g *load) fail(msg string) {
	g.failures.Add(1)
	g.errMu.Lock()
	defer g.errMu.Unlock()
	if g.firstErr == "" {
		g.firstErr = msg
	}
}

var okTrue = []byte(`"ok":true`)

// onResult runs on the results consumer's goroutine for every result of
// the batch.
func (g *load) onResult(m *bus.Msg) {
	now := time.Now()
	i := strings.LastIndexByte(m.Subject, '.')
	id := m.Subject[i+1:]
	seq, err := strconv.ParseUint(strings.TrimPrefix(id, g.batch+"c"), 10, 64)
	if err != nil {
		g.fail(fmt.Sprintf("result on unexpected subject %s", m.Subject))
		return
	}
	g.rmu.Lock()
	defer g.rmu.Unlock()
	v, ok := g.pending.LoadAndDelete(seq)
	if !ok {
		g.duplicates++
		return
	}
	g.outstanding.Add(-1)
	f := v.(*flight)
	g.results++
	g.resultBytes += int64(len(m.Data))
	if !bytes.Contains(m.Data, okTrue) {
		var r struct {
			Code  string `json:"code"`
			Error string `json:"error"`
		}
		_ = json.Unmarshal(m.Data, &r)
		g.fail(fmt.Sprintf("call %s: %s: %s", id, r.Code, r.Error))
	}
	if g.inside(f.start) {
		g.samples = append(g.samples, now.Sub(f.start))
		if g.onCall != nil {
			g.onCall(CallSample{Scenario: g.s.Name, CallID: id, Start: f.start, Latency: now.Sub(f.start)})
		}
	}
	if g.inside(now) {
		g.inWindow++
	}
	if f.done != nil {
		close(f.done)
	}
}

// run warms up, measures for d and waits for the results of every call
// published.
func (g *load) run(ctx context.Context, warmup, d time.Duration) (RunResult, error) {
	filter, err := g.names.BatchResultsFilter(personalityID, g.batch)
	if err != nil {
		return RunResult{}, err
	}
	stop, err := g.conn.Tail(ctx, g.names.ResultsStream(), []string{filter}, bus.FromNew, g.onResult)
	if err != nil {
		return RunResult{}, err
	}
	start := time.Now()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	g.from = start.Add(warmup)
	g.to = g.from.Add(d)
	hard, cancel := context.WithDeadline(ctx, g.to.Add(drainTimeout))
	defer cancel()
	cpu := sampleCPU(hard, g.from, g.to, g.serverPID)
	if g.s.Load == Saturate {
		g.saturate(hard)
	} else {
		g.rate(hard)
	}
	// Collect the stragglers.
	tick := time.NewTicker(5 * time.Millisecond)
	for g.outstanding.Load() > 0 && hard.Err() == nil {
		select {
		case <-tick.C:
		case <-hard.Done():
		}
	}
	tick.Stop()
	stop()
	window := <-cpu
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if err := ctx.Err(); err != nil {
		return RunResult{}, err
	}
	if window.err != nil {
		return RunResult{}, fmt.Errorf("cpu time: %w", window.err)
	}
	if n := g.outstanding.Load(); n > 0 {
		g.failures.Add(n)
		g.fail(fmt.Sprintf("%d results missing %s after the run", n, drainTimeout))
	}
	r := g.result(d)
	r.ProcessCPUUSPerCall = perCallUS(window.process, r.Calls)
	r.ProcessCPUCores = cores(window.process, d)
	if g.serverPID > 0 {
		r.ServerCPUUSPerCall = perCallUS(window.server, r.Calls)
		r.ServerCPUCores = cores(window.server, d)
	}
	r.GCCycles = after.NumGC - before.NumGC
	r.GCPauseMS = float64(after.PauseTotalNs-before.PauseTotalNs) / 1e6
	if n := g.published.Load(); n > 0 {
		r.AllocBytesPerCall = int64(after.TotalAlloc-before.TotalAlloc) / n
	}
	return r, nil
}

// saturate keeps s.Outstanding calls in flight until the window ends.
func (g *load) saturate(ctx context.Context) {
	var wg sync.WaitGroup
	for range g.s.Outstanding {
		wg.Go(func() {
			var buf []byte
			for ctx.Err() == nil && time.Now().Before(g.to) {
				f := &flight{done: make(chan struct{})}
				buf = g.publish(ctx, buf, g.seq.Add(1), f)
				select {
				case <-f.done:
				case <-ctx.Done():
				}
			}
		})
	}
	wg.Wait()
}

// rate publishes s.Rate calls per second, each from its own goroutine (at
// most maxPublishing at once), until the window ends.
func (g *load) rate(ctx context.Context) {
	const maxPublishing = 1024
	sem := make(chan struct{}, maxPublishing)
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	interval := time.Duration(float64(time.Second) / g.s.Rate)
	tick := time.NewTicker(min(interval, time.Millisecond))
	defer tick.Stop()
	sent := 0
	for {
		now := time.Now()
		if !now.Before(g.to) {
			return
		}
		due := int(now.Sub(start) / interval)
		for ; sent < due; sent++ {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Go(func() {
				defer func() { <-sem }()
				g.publish(ctx, make([]byte, 0, len(g.text)+256), g.seq.Add(1), &flight{})
			})
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

func (g *load) result(d time.Duration) RunResult {
	g.rmu.Lock()
	defer g.rmu.Unlock()
	g.errMu.Lock()
	defer g.errMu.Unlock()
	r := RunResult{
		Calls:       g.inWindow,
		CallsPerSec: float64(g.inWindow) / d.Seconds(),
		OfferedPerS: float64(g.pubInWindow.Load()) / d.Seconds(),
		Published:   g.published.Load(),
		Samples:     len(g.samples),
		Errors:      g.failures.Load(),
		FirstError:  g.firstErr,
		Duplicates:  g.duplicates,
	}
	if g.published.Load() > 0 {
		r.CallBytes = g.callBytes.Load() / g.published.Load()
	}
	if g.results > 0 {
		r.ResultBytes = g.resultBytes / g.results
	}
	slices.Sort(g.samples)
	r.P50MS = ms(percentile(g.samples, 0.50))
	r.P90MS = ms(percentile(g.samples, 0.90))
	r.P99MS = ms(percentile(g.samples, 0.99))
	r.P999MS = ms(percentile(g.samples, 0.999))
	if n := len(g.samples); n > 0 {
		r.MaxMS = ms(g.samples[n-1])
	}
	return r
}

// percentile returns the q-quantile of sorted samples: the smallest sample
// with at least q of all samples at or below it (0 for none).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// traceparent returns a sampled W3C traceparent with random ids, as a
// traced client's propagator writes it ("00-<32 hex>-<16 hex>-01"), made
// without fmt so that the load generator spends little of the CPU it shares
// with the system under test.
func traceparent() string {
	var ids [24]byte
	binary.BigEndian.PutUint64(ids[0:], rand.Uint64())
	binary.BigEndian.PutUint64(ids[8:], rand.Uint64())
	binary.BigEndian.PutUint64(ids[16:], rand.Uint64()|1)
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], ids[:16])
	b[35] = '-'
	hex.Encode(b[36:52], ids[16:])
	copy(b[52:], "-01")
	return string(b[:])
}
