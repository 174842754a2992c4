package bus

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BaselineConfig configures a Baseline.
type BaselineConfig struct {
	// URL is the NATS server. Required.
	URL string
	// Creds is the server's credentials file (see Config.Creds); "" for none.
	Creds string
	// Prefix is the subject prefix; default "capstan".
	Prefix string
	// Pool is the pool whose calls the baseline answers (its durable
	// consumer is named after it); default "raw". It must not be a pool a
	// Capstan worker serves: the calls stream is a work queue.
	Pool string
	// Concurrency is how many calls are handled at once; default 64.
	Concurrency int
	// AckWait is the consumer's ack wait; default DefaultAckWait.
	AckWait time.Duration
}

// Baseline is the raw ceiling of the benchmark (internal/bench,
// docs/benchmarks.md): a minimal hand-written JetStream work-queue consumer
// with nothing of Capstan in its path. It is what a user would write instead
// of running Capstan, and it lives here only because this package is the one
// importer of nats.go.
//
// On its own connection it consumes <p>.call.<pool>.> with a durable pull
// consumer (explicit ack), fetching as many calls as it has free handlers
// (Concurrency), as the worker does, each handled on its own goroutine; a
// handler takes the personality from the call's subject, decodes the call's
// call_id, batch_id, tool and args.text (and waits args.sleep_ms, like echo),
// publishes an ok result carrying the text to
// <p>.result.<personality>.<batch>.<call> on the results stream with
// Nats-Msg-Id <call>.result, waits for the stream's ack, and acks the call.
// It has no policy, schema validation, lease, completion record, cancel
// check, audit record, metrics, tracing or logging.
type Baseline struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	fails int
	last  error
}

// StartBaseline connects and starts answering calls; Stop ends it.
func StartBaseline(ctx context.Context, cfg BaselineConfig) (*Baseline, error) {
	if cfg.URL == "" {
		return nil, errors.New("baseline: URL must be set")
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, protocol.DefaultPrefix)
	cfg.Pool = cmp.Or(cfg.Pool, "raw")
	cfg.Concurrency = cmp.Or(max(cfg.Concurrency, 0), 64)
	cfg.AckWait = cmp.Or(max(cfg.AckWait, 0), DefaultAckWait)
	names, err := protocol.NewNames(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	filter, err := names.PoolFilter(cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("baseline: pool: %w", err)
	}
	opts := []nats.Option{nats.Name("capstan-bench raw baseline")}
	if cfg.Creds != "" {
		opt, err := credsOption(cfg.Creds)
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("baseline: connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("baseline: jetstream: %w", err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, names.CallsStream(), jetstream.ConsumerConfig{
		Durable:       cfg.Pool,
		Description:   "Capstan benchmark: raw JetStream baseline",
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxAckPending: MaxAckPending,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("baseline: consumer %s: %w", cfg.Pool, err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	b := &Baseline{nc: nc, cancel: stop}
	b.wg.Go(func() { b.pull(runCtx, js, names, cons, cfg.Concurrency) })
	return b, nil
}

// pull fetches as many calls as there are free handlers and hands each to
// a handler goroutine, until ctx ends.
func (b *Baseline) pull(ctx context.Context, js jetstream.JetStream, names protocol.Names, cons jetstream.Consumer, concurrency int) {
	slots := make(chan struct{}, concurrency)
	var handlers sync.WaitGroup
	defer handlers.Wait()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		n := 1
	more:
		for n < concurrency {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		got := 0
		batch, err := cons.Fetch(n, jetstream.FetchContext(fctx))
		if err == nil {
			for m := range batch.Messages() {
				got++
				handlers.Go(func() {
					defer func() { <-slots }()
					b.handle(js, names, m)
				})
			}
		}
		cancel()
		for range n - got {
			<-slots
		}
		if err != nil && ctx.Err() == nil {
			b.fail(fmt.Errorf("fetch: %w", err))
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
				return
			}
		}
	}
}

// baselineCall is the part of a call the baseline reads.
type baselineCall struct {
	CallID  string `json:"call_id"`
	BatchID string `json:"batch_id"`
	Tool    string `json:"tool"`
	Args    struct {
		Text    string `json:"text"`
		SleepMS int64  `json:"sleep_ms"`
	} `json:"args"`
}

// baselineResult is the result the baseline publishes (a subset of
// protocol.Result with the same field names).
type baselineResult struct {
	CallID     string `json:"call_id"`
	BatchID    string `json:"batch_id"`
	Tool       string `json:"tool"`
	OK         bool   `json:"ok"`
	Value      string `json:"value"`
	DurationMS int64  `json:"duration_ms"`
	WorkerID   string `json:"worker_id"`
}

func (b *Baseline) handle(js jetstream.JetStream, names protocol.Names, m jetstream.Msg) {
	var c baselineCall
	if err := json.Unmarshal(m.Data(), &c); err != nil {
		b.fail(fmt.Errorf("decode call: %w", err))
		_ = m.Term()
		return
	}
	batch := c.BatchID
	if batch == "" {
		batch = c.CallID
	}
	call, err := names.ParseCallSubject(m.Subject())
	if err != nil {
		b.fail(err)
		_ = m.Term()
		return
	}
	subject, err := names.ResultSubject(call.Personality, batch, c.CallID)
	if err != nil {
		b.fail(err)
		_ = m.Term()
		return
	}
	start := time.Now()
	if c.Args.SleepMS > 0 {
		time.Sleep(time.Duration(c.Args.SleepMS) * time.Millisecond)
	}
	data, err := json.Marshal(baselineResult{CallID: c.CallID, BatchID: batch, Tool: c.Tool, OK: true,
		Value: c.Args.Text, DurationMS: time.Since(start).Milliseconds(), WorkerID: "raw"})
	if err != nil {
		b.fail(err)
		_ = m.Term()
		return
	}
	out := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{protocol.HeaderProtocol: {protocol.Version}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, out, jetstream.WithMsgID(protocol.ResultMsgID(c.CallID))); err != nil {
		b.fail(fmt.Errorf("publish result: %w", err))
		_ = m.Nak()
		return
	}
	if err := m.Ack(); err != nil {
		b.fail(fmt.Errorf("ack: %w", err))
	}
}

func (b *Baseline) fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails++
	b.last = err
}

// Failures returns how many calls the baseline could not answer and the last
// reason.
func (b *Baseline) Failures() (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fails, b.last
}

// Stop stops consuming, waits for the handlers and closes the connection.
func (b *Baseline) Stop() {
	b.cancel()
	b.wg.Wait()
	b.nc.Close()
}
