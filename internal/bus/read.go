package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Start says where a Tail begins.
type Start int

// Tail starting points.
const (
	// FromStart delivers every stored message, then new ones.
	FromStart Start = iota
	// FromNew delivers only messages published after the tail starts.
	FromNew
	// LastPerSubject delivers the last stored message of each subject, then new ones.
	LastPerSubject
)

// Tail reads a stream through an ordered consumer filtered on filters and
// calls fn for each message, in order, on one goroutine, until stop is called
// or ctx ends. Messages need no ack.
func (c *Conn) Tail(ctx context.Context, stream string, filters []string, start Start, fn func(*Msg)) (stop func(), err error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, InactiveThreshold: 5 * time.Minute}
	switch start {
	case FromNew:
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	case LastPerSubject:
		cfg.DeliverPolicy = jetstream.DeliverLastPerSubjectPolicy
	default:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	var cons jetstream.Consumer
	// A refused consumer create (a tenant's filter outside its
	// personality) fails at once rather than at ctx's end.
	err = c.den.guard(ctx, apiConsumer(stream), func(ctx context.Context) (err error) {
		cons, err = c.js.OrderedConsumer(ctx, stream, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bus: tail %s %v: %w", stream, filters, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { fn(newMsg(m)) })
	if err != nil {
		return nil, fmt.Errorf("bus: tail %s %v: %w", stream, filters, err)
	}
	var once sync.Once
	stopFn := func() { once.Do(cc.Stop) }
	go func() {
		select {
		case <-ctx.Done():
			stopFn()
		case <-cc.Closed():
		}
	}()
	return stopFn, nil
}

// ErrNotFound is returned when a stream message does not exist.
var ErrNotFound = errors.New("message not found")

// LastMsg returns the last message on subject (which may hold wildcards) in
// stream, as the stream's leader has it: the read is never answered by a
// replica that may be behind (a direct get is, by whichever replica is
// nearest, even one cut off from the others or still catching up after a
// partition, and would report a stored message as missing). While the
// stream has no reachable leader the read fails; it never reports
// ErrNotFound for a message that a quorum has stored.
func (c *Conn) LastMsg(ctx context.Context, stream, subject string) (*Msg, error) {
	var raw *nats.RawStreamMsg
	err := c.den.guard(ctx, apiStreamRead(stream), func(ctx context.Context) error {
		js, err := c.nc.JetStream()
		if err != nil {
			return err
		}
		// nats.go's JetStreamContext reads with $JS.API.STREAM.MSG.GET
		// (answered by the leader only) unless told nats.DirectGet().
		raw, err = js.GetLastMsg(stream, subject, nats.Context(ctx))
		return err
	})
	if errors.Is(err, nats.ErrMsgNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("bus: last message on %s: %w", subject, err)
	}
	return &Msg{Subject: raw.Subject, Header: Header(raw.Header), Data: raw.Data, StreamSeq: raw.Sequence, Time: raw.Time}, nil
}

// ErrNoDirectGet reports a stream that answers no direct get: it does not
// exist, or does not allow direct gets (a results stream created by protocol
// version 1 and not yet migrated).
var ErrNoDirectGet = errors.New("the stream answers no direct get (missing, or created by protocol version 1 without direct gets)")

// DirectLast returns the last message on subject (which may hold wildcards)
// in stream, with a direct get that names the subject in its request subject
// ($JS.API.DIRECT.GET.<stream>.<subject>): server permissions can bind it to
// a subject, and it needs no stream info. The stream must allow direct gets.
func (c *Conn) DirectLast(ctx context.Context, stream, subject string) (*Msg, error) {
	req := apiDirectGet(stream, subject)
	var resp *nats.Msg
	err := c.den.guard(ctx, []string{req}, func(ctx context.Context) (err error) {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
		}
		resp, err = c.nc.RequestWithContext(ctx, req, nil)
		return err
	})
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("bus: last message on %s in %s: %w", subject, stream, ErrNoDirectGet)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: last message on %s in %s: %w", subject, stream, err)
	}
	if len(resp.Data) == 0 {
		switch status := resp.Header.Get("Status"); status {
		case "404":
			return nil, ErrNotFound
		case "":
		default:
			return nil, fmt.Errorf("bus: last message on %s in %s: the server answered %s %s", subject, stream, status, resp.Header.Get("Description"))
		}
	}
	h := Header(resp.Header)
	m := &Msg{Subject: h.Get(jetstream.SubjectHeader), Data: resp.Data}
	if m.Subject == "" {
		return nil, fmt.Errorf("bus: last message on %s in %s: the answer is not a stored message", subject, stream)
	}
	m.StreamSeq, _ = strconv.ParseUint(h.Get(jetstream.SequenceHeader), 10, 64)
	m.Time, _ = time.Parse(time.RFC3339Nano, h.Get(jetstream.TimeStampHeaer))
	for _, k := range []string{jetstream.StreamHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer, jetstream.SubjectHeader} {
		delete(h, k)
	}
	if len(h) > 0 {
		m.Header = h
	}
	return m, nil
}

// FirstMsg returns the first stored message on subject (which may hold
// wildcards) in stream.
func (c *Conn) FirstMsg(ctx context.Context, stream, subject string) (*Msg, error) {
	var raw *jetstream.RawStreamMsg
	err := c.readStream(ctx, stream, func(ctx context.Context, s jetstream.Stream) (err error) {
		raw, err = s.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("bus: first message on %s: %w", subject, err)
	}
	return &Msg{Subject: raw.Subject, Header: Header(raw.Header), Data: raw.Data, StreamSeq: raw.Sequence, Time: raw.Time}, nil
}

// GetMsg returns the message with sequence seq in stream.
func (c *Conn) GetMsg(ctx context.Context, stream string, seq uint64) (*Msg, error) {
	var raw *jetstream.RawStreamMsg
	err := c.readStream(ctx, stream, func(ctx context.Context, s jetstream.Stream) (err error) {
		raw, err = s.GetMsg(ctx, seq)
		return err
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("bus: get message %d of %s: %w", seq, stream, err)
	}
	return &Msg{Subject: raw.Subject, Header: Header(raw.Header), Data: raw.Data, StreamSeq: raw.Sequence, Time: raw.Time}, nil
}

// readStream runs read on a handle of stream, guarded against the server's
// refusal of the stream info and message reads.
func (c *Conn) readStream(ctx context.Context, stream string, read func(context.Context, jetstream.Stream) error) error {
	return c.den.guard(ctx, append(apiStreamRead(stream), apiStreamInfo(stream)), func(ctx context.Context) error {
		s, err := c.js.Stream(ctx, stream)
		if err != nil {
			return fmt.Errorf("stream %s: %w", stream, err)
		}
		return read(ctx, s)
	})
}

// DeleteMsg removes the message with sequence seq from stream (no-op if gone).
func (c *Conn) DeleteMsg(ctx context.Context, stream string, seq uint64) error {
	err := c.den.guard(ctx, []string{apiStreamInfo(stream), apiStreamMsgDelete(stream)}, func(ctx context.Context) error {
		s, err := c.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		return s.DeleteMsg(ctx, seq)
	})
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("bus: delete message %d of %s: %w", seq, stream, err)
	}
	return nil
}

// Messages returns every message stored in stream on filter (which may hold
// wildcards), oldest first. It reads them with an ordered consumer and stops
// at the last one stored when it starts; ctx bounds the read.
func (c *Conn) Messages(ctx context.Context, stream, filter string) ([]*Msg, error) {
	var out []*Msg
	err := c.den.guard(ctx, apiConsumer(stream), func(ctx context.Context) (err error) {
		out, err = c.messages(ctx, stream, filter)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bus: read %s %s: %w", stream, filter, err)
	}
	return out, nil
}

func (c *Conn) messages(ctx context.Context, stream, filter string) ([]*Msg, error) {
	cons, err := c.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Msg
	for remaining := info.NumPending; remaining > 0; {
		batch, err := cons.Fetch(int(min(remaining, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			msg := newMsg(m)
			out = append(out, msg)
			md, err := m.Metadata()
			if err == nil && md.NumPending == 0 {
				remaining = 0
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, err
		}
		if got == 0 {
			break // purged or expired meanwhile
		}
		if remaining > 0 {
			remaining -= min(remaining, uint64(got))
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// PurgeSubject removes every message on subject from stream.
func (c *Conn) PurgeSubject(ctx context.Context, stream, subject string) error {
	err := c.den.guard(ctx, []string{apiStreamInfo(stream), apiStreamPurge(stream)}, func(ctx context.Context) error {
		s, err := c.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		return s.Purge(ctx, jetstream.WithPurgeSubject(subject))
	})
	if err != nil {
		return fmt.Errorf("bus: purge %s of %s: %w", subject, stream, err)
	}
	return nil
}

// StreamMsgs returns how many messages stream holds.
func (c *Conn) StreamMsgs(ctx context.Context, stream string) (uint64, error) {
	var n uint64
	err := c.den.guard(ctx, []string{apiStreamInfo(stream)}, func(ctx context.Context) error {
		s, err := c.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		n = info.State.Msgs
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("bus: stream %s: %w", stream, err)
	}
	return n, nil
}

// MaxDeliveries is a JetStream advisory: a call reached the consumer's MaxDeliver.
type MaxDeliveries struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// AbandonedConsumer is the durable consumer of the max-deliveries
// advisories of every call consumer (stream <P>_ADVISORIES), shared by the
// workers of every pool: each personality of a pool has a consumer of its
// own (scheduling.md), whose name is one token, so no filter can select one
// pool's advisories; handling an abandoned call needs nothing of its pool.
// Advisories wait there until a worker handles and acks them. The
// consumer of a pool of the versions before scheduling
// ("abandoned_<pool>", whose filter overlaps this one's) is deleted first;
// the advisories it held stay in the stream for this one.
func (c *Conn) AbandonedConsumer(ctx context.Context, pool string) (*PoolConsumer, error) {
	if err := protocol.CheckToken("pool", pool); err != nil {
		return nil, err
	}
	if _, err := c.retireConsumer(ctx, c.advisoriesStream(), "abandoned_"+pool, maxDeliveriesSubject(c.names.CallsStream(), pool)); err != nil {
		return nil, err
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       "abandoned",
		Description:   "Capstan: abandoned calls of every pool",
		FilterSubject: maxDeliveriesSubject(c.names.CallsStream(), "*"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       DefaultAckWait,
		MaxDeliver:    -1,
		Metadata:      versionMetadata(),
	}
	var cons jetstream.Consumer
	err := c.den.guard(ctx, apiConsumer(c.advisoriesStream()), func(ctx context.Context) (err error) {
		cons, err = c.js.CreateOrUpdateConsumer(ctx, c.advisoriesStream(), cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bus: abandoned-calls consumer: %w", err)
	}
	return &PoolConsumer{cons: cons, name: cfg.Durable}, nil
}

// ParseMaxDeliveries decodes an advisory read from AbandonedConsumer.
func ParseMaxDeliveries(data []byte) (MaxDeliveries, error) {
	var a MaxDeliveries
	if err := json.Unmarshal(data, &a); err != nil || a.StreamSeq == 0 {
		return MaxDeliveries{}, fmt.Errorf("bus: not a max-deliveries advisory: %q", data)
	}
	return a, nil
}

// StreamState is what a stream holds: messages, bytes and distinct subjects
// (for a KV bucket's stream, the subjects are its keys, delete and purge
// markers included).
type StreamState struct {
	Name     string
	Msgs     uint64
	Bytes    uint64
	Subjects int
}

// StreamStates returns the state of every stream of the server, sorted by
// name.
func (c *Conn) StreamStates(ctx context.Context) ([]StreamState, error) {
	var out []StreamState
	names := c.js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := c.js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("bus: stream %s: %w", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("bus: stream %s: %w", name, err)
		}
		out = append(out, StreamState{Name: name, Msgs: info.State.Msgs, Bytes: info.State.Bytes, Subjects: int(info.State.NumSubjects)})
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("bus: list streams: %w", err)
	}
	slices.SortFunc(out, func(a, b StreamState) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
