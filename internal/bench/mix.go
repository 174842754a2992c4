package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/tools/echo"
)

// publishers is how many goroutines publish a mix's backlogged calls: each
// waits for the stream's ack, so a backlog of thousands is published in
// about a second, and each result's next call goes out at once.
const publishers = 256

// class is one group of calls of a fairness run: one or more personalities,
// each kept backlogged (Backlog calls waiting or running: a closed loop, each
// result publishes the next call of its personality) or, with Backlog 0,
// paced (one call per interval inside the window: an open loop). Its
// measures are guarded by the mix's rmu.
type class struct {
	personalities []string
	sleepMS       int
	backlog       int

	subjects    []string
	text        string
	published   atomic.Int64
	outstanding atomic.Int64

	// Under mix.rmu.
	inWindow int             // results received inside the window
	windows  []int           // results received in each sub-window
	samples  []time.Duration // time to result of calls published inside the window
}

// call is a published call waiting for its result.
type call struct {
	c     *class
	p     int  // index in c.personalities
	prime bool // a personality's first call: its result queues no next one
	start time.Time
}

// mix is the load generator of a fairness run: classes of echo calls of
// several personalities, published to the worker's pool, and the one
// ordered consumer of their results. Every call gets the id <batch>c<seq>.
type mix struct {
	conn    *bus.Conn
	names   protocol.Names
	batch   string
	classes []*class

	seq     atomic.Uint64
	pending sync.Map // seq → *call
	queue   chan *call
	refill  atomic.Bool
	// from and to bound the window (Unix nanoseconds, 0 until set); sub is
	// the length of its sub-windows (0: none).
	from, to atomic.Int64
	sub      time.Duration

	failures atomic.Int64
	errMu    sync.Mutex
	firstErr string

	rmu sync.Mutex

	cancel   context.CancelFunc
	pubs     sync.WaitGroup
	stopTail func()
}

// newMix returns the load of classes, publishing to pool with args of
// about argBytes; start starts it.
func newMix(conn *bus.Conn, batch, pool string, argBytes int, classes ...*class) (*mix, error) {
	m := &mix{conn: conn, names: conn.Names(), batch: batch, classes: classes}
	size := 0
	for _, c := range classes {
		c.text = argText(argBytes, c.sleepMS)
		c.subjects = make([]string, len(c.personalities))
		for i, p := range c.personalities {
			s, err := m.names.CallSubject(pool, p, echo.Name)
			if err != nil {
				return nil, err
			}
			c.subjects[i] = s
		}
		size += c.backlog * len(c.personalities)
	}
	m.queue = make(chan *call, max(size, 1))
	return m, nil
}

// start tails the batch's results and starts the publishers of backlogged
// calls; close stops both.
func (m *mix) start(ctx context.Context) error {
	filter := m.names.Prefix() + ".result.*." + m.batch + ".*"
	stop, err := m.conn.Tail(ctx, m.names.ResultsStream(), []string{filter}, bus.FromNew, m.onResult)
	if err != nil {
		return err
	}
	m.stopTail = stop
	pctx, cancel := context.WithCancel(ctx)
	m.cancel = cancel
	for range publishers {
		m.pubs.Go(func() {
			var buf []byte
			for {
				select {
				case c := <-m.queue:
					buf = m.publish(pctx, buf, c)
				case <-pctx.Done():
					return
				}
			}
		})
	}
	return nil
}

// close stops publishing and reading results. Calls still waiting stay in
// the stream.
func (m *mix) close() {
	m.refill.Store(false)
	m.cancel()
	m.pubs.Wait()
	m.stopTail()
}

// publish publishes c as a client does (Nats-Msg-Id = call_id and
// Capstan-Protocol) and waits for the stream's ack.
func (m *mix) publish(ctx context.Context, buf []byte, c *call) []byte {
	seq := m.seq.Add(1)
	id := m.batch + "c" + strconv.FormatUint(seq, 10)
	buf = append(buf[:0], `{"call_id":"`...)
	buf = append(buf, id...)
	buf = append(buf, `","batch_id":"`...)
	buf = append(buf, m.batch...)
	buf = append(buf, `","tool":"echo","session_id":"bench","personality_id":"`...)
	buf = append(buf, c.c.personalities[c.p]...)
	buf = append(buf, `","args":{"text":"`...)
	buf = append(buf, c.c.text...)
	buf = append(buf, '"')
	if c.c.sleepMS > 0 {
		buf = append(buf, `,"sleep_ms":`...)
		buf = strconv.AppendInt(buf, int64(c.c.sleepMS), 10)
	}
	buf = append(buf, "}}"...)
	hdr := bus.Header{protocol.HeaderProtocol: {protocol.Version}}
	c.c.outstanding.Add(1)
	c.start = time.Now()
	m.pending.Store(seq, c)
	if _, err := m.conn.Publish(ctx, c.c.subjects[c.p], buf, hdr, id); err != nil {
		if _, ok := m.pending.LoadAndDelete(seq); ok {
			c.c.outstanding.Add(-1)
			if ctx.Err() == nil {
				m.fail(fmt.Sprintf("publish %s: %v", id, err))
			}
		}
		return buf
	}
	c.c.published.Add(1)
	return buf
}

func (m *mix) fail(msg string) {
	m.failures.Add(1)
	m.errMu.Lock()
	defer m.errMu.Unlock()
	if m.firstErr == "" {
		m.firstErr = msg
	}
}

// errors returns the failures counted so far and the first one.
func (m *mix) errors() (int64, string) {
	m.errMu.Lock()
	defer m.errMu.Unlock()
	return m.failures.Load(), m.firstErr
}

