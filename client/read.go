package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// Await waits for the result of call callID in batch batchID ("" means the
// call's own id, the protocol's default batch) and returns it. A result
// published before Await starts is found too (results are stored for 24 h by
// default). When ctx ends first, the error wraps ctx.Err().
func (c *Client) Await(ctx context.Context, batchID, callID string) (Result, error) {
	if err := protocol.CheckToken("call_id", callID); err != nil {
		return Result{}, fmt.Errorf("client: await: %w", err)
	}
	subject, err := c.names.ResultSubject(c.personality, cmp.Or(batchID, callID), callID)
	if err != nil {
		return Result{}, fmt.Errorf("client: await: %w", err)
	}
	got := make(chan *bus.Msg, 1)
	stop, err := c.conn.Tail(ctx, c.names.ResultsStream(), []string{subject}, bus.FromStart, func(m *bus.Msg) {
		select {
		case got <- m:
		default: // a duplicate: the first result wins
		}
	})
	if err != nil {
		return Result{}, fmt.Errorf("client: await %s: %w", callID, err)
	}
	defer stop()
	select {
	case m := <-got:
		return decodeResult(m.Data)
	case <-ctx.Done():
		return Result{}, fmt.Errorf("client: await %s: %w", callID, ctx.Err())
	}
}

// Result returns the stored result of call callID of the client's
// personality, in any batch: the first one, as everywhere (at-least-once
// delivery may store a duplicate); found is false when there is none (not
// finished, never submitted, another personality's call, or expired from the
// results stream).
func (c *Client) Result(ctx context.Context, callID string) (r Result, found bool, err error) {
	return c.result(ctx, c.personality, callID)
}

// result reads the stored result of a call of personality with requests
// whose subjects name the result subject, so a tenant's NATS permissions can
// bind them to its personality: a direct get of the last result tells
// whether there is one; when there is, a consumer of that one filter reads
// the first (the same unless a duplicate was stored).
func (c *Client) result(ctx context.Context, personality, callID string) (r Result, found bool, err error) {
	filter, err := c.names.CallResultFilter(personality, callID)
	if err != nil {
		return Result{}, false, fmt.Errorf("client: result: %w", err)
	}
	m, err := c.conn.DirectLast(ctx, c.names.ResultsStream(), filter)
	if errors.Is(err, bus.ErrNotFound) {
		return Result{}, false, nil
	}
	if err != nil {
		return Result{}, false, fmt.Errorf("client: result of %s: %w", callID, err)
	}
	if first, err := c.firstResult(ctx, filter); err == nil {
		m = first
	} else if ctx.Err() != nil {
		return Result{}, false, fmt.Errorf("client: result of %s: %w", callID, err)
	}
	r, err = decodeResult(m.Data)
	if err != nil {
		return Result{}, false, err
	}
	return r, true, nil
}

// firstResult returns the first stored message on filter, which holds at
// least one; it gives up after firstResultWait (the message may have expired
// meanwhile), and the caller keeps the last one.
func (c *Client) firstResult(ctx context.Context, filter string) (*bus.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, firstResultWait)
	defer cancel()
	got := make(chan *bus.Msg, 1)
	stop, err := c.conn.Tail(ctx, c.names.ResultsStream(), []string{filter}, bus.FromStart, func(m *bus.Msg) {
		select {
		case got <- m:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	defer stop()
	select {
	case m := <-got:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// firstResultWait bounds firstResult.
const firstResultWait = 10 * time.Second

func decodeResult(data []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return Result{}, fmt.Errorf("client: result is not valid JSON: %w", err)
	}
	return r, nil
}

// Cancel asks the workers to cancel call callID: a running call has its
// context cancelled, a call not yet started will not start; its result is
// execution_failed / "cancelled: <reason>" ("cancelled: by request" when
// reason is empty). Cancel returns once the server has received the request;
// it cannot tell whether the call existed or had already finished.
func (c *Client) Cancel(ctx context.Context, callID, reason string) error {
	subject, err := c.names.CancelSubject(c.personality, callID)
	if err != nil {
		return fmt.Errorf("client: cancel: %w", err)
	}
	var body []byte
	if reason != "" {
		if body, err = json.Marshal(protocol.CancelRequest{Reason: reason}); err != nil {
			return fmt.Errorf("client: cancel %s: %w", callID, err)
		}
	}
	hdr := bus.Header{}
	hdr.Set(protocol.HeaderProtocol, protocol.Version)
	if err := c.conn.PublishCore(subject, body, hdr); err != nil {
		return fmt.Errorf("client: cancel %s: %w", callID, err)
	}
	if err := c.conn.Flush(ctx); err != nil {
		return fmt.Errorf("client: cancel %s: %w", callID, err)
	}
	return nil
}

// Progress calls fn for each progress event of audience ("" = every
// audience) and batch batchID ("" = every batch), in publication order, on
// one goroutine, until stop is called or ctx ends. fromStart also delivers
// the stored events (kept for 1 h) before new ones. Because the audience is
// a subject token, a subscriber to one audience never receives another's
// events. Events that are not valid JSON are skipped.
func (c *Client) Progress(ctx context.Context, audience Audience, batchID string, fromStart bool, fn func(Progress)) (stop func(), err error) {
	filter, err := c.names.ProgressTail(audience, c.personality, batchID)
	if err != nil {
		return nil, fmt.Errorf("client: progress: %w", err)
	}
	start := bus.FromNew
	if fromStart {
		start = bus.FromStart
	}
	stop, err = c.conn.Tail(ctx, c.names.ProgressStream(), []string{filter}, start, func(m *bus.Msg) {
		var p Progress
		if json.Unmarshal(m.Data, &p) == nil {
			fn(p)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("client: progress: %w", err)
	}
	return stop, nil
}
