package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// DeadLetter is a call copied to the DLQ stream (protocol.md, "Delivery,
// retries and dead letters").
type DeadLetter struct {
	// Seq is the dead letter's sequence in the DLQ stream.
	Seq uint64 `json:"seq"`
	// Tool is the tool token of its DLQ subject (from the call's subject).
	Tool string `json:"tool"`
	// CallID is the call's call_id, when the body has a readable one.
	CallID string `json:"call_id,omitempty"`
	// Reason, Deliveries, OriginalSubject and DeadAt come from the
	// Capstan-Dead-* headers.
	Reason          string    `json:"reason"`
	Deliveries      int       `json:"deliveries"`
	OriginalSubject string    `json:"original_subject"`
	DeadAt          time.Time `json:"dead_at"`
	// Header is every header of the dead letter: the call's own plus the
	// dead-letter headers.
	Header map[string][]string `json:"header"`
	// Body is the original call body, unchanged.
	Body []byte `json:"-"`
}

// DeadLetters returns every dead letter stored in the DLQ stream, oldest
// first.
func (c *Client) DeadLetters(ctx context.Context) ([]DeadLetter, error) {
	msgs, err := c.conn.Messages(ctx, c.names.DLQStream(), c.names.DLQFilter())
	if err != nil {
		return nil, fmt.Errorf("client: dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, c.deadLetter(m))
	}
	return out, nil
}

// DeadLettersOf returns the dead letters of call callID, oldest first (a call
// redriven and abandoned again has several).
func (c *Client) DeadLettersOf(ctx context.Context, callID string) ([]DeadLetter, error) {
	if err := protocol.CheckToken("call_id", callID); err != nil {
		return nil, fmt.Errorf("client: dead letters: %w", err)
	}
	all, err := c.DeadLetters(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(d DeadLetter) bool { return d.CallID != callID }), nil
}

func (c *Client) deadLetter(m *bus.Msg) DeadLetter {
	d := DeadLetter{
		Seq:             m.StreamSeq,
		Reason:          m.Header.Get(protocol.HeaderDeadReason),
		OriginalSubject: m.Header.Get(protocol.HeaderOriginalSubject),
		Header:          m.Header.Clone(),
		Body:            m.Data,
	}
	d.Tool = strings.TrimPrefix(m.Subject, c.names.Prefix()+".dlq.")
	d.Deliveries, _ = strconv.Atoi(m.Header.Get(protocol.HeaderDeliveries))
	d.DeadAt, _ = time.Parse(time.RFC3339, m.Header.Get(protocol.HeaderDeadAt))
	if call, err := protocol.DecodeCall(m.Data); err == nil {
		d.CallID = call.CallID
	} else if de, ok := protocol.AsDecodeError(err); ok {
		d.CallID = de.CallID
	}
	return d
}

// ErrNoDeadLetter is returned by Redrive for a call that has no dead letter.
var ErrNoDeadLetter = errors.New("no dead letter for this call")

// Redrive re-publishes the latest dead letter of call callID to the subject
// it was first published on, so that a worker runs it again through every
// gate against the policy of today. Before that it removes the call's
// failure record (and the completion record workers before the results
// ledger wrote) and its stored result (the abandonment
// result), so that the new run's result becomes the call's one stored
// result; afterwards it removes the dead letter. The re-published call keeps
// the original headers (trace context included) apart from the
// dead-letter headers, with Nats-Msg-Id <call>.redrive-<seq> and
// Capstan-Redrive: <seq>. It returns the subject the call was published on.
func (c *Client) Redrive(ctx context.Context, callID string) (string, error) {
	letters, err := c.DeadLettersOf(ctx, callID)
	if err != nil {
		return "", err
	}
	if len(letters) == 0 {
		return "", fmt.Errorf("client: redrive %s: %w", callID, ErrNoDeadLetter)
	}
	d := letters[len(letters)-1]
	tokens, err := c.names.ParseCallSubject(d.OriginalSubject)
	if err != nil {
		return "", fmt.Errorf("client: redrive %s: the dead letter's original subject: %w", callID, err)
	}
	call, err := protocol.DecodeCall(d.Body)
	if err != nil {
		return "", fmt.Errorf("client: redrive %s: the dead letter is not a valid call (%w); fix and resubmit it instead", callID, err)
	}
	for _, b := range []bus.Bucket{bus.Completions, bus.Failures} {
		kv, err := c.conn.KV(ctx, b)
		if err != nil {
			return "", fmt.Errorf("client: redrive %s: %w", callID, err)
		}
		if err := kv.Delete(ctx, callID); err != nil {
			return "", fmt.Errorf("client: redrive %s: %w", callID, err)
		}
	}
	batch := call.EffectiveBatchID()
	if !protocol.ValidToken(batch) {
		batch = callID
	}
	// The result goes to the original subject's personality (the
	// subject decides, not the body).
	resultSubject, err := c.names.ResultSubject(tokens.Personality, batch, callID)
	if err != nil {
		return "", fmt.Errorf("client: redrive %s: %w", callID, err)
	}
	if err := c.conn.PurgeSubject(ctx, c.names.ResultsStream(), resultSubject); err != nil {
		return "", fmt.Errorf("client: redrive %s: %w", callID, err)
	}
	h := bus.Header(d.Header).Clone()
	for _, k := range []string{protocol.HeaderDeadReason, protocol.HeaderDeliveries, protocol.HeaderOriginalSubject,
		protocol.HeaderDeadAt, protocol.HeaderMsgID} {
		delete(h, k)
	}
	seq := strconv.FormatUint(d.Seq, 10)
	h.Set(protocol.HeaderRedrive, seq)
	h.Set(protocol.HeaderProtocol, protocol.Version)
	if _, err := c.conn.Publish(ctx, d.OriginalSubject, d.Body, h, protocol.RedriveCallMsgID(callID, seq)); err != nil {
		return "", fmt.Errorf("client: redrive %s: %w", callID, err)
	}
	if err := c.conn.DeleteMsg(ctx, c.names.DLQStream(), d.Seq); err != nil {
		return "", fmt.Errorf("client: redrive %s: re-published, but the dead letter stays: %w", callID, err)
	}
	return d.OriginalSubject, nil
}
