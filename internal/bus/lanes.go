package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The scheduler's consumers (scheduling.md): each personality of a pool has
// a durable pull consumer of its own on the calls stream, named
// protocol.PersonalityConsumer(pool, personality) and filtered on
// <p>.call.<pool>.<personality>.>. Their filters never overlap, which the
// work-queue calls stream requires, so every call is delivered by exactly
// one of them; MaxAckPending carries the personality's max_concurrency, so
// the server caps its calls in flight across every worker.

// PersonalityConsumer creates, binds or updates the durable consumer of one
// personality's calls in a pool. maxInFlight is the personality's
// max_concurrency (0 = no cap: MaxAckPending); an existing consumer whose
// cap differs is updated, one whose filter, ack policy, max deliver or ack
// wait differ is reported as incompatible.
func (c *Conn) PersonalityConsumer(ctx context.Context, pool, personality string, maxDeliver int, ackWait time.Duration, maxInFlight int) (*PoolConsumer, error) {
	filter, err := c.names.PersonalityFilter(pool, personality)
	if err != nil {
		return nil, err
	}
	if maxDeliver < 1 {
		return nil, fmt.Errorf("max deliver must be at least 1, got %d", maxDeliver)
	}
	if ackWait < MinAckWait {
		return nil, fmt.Errorf("ack wait must be at least %s, got %s", MinAckWait, ackWait)
	}
	if maxInFlight < 0 {
		return nil, fmt.Errorf("max in flight must not be negative, got %d", maxInFlight)
	}
	name := protocol.PersonalityConsumer(pool, personality)
	cfg := consumerConfig(name, "Capstan pool "+pool+", personality "+personality, filter, maxDeliver, ackWait)
	cfg.MaxAckPending = MaxAckPending
	// The consumer's state (what it delivered, what is acknowledged) in the
	// server's memory: on a work-queue stream an acknowledged call is gone
	// from the stream, so the stream itself is the durable record, and
	// state files written per consumer were most of the server's work with
	// many personalities (docs/benchmarks.md, "1,000 personalities"). A
	// server restart forgets the consumer; the scheduler opens it again
	// (ErrConsumerGone) and the calls still in the stream are delivered.
	cfg.MemoryStorage = true
	// A consumer nobody pulled from, with no delivery in flight, for
	// LaneInactiveThreshold is deleted by the server: a personality that
	// went quiet costs nothing (every ack of a work-queue stream asks
	// every consumer). Its lane opens again with its next call.
	cfg.InactiveThreshold = LaneInactiveThreshold
	if maxInFlight > 0 {
		cfg.MaxAckPending = maxInFlight
	}
	stream := c.names.CallsStream()
	cons, existing, err := c.createOrBind(ctx, stream, cfg)
	if err != nil {
		return nil, err
	}
	if existing {
		have := cons.CachedInfo().Config
		if reasons := consumerDiff(have, cfg); len(reasons) > 0 {
			return nil, &IncompatibleError{Kind: "consumer", Name: stream + "/" + name, Reasons: reasons}
		}
		if have.MaxAckPending != cfg.MaxAckPending {
			upd := have
			upd.MaxAckPending = cfg.MaxAckPending
			upd.Metadata = maps.Clone(cfg.Metadata)
			err = c.den.guard(ctx, apiConsumer(stream), func(ctx context.Context) (err error) {
				cons, err = c.js.UpdateConsumer(ctx, stream, upd)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("bus: set the concurrency cap of consumer %s to %d: %w", name, maxInFlight, err)
			}
		}
	}
	return &PoolConsumer{cons: cons, name: name, timing: Timing{AckWait: cfg.AckWait}, limit: maxInFlight}, nil
}

// FetchNoWait pulls at most n calls that are waiting now and passes each
// to fn; it does not wait for more. It returns how many it passed; fewer
// than n means the consumer had no more to give (none waiting, or its cap
// of calls in flight reached: capped then reports the latter).
//
// A consumer with a cap asks the server first how many of its calls are in
// flight across the pool, and pulls no more than the cap leaves: the server
// holds a pull that asks past the cap until one of those calls ends or for
// about a second, with the caller's slots.
func (p *PoolConsumer) FetchNoWait(ctx context.Context, n int, fn func(*Msg)) (got int, capped bool, err error) {
	if n <= 0 {
		return 0, false, nil
	}
	if p.limit > 0 {
		info, err := p.cons.Info(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0, false, ctx.Err()
			}
			return 0, false, fetchError(err)
		}
		room := p.limit - info.NumAckPending
		if room <= 0 {
			return 0, true, nil
		}
		if room < n {
			got, capped, err := p.fetchNoWait(ctx, room, fn)
			return got, capped || got == room, err
		}
	}
	return p.fetchNoWait(ctx, n, fn)
}

