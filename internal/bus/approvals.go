package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ApprovalTTL is how long the approvals bucket keeps a hold or a decision:
// the longest approval.timeout (168h) and a day more, so that a decision
// outlives its hold and a late second decision is refused by name.
const ApprovalTTL = 192 * time.Hour

// ApprovalsConsumer is the durable consumer of the decisions in the
// approvals bucket (keys decision.>), shared by every worker of every
// pool: a worker acts on a decision (re-publishes the held call, writes the
// decision's audit record, removes the hold) and then acks it, so a
// decision outlives the crash of the worker acting on it.
func (c *Conn) ApprovalsConsumer(ctx context.Context) (*PoolConsumer, error) {
	bucket := c.names.ApprovalsBucket()
	stream := kvStream(bucket)
	cfg := jetstream.ConsumerConfig{
		Durable:       "decisions",
		Description:   "Capstan: approval decisions to act on",
		FilterSubject: kvSubject(bucket, "decision.>"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       DefaultAckWait,
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Metadata:      versionMetadata(),
	}
	var cons jetstream.Consumer
	err := c.den.guard(ctx, apiConsumer(stream), func(ctx context.Context) (err error) {
		cons, err = c.js.CreateOrUpdateConsumer(ctx, stream, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bus: approval decisions consumer: %w", err)
	}
	return &PoolConsumer{cons: cons, name: cfg.Durable}, nil
}

// ErrNoResponders is returned by Request when nobody listens on the subject.
var ErrNoResponders = errors.New("no responders")

// Request sends a core NATS request and returns the reply's body. A subject
// the user may not publish to fails with ErrPermissionDenied, one nobody
// serves with ErrNoResponders.
func (c *Conn) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	var reply []byte
	err := c.den.guard(ctx, []string{subject}, func(ctx context.Context) error {
		m, err := c.nc.RequestWithContext(ctx, subject, data)
		if errors.Is(err, nats.ErrNoResponders) {
			return ErrNoResponders
		}
		if err != nil {
			return err
		}
		reply = m.Data
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bus: request %s: %w", subject, err)
	}
	return reply, nil
}

// Serve answers core NATS requests on subject in queue group queue: fn's
// return is the reply. fn runs on the subscription's goroutine, one request
// at a time.
func (c *Conn) Serve(subject, queue string, fn func(subject string, data []byte) []byte) (*Subscription, error) {
	sub, err := c.nc.QueueSubscribe(subject, queue, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		_ = m.Respond(fn(m.Subject, m.Data))
	})
	if err != nil {
		return nil, fmt.Errorf("bus: serve %s: %w", subject, err)
	}
	return &Subscription{sub: sub}, nil
}
