package bus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

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
// Errors that retrying cannot cure are told apart (errors.Is): a subject the
// connection's user may not publish to fails with ErrPermissionDenied; a
// message larger than the server's max payload (MaxPayload, checked before
// anything is sent) or than the stream's maximum message size with
// ErrTooLarge (a *TooLargeError); a subject no stream captures with
// ErrNoStream.
func (c *Conn) Publish(ctx context.Context, subject string, data []byte, hdr Header, msgID string) (duplicate bool, err error) {
	var extra [2]string
	if msgID != "" {
		extra = [2]string{jetstream.MsgIDHeader, msgID}
	}
	ack, err := c.publish(ctx, subject, data, hdr, MessageSize(len(data), hdr, msgID), extra)
	if err != nil {
		return false, err
	}
	return ack.Duplicate, nil
}

// publish sends a message of size bytes on the wire (headers included) to
// a stream, with hdr and the header extra (a key and its value, if the key
// is not empty), and waits for the ack; see Publish for the errors.
func (c *Conn) publish(ctx context.Context, subject string, data []byte, hdr Header, size int, extra [2]string) (*jetstream.PubAck, error) {
	if limit := c.MaxPayload(); size > limit {
		return nil, fmt.Errorf("bus: publish %s: %w", subject, &TooLargeError{Size: size, Limit: limit})
	}
	// The caller's header stays as it is: the message gets a map of its
	// own (sharing the values, which nothing here changes).
	h := make(nats.Header, len(hdr)+1)
	maps.Copy(h, hdr)
	if extra[0] != "" {
		h[extra[0]] = []string{extra[1]}
	}
	m := &nats.Msg{Subject: subject, Data: data, Header: h}
	var ack *jetstream.PubAck
	err := c.den.guard(ctx, []string{subject}, func(ctx context.Context) (err error) {
		ack, err = c.request(ctx, m)
		return err
	})
	if err != nil {
		if wrongLastSequence(err) {
			return nil, fmt.Errorf("bus: publish %s: %w", subject, ErrSubjectTaken)
		}
		return nil, fmt.Errorf("bus: publish %s: %w", subject, c.publishError(err, size))
	}
	return ack, nil
}

// ErrSubjectTaken is wrapped by the error of PublishFirst when the stream
// already holds a message on the subject.
var ErrSubjectTaken = errors.New("the stream already holds a message on the subject")

// PublishFirst publishes to a JetStream stream only if the stream holds no
// message on subject yet (Nats-Expected-Last-Subject-Sequence: 0, checked by
// the stream's leader as it stores the message): a second message on the
// same subject fails with ErrSubjectTaken, however late it comes. It sets no
// Nats-Msg-Id. Other errors are as Publish's.
func (c *Conn) PublishFirst(ctx context.Context, subject string, data []byte, hdr Header) error {
	_, err := c.publish(ctx, subject, data, hdr, ExpectFirstSize(len(data), hdr), [2]string{jetstream.ExpectedLastSubjSeqHeader, "0"})
	return err
}

// request sends m to a stream and waits for the stream's ack: what
// jetstream.PublishMsg does (the same default timeout for a ctx without a
// deadline, the same retries while no stream answers, the same errors),
// with the ack decoded by encoding/json/v2's faster decoder. The ack's
// decoding by encoding/json was the costliest step of a publish in the
// worker's profile (docs/benchmarks.md).
func (c *Conn) request(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.js.Options().DefaultTimeout)
		defer cancel()
	}
	resp, err := c.nc.RequestMsgWithContext(ctx, m)
	// A clustered stream without a leader, for a moment, answers nothing.
	for r := 0; errors.Is(err, nats.ErrNoResponders) && r < jetstream.DefaultPubRetryAttempts; r++ {
		t := time.NewTimer(jetstream.DefaultPubRetryWait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		resp, err = c.nc.RequestMsgWithContext(ctx, m)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, jetstream.ErrNoStreamResponse
	}
	if err != nil {
		return nil, err
	}
	return decodePubAck(resp.Data)
}

