package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/nats-io/nats.go/jetstream"
)

// Msg is a message read from a stream.
type Msg struct {
	Subject    string
	Header     Header
	Data       []byte
	StreamSeq  uint64
	Deliveries uint64
	Time       time.Time
	// Pending is how many messages the consumer still held for delivery
	// after this one (the delivery's metadata).
	Pending uint64
	m       jetstream.Msg
}

func newMsg(m jetstream.Msg) *Msg {
	out := &Msg{Subject: m.Subject(), Header: Header(m.Headers()), Data: m.Data(), m: m}
	if md, err := m.Metadata(); err == nil {
		out.StreamSeq = md.Sequence.Stream
		out.Deliveries = md.NumDelivered
		out.Time = md.Timestamp
		out.Pending = md.NumPending
	}
	return out
}

// Ack acknowledges the message and waits for the server to confirm.
func (m *Msg) Ack(ctx context.Context) error { return m.m.DoubleAck(ctx) }

// AckNoWait acknowledges the message without waiting for the server: for a
// call whose result the results stream already holds, a lost ack only
// means a redelivery that finds the result and is acknowledged then.
func (m *Msg) AckNoWait() error { return m.m.Ack() }

// Nak asks for redelivery after delay (0 = at once).
func (m *Msg) Nak(delay time.Duration) error {
	if delay <= 0 {
		return m.m.Nak()
	}
	return m.m.NakWithDelay(delay)
}

// InProgress resets the ack timer (heartbeat).
func (m *Msg) InProgress() error { return m.m.InProgress() }

// Term stops redelivery of the message, with a reason for advisories.
func (m *Msg) Term(reason string) error { return m.m.TermWithReason(reason) }

// PoolConsumer is a pool's durable pull consumer on <p>.call.<pool>.>.
type PoolConsumer struct {
	cons   jetstream.Consumer
	name   string
	timing Timing
	// limit is the cap of calls in flight of a personality's consumer
	// (its max_concurrency); 0 = none.
	limit int
}

// Timing returns the delivery timing of the consumer's pool.
func (p *PoolConsumer) Timing() Timing { return p.timing }

// PoolConsumerConfig returns the durable consumer configuration of a pool,
// the single place where delivery timing is fixed.
func (c *Conn) PoolConsumerConfig(pool string, maxDeliver int, ackWait time.Duration) (jetstream.ConsumerConfig, error) {
	filter, err := c.names.PoolFilter(pool)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if maxDeliver < 1 {
		return jetstream.ConsumerConfig{}, fmt.Errorf("max deliver must be at least 1, got %d", maxDeliver)
	}
	if ackWait < MinAckWait {
		return jetstream.ConsumerConfig{}, fmt.Errorf("ack wait must be at least %s, got %s", MinAckWait, ackWait)
	}
	return consumerConfig(pool, "Capstan pool "+pool, filter, maxDeliver, ackWait), nil
}

// consumerConfig is the configuration of a durable consumer of calls.
func consumerConfig(name, desc, filter string, maxDeliver int, ackWait time.Duration) jetstream.ConsumerConfig {
	t := Timing{AckWait: ackWait}
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   desc,
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    maxDeliver,
		MaxAckPending: MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		// Timing the worker applies on top of the consumer, shown with
		// it, and the protocol version it was created for.
		Metadata: map[string]string{
			"capstan_lease_ttl":        t.LeaseTTL().String(),
			"capstan_heartbeat":        t.Heartbeat().String(),
			"capstan_retry_backoff":    RetryBackoffText,
			"capstan_lease_held_retry": t.Heartbeat().String(),
			protocol.MetadataProtocol:  protocol.Version,
		},
	}
}

