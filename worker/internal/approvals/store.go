// Package approvals is the worker's room for calls held for a person's
// approval (docs/approvals.md): the store of holds and decisions (the
// approvals bucket), the answer to decision requests, the timers that
// expire holds and end held calls whose deadline passes or that are
// cancelled, and the consumer of decisions that re-publishes each decided
// call, once, for the executor to answer.
package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// KV is the approvals bucket as the store uses it.
type KV interface {
	Get(ctx context.Context, key string) (bus.Entry, bool, error)
	Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error)
	Delete(ctx context.Context, key string) error
}

// Store reads and writes holds and decisions. A hold is created once per
// call, a decision once per call: the first one stored wins.
type Store struct{ KV KV }

// Decision returns the call's decision, nil when it has none.
func (s Store) Decision(ctx context.Context, personality, call string) (*approval.Decision, error) {
	e, ok, err := s.KV.Get(ctx, protocol.DecisionKey(personality, call))
	if err != nil || !ok {
		return nil, err
	}
	var d approval.Decision
	if err := json.Unmarshal(e.Value, &d); err != nil {
		return nil, fmt.Errorf("decision of call %s: %w", call, err)
	}
	return &d, nil
}

// HoldOf returns the call's hold, nil when it is not held.
func (s Store) HoldOf(ctx context.Context, personality, call string) (*approval.HoldRecord, error) {
	e, ok, err := s.KV.Get(ctx, protocol.HoldKey(personality, call))
	if err != nil || !ok {
		return nil, err
	}
	var h approval.HoldRecord
	if err := json.Unmarshal(e.Value, &h); err != nil {
		return nil, fmt.Errorf("hold of call %s: %w", call, err)
	}
	return &h, nil
}

// Hold stores a hold; created is false when the call was held already.
func (s Store) Hold(ctx context.Context, h *approval.HoldRecord) (created bool, err error) {
	b, err := json.Marshal(h)
	if err != nil {
		return false, err
	}
	_, err = s.KV.Create(ctx, protocol.HoldKey(h.PersonalityID, h.CallID), b, 0)
	if errors.Is(err, bus.ErrKeyExists) {
		return false, nil
	}
	return err == nil, err
}

// Decide stores d unless the call has a decision already; it returns the
// call's decision (d, or the one stored first) and whether d won.
func (s Store) Decide(ctx context.Context, d *approval.Decision) (*approval.Decision, bool, error) {
	b, err := json.Marshal(d)
	if err != nil {
		return nil, false, err
	}
	p, call := d.Hold.PersonalityID, d.Hold.CallID
	_, err = s.KV.Create(ctx, protocol.DecisionKey(p, call), b, 0)
	if errors.Is(err, bus.ErrKeyExists) {
		first, err := s.Decision(ctx, p, call)
		if err == nil && first == nil {
			err = fmt.Errorf("decision of call %s exists but cannot be read", call)
		}
		return first, false, err
	}
	if err != nil {
		return nil, false, err
	}
	return d, true, nil
}

// Unhold removes a decided call's hold (it leaves the pending list).
func (s Store) Unhold(ctx context.Context, personality, call string) error {
	return s.KV.Delete(ctx, protocol.HoldKey(personality, call))
}