// decodePubAck decodes a stream's answer to a publish: its ack, or its
// refusal as a *jetstream.APIError (as jetstream.PublishMsg returns it).
func decodePubAck(data []byte) (*jetstream.PubAck, error) {
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		jetstream.PubAck
	}
	if err := jsonv2.Unmarshal(data, &resp); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("nats: %w", resp.Error)
	}
	if resp.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return &resp.PubAck, nil
}

// expectFirstHeader is what PublishFirst adds to a message's headers.
const expectFirstHeader = "Nats-Expected-Last-Subject-Sequence: 0\r\n"

// ExpectFirstSize is the size on the wire of a PublishFirst message with a
// body of dataLen bytes and headers hdr.
func ExpectFirstSize(dataLen int, hdr Header) int {
	return MessageSize(dataLen, hdr, "") + len(expectFirstHeader)
}

// wrongLastSequence reports the server's refusal of an expected last
// sequence (either code: replicated streams answer with the second).
func wrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// publishError wraps the publish errors that retrying cannot cure in this
// package's sentinels, keeping nats.go's error in the chain.
func (c *Conn) publishError(err error, size int) error {
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return &TooLargeError{Size: size, Limit: c.MaxPayload(), cause: err}
	case errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum):
		return &TooLargeError{Size: size, Stream: true, cause: err}
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w: %w", ErrNoStream, err)
	}
	return err
}

// ErrTooLarge is wrapped by the error of a publish whose message is larger
// than the server or the stream accepts; see TooLargeError.
var ErrTooLarge = errors.New("message too large")

// ErrNoStream is wrapped by the error of a JetStream publish that no stream
// answered: no stream captures the subject (it was deleted, or never
// created), or, briefly, a clustered stream has no leader. StreamExists
// tells the two apart.
var ErrNoStream = errors.New("no stream answered the publish")

// TooLargeError is a publish refused for its size.
type TooLargeError struct {
	// Size is the message's size in bytes, headers included.
	Size int
	// Limit is the server's max payload; 0 when the stream's own maximum
	// message size refused it (Stream).
	Limit int
	// Stream is true when the stream's maximum message size (max_msg_size)
	// refused the message rather than the server's max payload.
	Stream bool
	cause  error
}

// Error names both sizes.
func (e *TooLargeError) Error() string {
	if e.Stream {
		return fmt.Sprintf("message of %s exceeds the stream's maximum message size", FormatBytes(int64(e.Size)))
	}
	return fmt.Sprintf("message of %s exceeds the server's %s message limit", FormatBytes(int64(e.Size)), FormatBytes(int64(e.Limit)))
}

// Unwrap returns ErrTooLarge and nats.go's error, if any.
func (e *TooLargeError) Unwrap() []error {
	if e.cause != nil {
		return []error{ErrTooLarge, e.cause}
	}
	return []error{ErrTooLarge}
}

// MaxPayload returns the largest message, headers included, that the server
// of the current connection accepts (its max_payload, 1 MiB unless
// configured otherwise). It may change when the connection moves to another
// server of a cluster.
func (c *Conn) MaxPayload() int { return int(c.nc.MaxPayload()) }

// MessageSize returns the size that a message of dataLen bytes with headers
// hdr and, when not empty, Nats-Msg-Id msgID takes against the server's max
// payload: the data plus the encoded header block, as nats.go counts it.
func MessageSize(dataLen int, hdr Header, msgID string) int {
	if len(hdr) == 0 && msgID == "" {
		return dataLen
	}
	n := dataLen + len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range hdr {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	if msgID != "" && hdr.Get(jetstream.MsgIDHeader) == "" {
		n += len(jetstream.MsgIDHeader) + len(": ") + len(msgID) + len("\r\n")
	}
	return n
}

// FormatBytes formats a size for messages: whole binary units as "1 MiB" or
// "512 KiB", other sizes in decimal units with one decimal ("6.7 MB",
// "1.5 kB"), and sizes under 1000 as "<n> bytes".
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	case n >= 1_000_000:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + " MB"
	case n >= 1000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + " kB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
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
