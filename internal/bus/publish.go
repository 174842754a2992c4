package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Header is a message's headers. Keys are case-sensitive.
type Header map[string][]string

// Get returns the first value of key, or "".
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces key's values with value.
func (h Header) Set(key, value string) { h[key] = []string{value} }

// Clone copies h (nil stays nil).
func (h Header) Clone() Header {
	if h == nil {
		return nil
	}
	out := make(Header, len(h))
	for k, v := range h {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// Publish publishes to a JetStream stream and waits for the ack. A non-empty
// msgID sets Nats-Msg-Id; duplicate reports that the stream had already seen it.
// A subject the connection's user may not publish to fails with
// ErrPermissionDenied.
func (c *Conn) Publish(ctx context.Context, subject string, data []byte, hdr Header, msgID string) (duplicate bool, err error) {
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header(hdr.Clone())}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	var ack *jetstream.PubAck
	err = c.den.guard(ctx, []string{subject}, func(ctx context.Context) (err error) {
		ack, err = c.js.PublishMsg(ctx, m, opts...)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("bus: publish %s: %w", subject, err)
	}
	return ack.Duplicate, nil
}

// PublishCore publishes on core NATS (no stream, no ack).
func (c *Conn) PublishCore(subject string, data []byte, hdr Header) error {
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header(hdr.Clone())}
	if err := c.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("bus: publish %s: %w", subject, err)
	}
	return nil
}

// PublishCoreFlush publishes on core NATS and waits until the server has
// processed the message (at most 10s when ctx has no deadline of its own). A
// subject the connection's user may not publish to fails with
// ErrPermissionDenied: the server reports the refusal before it answers the
// flush, and the connection records it as its last error.
func (c *Conn) PublishCoreFlush(ctx context.Context, subject string, data []byte, hdr Header) error {
	err := c.den.guard(ctx, []string{subject}, func(ctx context.Context) error {
		if err := c.PublishCore(subject, data, hdr); err != nil {
			return err
		}
		if err := c.Flush(ctx); err != nil {
			return fmt.Errorf("bus: publish %s: %w", subject, err)
		}
		if pe := violation(c.nc.LastError()); pe != nil && pe.Subject == subject {
			return pe
		}
		return nil
	})
	var pe *PermissionError
	if errors.As(err, &pe) {
		return fmt.Errorf("bus: publish %s: %w", subject, pe)
	}
	return err
}

// Subscription is a core NATS subscription.
type Subscription struct{ sub *nats.Subscription }

// Stop unsubscribes.
func (s *Subscription) Stop() error { return s.sub.Unsubscribe() }

// Subscribe subscribes on core NATS; a non-empty queue joins a queue group.
// fn runs on the subscription's goroutine, one message at a time.
func (c *Conn) Subscribe(subject, queue string, fn func(subject string, hdr Header, data []byte)) (*Subscription, error) {
	h := func(m *nats.Msg) { fn(m.Subject, Header(m.Header), m.Data) }
	var sub *nats.Subscription
	var err error
	if queue != "" {
		sub, err = c.nc.QueueSubscribe(subject, queue, h)
	} else {
		sub, err = c.nc.Subscribe(subject, h)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: subscribe %s: %w", subject, err)
	}
	return &Subscription{sub: sub}, nil
}