// PoolConsumer creates (or binds to) the pool's durable consumer. An existing
// consumer whose filter, ack policy, max deliver or ack wait differ is
// reported, and so is one created for a newer protocol version. One created
// by protocol version 1 (its filter is the same) is given the version's
// metadata: by then EnsureTopology has made sure that the calls stream holds
// no version-1 call.
func (c *Conn) PoolConsumer(ctx context.Context, pool string, maxDeliver int, ackWait time.Duration) (*PoolConsumer, error) {
	cfg, err := c.PoolConsumerConfig(pool, maxDeliver, ackWait)
	if err != nil {
		return nil, err
	}
	stream := c.names.CallsStream()
	cons, existing, err := c.createOrBind(ctx, stream, cfg)
	if err != nil {
		return nil, err
	}
	if !existing {
		return &PoolConsumer{cons: cons, name: pool, timing: Timing{AckWait: cfg.AckWait}}, nil
	}
	have := cons.CachedInfo().Config
	if reasons := consumerDiff(have, cfg); len(reasons) > 0 {
		return nil, &IncompatibleError{Kind: "consumer", Name: stream + "/" + pool, Reasons: reasons}
	}
	switch v := have.Metadata[protocol.MetadataProtocol]; v {
	case protocol.Version:
	case "":
		have.Metadata = maps.Clone(have.Metadata)
		if have.Metadata == nil {
			have.Metadata = map[string]string{}
		}
		maps.Copy(have.Metadata, cfg.Metadata)
		err = c.den.guard(ctx, apiConsumer(stream), func(ctx context.Context) (err error) {
			cons, err = c.js.UpdateConsumer(ctx, stream, have)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("bus: record protocol version %s on consumer %s: %w", protocol.Version, pool, err)
		}
	default:
		return nil, &VersionError{Kind: "consumer", Name: stream + "/" + pool, Version: v}
	}
	return &PoolConsumer{cons: cons, name: pool, timing: Timing{AckWait: have.AckWait}}, nil
}

// createOrBind creates the durable consumer cfg on stream, or binds to the
// one of its name that exists (existing is then true; the caller compares
// its configuration).
func (c *Conn) createOrBind(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (cons jetstream.Consumer, existing bool, err error) {
	err = c.den.guard(ctx, apiConsumer(stream), func(ctx context.Context) (err error) {
		cons, err = c.js.CreateConsumer(ctx, stream, cfg)
		if !errors.Is(err, jetstream.ErrConsumerExists) {
			return err
		}
		existing = true
		if cons, err = c.js.Consumer(ctx, stream, cfg.Durable); err != nil {
			return fmt.Errorf("read the existing consumer: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("bus: create consumer %s: %w", cfg.Durable, err)
	}
	return cons, existing, nil
}

// consumerDiff lists how an existing consumer of calls differs from the
// configuration a worker wants in what must be the same on every worker of
// a pool.
func consumerDiff(have, want jetstream.ConsumerConfig) []string {
	var reasons []string
	if have.FilterSubject != want.FilterSubject {
		reasons = append(reasons, fmt.Sprintf("filter is %q, want %q", have.FilterSubject, want.FilterSubject))
	}
	if have.AckPolicy != want.AckPolicy {
		reasons = append(reasons, fmt.Sprintf("ack policy is %s, want explicit", have.AckPolicy))
	}
	if have.MaxDeliver != want.MaxDeliver {
		reasons = append(reasons, fmt.Sprintf("max deliver is %d, want %d (CAPSTAN_MAX_DELIVER must be the same on every worker of a pool)", have.MaxDeliver, want.MaxDeliver))
	}
	if have.AckWait != want.AckWait {
		reasons = append(reasons, fmt.Sprintf("ack wait is %s, want %s (CAPSTAN_ACK_WAIT must be the same on every worker of a pool)", have.AckWait, want.AckWait))
	}
	return reasons
}

// Fetch pulls at most n calls and passes each to fn as soon as it arrives,
// waiting up to wait for the batch to fill. It returns how many it passed. It
// never pulls more than asked, so a worker pulls only what it has slots for.
func (p *PoolConsumer) Fetch(ctx context.Context, n int, wait time.Duration, fn func(*Msg)) (int, error) {
	if n <= 0 {
		return 0, nil
	}
	fctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	batch, err := p.cons.Fetch(n, jetstream.FetchContext(fctx))
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, nil
		}
		return 0, fetchError(err)
	}
	got := 0
	for m := range batch.Messages() {
		got++
		fn(newMsg(m))
	}
	if err := batch.Error(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && !errors.Is(err, jetstream.ErrNoMessages) && !isMaxAckPending(err) {
		return got, fetchError(err)
	}
	return got, nil
}

// Pending returns the calls waiting for the pool (not yet delivered) and the
// calls delivered but not yet acknowledged.
func (p *PoolConsumer) Pending(ctx context.Context) (waiting uint64, unacked int, err error) {
	info, err := p.cons.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("bus: consumer info: %w", err)
	}
	return info.NumPending, info.NumAckPending, nil
}
