package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/nats-io/nats.go/jetstream"
)

// ShareWindow is the window of QueueEntry.StartsLastMinute: the last minute.
const ShareWindow = time.Minute

// QueueEntry is what one personality has in a pool's queue (scheduling.md,
// "What a user must be able to see").
type QueueEntry struct {
	// Personality is the personality's id (its subjects' token).
	Personality string
	// Waiting is how many of its calls wait for a slot in the pool: its
	// consumer's pending calls, or, for a personality without a consumer,
	// the calls the calls stream holds on its subjects of the pool.
	Waiting uint64
	// Running is how many of its calls the pool's workers run: its
	// consumer's calls delivered and not yet acknowledged (0 without a
	// consumer).
	Running int
	// StartsLastMinute counts the calls of this personality whose tool
	// started in the last minute, read from the audit records. An audit
	// record names no pool: the count is the personality's in every pool.
	// A call still running has no record yet and is not counted.
	StartsLastMinute int
	// ShareLastMinute is StartsLastMinute over the sum of StartsLastMinute
	// of every entry of the pool: a fraction from 0 to 1, 0 when none
	// started.
	ShareLastMinute float64
}

// PoolQueue returns, sorted by personality, an entry for every personality
// of pool that has a consumer on the calls stream (durable name
// protocol.PersonalityConsumer) or calls waiting there, with its share of
// the starts of the last minute. Its NATS user must list the calls
// stream's consumers, read the stream's subjects and read the audit stream
// (the operator's permissions). A personality's counts are read one after
// the other, not at one instant: they are a view of a moving queue.
func (c *Conn) PoolQueue(ctx context.Context, pool string) ([]QueueEntry, error) {
	if err := protocol.CheckToken("pool", pool); err != nil {
		return nil, fmt.Errorf("bus: queue of pool %q: %w", pool, err)
	}
	byName := map[string]*QueueEntry{}
	if err := c.poolConsumers(ctx, pool, byName); err != nil {
		return nil, fmt.Errorf("bus: queue of pool %s: %w", pool, err)
	}
	if err := c.poolWaiting(ctx, pool, byName); err != nil {
		return nil, err
	}
	starts, err := c.StartsSince(ctx, time.Now().Add(-ShareWindow))
	if err != nil {
		return nil, fmt.Errorf("bus: queue of pool %s: %w", pool, err)
	}
	total := 0
	for name, e := range byName {
		e.StartsLastMinute = starts[name]
		total += e.StartsLastMinute
	}
	out := make([]QueueEntry, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		e := byName[name]
		if total > 0 {
			e.ShareLastMinute = float64(e.StartsLastMinute) / float64(total)
		}
		out = append(out, *e)
	}
	return out, nil
}

// poolConsumers adds to byName the waiting and running calls of every
// personality of pool that has a consumer on the calls stream.
func (c *Conn) poolConsumers(ctx context.Context, pool string, byName map[string]*QueueEntry) error {
	stream := c.names.CallsStream()
	return c.den.guard(ctx, append(apiConsumer(stream), apiStreamInfo(stream)), func(ctx context.Context) error {
		s, err := c.js.Stream(ctx, stream)
		if err != nil {
			return fmt.Errorf("stream %s: %w", stream, err)
		}
		list := s.ListConsumers(ctx)
		for info := range list.Info() {
			p, personality, ok := protocol.ParsePersonalityConsumer(info.Name)
			if !ok || p != pool {
				continue
			}
			byName[personality] = &QueueEntry{Personality: personality, Waiting: info.NumPending, Running: info.NumAckPending}
		}
		if err := list.Err(); err != nil {
			return fmt.Errorf("list the consumers of %s: %w", stream, err)
		}
		return nil
	})
}

// poolWaiting adds to byName the personalities of pool without a consumer
// that have calls stored in the calls stream, with the count of those calls
// (WaitingByPersonality).
func (c *Conn) poolWaiting(ctx context.Context, pool string, byName map[string]*QueueEntry) error {
	counts, err := c.WaitingByPersonality(ctx, pool)
	if err != nil {
		return err
	}
	for personality, n := range counts {
		if _, has := byName[personality]; !has && n > 0 {
			byName[personality] = &QueueEntry{Personality: personality, Waiting: n}
		}
	}
	return nil
}

// StartsSince counts per personality the calls whose tool started at or
// after since (an audit record's time less its duration) and ran (see
// Ran), reading the audit records stored since then up to the last one
// stored when it begins. A record without a personality counts under "".
func (c *Conn) StartsSince(ctx context.Context, since time.Time) (map[string]int, error) {
	stream := c.names.AuditStream()
	starts := map[string]int{}
	err := c.den.guard(ctx, append(apiConsumer(stream), apiStreamInfo(stream)), func(ctx context.Context) error {
		return c.readSince(ctx, stream, since, func(data []byte) {
			// A line that is not a record ends its message's records; the
			// ones before it count.
			recs, _ := protocol.DecodeAuditRecords(data)
			for i := range recs {
				r := &recs[i]
				if Ran(r) && !r.Time.Add(-time.Duration(r.DurationMS)*time.Millisecond).Before(since) {
					starts[r.PersonalityID]++
				}
			}
		})
	})
	if err != nil {
		return nil, fmt.Errorf("bus: read the audit records since %s: %w", since.UTC().Format(time.RFC3339), err)
	}
	return starts, nil
}

// Ran reports whether the call of an audit record started its tool: it was
// allowed, or abandoned after its tool ran (its result could not be
// published; the record keeps the run's duration). Refusals, dry runs,
// calls cancelled or past their deadline before they started, and
// redeliveries answered from a stored result ran nothing.
func Ran(r *protocol.AuditRecord) bool {
	switch r.Decision {
	case protocol.DecisionAllowed:
		return true
	case protocol.DecisionAbandoned:
		return r.DurationMS > 0
	}
	return false
}

// readSince passes to fn the body of every message of stream stored at or
// after since, oldest first, up to the last message stored when it begins.
func (c *Conn) readSince(ctx context.Context, stream string, since time.Time, fn func([]byte)) error {
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", stream, err)
	}
	last := s.CachedInfo().State.LastSeq
	if last == 0 {
		return nil
	}
	cons, err := c.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime:  &since,
		// A consumer the delete below misses goes soon.
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return err
	}
	defer func() {
		// The read is done: its consumer goes now (best effort).
		if ci := cons.CachedInfo(); ci != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = c.js.DeleteConsumer(dctx, stream, ci.Name)
			cancel()
		}
	}()
	info, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	// Fetch asks for no more than is stored, so that it never waits for
	// messages to come.
	for remaining := info.NumPending; remaining > 0; {
		batch, err := cons.Fetch(int(min(remaining, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			if md.Sequence.Stream > last {
				remaining = 0
				continue
			}
			fn(m.Data())
			if md.Sequence.Stream == last || md.NumPending == 0 {
				remaining = 0
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return err
		}
		if got == 0 {
			return nil // the rest was removed (age, limits) meanwhile
		}
		remaining -= min(remaining, uint64(got))
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}