func (p *PoolConsumer) fetchNoWait(ctx context.Context, n int, fn func(*Msg)) (got int, capped bool, err error) {
	batch, err := p.cons.FetchNoWait(n)
	if err != nil {
		if ctx.Err() != nil {
			return 0, false, ctx.Err()
		}
		return 0, false, fetchError(err)
	}
	for m := range batch.Messages() {
		got++
		fn(newMsg(m))
	}
	switch err := batch.Error(); {
	case err == nil, errors.Is(err, jetstream.ErrNoMessages), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
	case isMaxAckPending(err):
		return got, true, nil
	default:
		return got, false, fetchError(err)
	}
	return got, false, nil
}

// LaneInactiveThreshold is how long a personality's consumer lives without
// a pull and without a delivery in flight (the server waits for the last
// delivery's AckWait before it starts counting).
const LaneInactiveThreshold = 5 * time.Minute

// ErrConsumerGone is returned by a fetch that no server answers for the
// consumer: the server no longer has it (deleted when idle, or forgotten
// by a restart: its state is in memory), or, for a while, its stream has
// no leader. Opening the consumer again tells the two apart.
var ErrConsumerGone = errors.New("no server answers for the consumer (it does not exist, or its stream has no leader)")

// fetchError wraps a fetch's error; a pull that nobody answers, or that
// the server answers "consumer not found", is ErrConsumerGone.
func fetchError(err error) error {
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
		return fmt.Errorf("bus: fetch: %w: %w", ErrConsumerGone, err)
	}
	return fmt.Errorf("bus: fetch: %w", err)
}

// Name is the consumer's durable name.
func (p *PoolConsumer) Name() string { return p.name }

// WaitingByPersonality returns, per personality, how many calls of the pool
// the calls stream holds (waiting or in flight, not yet acknowledged): the
// stream's information with the subjects filter <p>.call.<pool>.*.*, one
// subject per personality and tool. Personalities with none are left out.
func (c *Conn) WaitingByPersonality(ctx context.Context, pool string) (map[string]uint64, error) {
	filter, err := c.names.PoolWaitingFilter(pool)
	if err != nil {
		return nil, err
	}
	stream := c.names.CallsStream()
	out := map[string]uint64{}
	prefix := c.names.Prefix() + ".call." + pool + "."
	err = c.den.guard(ctx, []string{"$JS.API.STREAM.INFO." + stream}, func(ctx context.Context) error {
		s, err := c.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return err
		}
		for subject, n := range info.State.Subjects {
			rest, ok := strings.CutPrefix(subject, prefix)
			if !ok || n == 0 {
				continue
			}
			personality, _, _ := strings.Cut(rest, ".")
			out[personality] += n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bus: calls waiting in pool %s: %w", pool, err)
	}
	return out, nil
}

// RetirePoolConsumer deletes the pool's single consumer of protocol
// versions before scheduling (durable <pool>, filter <p>.call.<pool>.>),
// whose filter overlaps every personality's: the calls it held stay in the
// work-queue stream and are delivered by the personalities' consumers. It
// reports whether there was one.
func (c *Conn) RetirePoolConsumer(ctx context.Context, pool string) (bool, error) {
	filter, err := c.names.PoolFilter(pool)
	if err != nil {
		return false, err
	}
	return c.retireConsumer(ctx, c.names.CallsStream(), pool, filter)
}

// retireConsumer deletes consumer name of stream when its filter is filter.
func (c *Conn) retireConsumer(ctx context.Context, stream, name, filter string) (bool, error) {
	deleted := false
	err := c.den.guard(ctx, apiConsumer(stream), func(ctx context.Context) error {
		cons, err := c.js.Consumer(ctx, stream, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if cons.CachedInfo().Config.FilterSubject != filter {
			return nil
		}
		if err := c.js.DeleteConsumer(ctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return err
		}
		deleted = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("bus: retire consumer %s of %s: %w", name, stream, err)
	}
	return deleted, nil
}

// isMaxAckPending reports the server's refusal of a pull while the
// consumer has its cap of unacknowledged messages out ("409 Exceeded
// MaxAckPending").
func isMaxAckPending(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "maxackpending")
}