func (m *mix) inside(t time.Time) bool {
	from := m.from.Load()
	return from != 0 && t.UnixNano() >= from && t.UnixNano() < m.to.Load()
}

// onResult runs on the results consumer's goroutine for every result of
// the batch.
func (m *mix) onResult(msg *bus.Msg) {
	now := time.Now()
	id := msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]
	seq, err := strconv.ParseUint(strings.TrimPrefix(id, m.batch+"c"), 10, 64)
	if err != nil {
		m.fail(fmt.Sprintf("result on unexpected subject %s", msg.Subject))
		return
	}
	v, ok := m.pending.LoadAndDelete(seq)
	if !ok {
		return // a second result: the load counts only the first
	}
	c := v.(*call)
	c.c.outstanding.Add(-1)
	if !bytes.Contains(msg.Data, okTrue) {
		var r struct {
			Code  string `json:"code"`
			Error string `json:"error"`
		}
		_ = json.Unmarshal(msg.Data, &r)
		m.fail(fmt.Sprintf("call %s: %s: %s", id, r.Code, r.Error))
	}
	m.rmu.Lock()
	if m.inside(now) {
		c.c.inWindow++
		if m.sub > 0 {
			if i := int(now.UnixNano()-m.from.Load()) / int(m.sub); i < len(c.c.windows) {
				c.c.windows[i]++
			}
		}
	}
	if c.c.backlog == 0 && m.inside(c.start) {
		c.c.samples = append(c.c.samples, now.Sub(c.start))
	}
	m.rmu.Unlock()
	if c.c.backlog > 0 && !c.prime && m.refill.Load() {
		select {
		case m.queue <- &call{c: c.c, p: c.p}:
		default:
			m.fail("the backlog queue is full: more results than calls published")
		}
	}
}

// prime publishes one call of each of c's personalities and waits for
// their results: every personality's lane exists afterwards. It returns
// how long that took.
func (m *mix) prime(ctx context.Context, c *class, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	sem := make(chan struct{}, publishers)
	var wg sync.WaitGroup
	for p := range c.personalities {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			m.publish(ctx, nil, &call{c: c, p: p, prime: true})
		})
	}
	wg.Wait()
	err := m.waitFor(ctx, timeout, func() bool { return c.outstanding.Load() == 0 }, func() string {
		return fmt.Sprintf("%d of the first calls of %d personalities unanswered", c.outstanding.Load(), len(c.personalities))
	})
	return time.Since(start), err
}

// fill queues c's backlog: Backlog calls of each of its personalities,
// each result of which queues the next one until close or stopRefill.
func (m *mix) fill(c *class) {
	m.refill.Store(true)
	for range c.backlog {
		for p := range c.personalities {
			m.queue <- &call{c: c, p: p}
		}
	}
}

// stopRefill stops replacing answered backlogged calls.
func (m *mix) stopRefill() { m.refill.Store(false) }

// waitPublished waits until c's whole backlog has been published once.
func (m *mix) waitPublished(ctx context.Context, c *class, timeout time.Duration) error {
	want := int64(c.backlog * len(c.personalities))
	return m.waitFor(ctx, timeout, func() bool { return c.published.Load() >= want }, func() string {
		return fmt.Sprintf("%d of a backlog of %d calls published", c.published.Load(), want)
	})
}

// waitAnswered waits until every published call of c has its result.
func (m *mix) waitAnswered(ctx context.Context, c *class, timeout time.Duration) error {
	return m.waitFor(ctx, timeout, func() bool { return c.outstanding.Load() == 0 }, func() string {
		return fmt.Sprintf("%d results missing", c.outstanding.Load())
	})
}

// waitFor polls done every 5 ms until it holds, timeout passes (an error
// saying what) or ctx ends.
func (m *mix) waitFor(ctx context.Context, timeout time.Duration, done func() bool, what func() string) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %s", timeout, what())
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// window sets the measurement window [from, from+d), divided into
// sub-windows of sub (0: none), and clears every class's measures.
func (m *mix) window(from time.Time, d, sub time.Duration) {
	m.rmu.Lock()
	defer m.rmu.Unlock()
	m.sub = sub
	for _, c := range m.classes {
		c.inWindow, c.samples = 0, nil
		c.windows = nil
		if sub > 0 {
			c.windows = make([]int, int(d/sub))
		}
	}
	m.to.Store(from.Add(d).UnixNano())
	m.from.Store(from.UnixNano())
}

// until waits for the end of the window (or ctx's).
func (m *mix) until(ctx context.Context) {
	t := time.NewTimer(time.Until(time.Unix(0, m.to.Load())))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// pace publishes one call of c's first personality at the start of the
// window and every interval after, each on its own goroutine (an open
// loop), until the window ends.
func (m *mix) pace(ctx context.Context, c *class, interval time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	at := time.Unix(0, m.from.Load())
	to := time.Unix(0, m.to.Load())
	for ; at.Before(to); at = at.Add(interval) {
		t := time.NewTimer(time.Until(at))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		wg.Go(func() { m.publish(ctx, nil, &call{c: c}) })
	}
	m.until(ctx)
}

// measures returns c's results inside the window, per sub-window, and its
// time-to-result samples, sorted.
func (m *mix) measures(c *class) (inWindow int, windows []int, samples []time.Duration) {
	m.rmu.Lock()
	defer m.rmu.Unlock()
	samples = slices.Clone(c.samples)
	slices.Sort(samples)
	return c.inWindow, slices.Clone(c.windows), samples
}
