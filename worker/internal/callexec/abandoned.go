package callexec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
)

// HandleAbandoned consumes the pool's max-deliveries advisories until ctx
// ends. An advisory that cannot be handled now is retried later: it stays in
// the advisories stream until a worker of the pool has dealt with it.
func (s *Services) HandleAbandoned(ctx context.Context, cons *bus.PoolConsumer) {
	for ctx.Err() == nil {
		_, err := cons.Fetch(ctx, 16, time.Second, func(m *bus.Msg) {
			a, err := bus.ParseMaxDeliveries(m.Data)
			if err != nil {
				s.log.Warn("ignoring malformed advisory", "error", err)
				s.ack(ctx, m, "")
				return
			}
			if err := s.onMaxDeliveries(a); err != nil {
				s.log.Warn("cannot handle abandoned call yet; will retry", "stream_seq", a.StreamSeq, "error", err)
				_ = m.Nak(5 * time.Second)
				return
			}
			s.ack(ctx, m, "")
		})
		if err != nil && ctx.Err() == nil {
			s.log.Warn("fetch abandoned calls failed", "error", err)
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
		}
	}
}

// onMaxDeliveries handles a call that reached MaxDeliver: it is copied to the
// DLQ with its last failure reason, answered with the abandonment result
// (unless already answered), and removed from the calls stream.
func (s *Services) onMaxDeliveries(a bus.MaxDeliveries) error {
	ctx, cancel := s.opCtx()
	defer cancel()
	m, err := s.bus.GetMsg(ctx, s.names.CallsStream(), a.StreamSeq)
	if errors.Is(err, bus.ErrNotFound) {
		return nil // already handled
	}
	if err != nil {
		return fmt.Errorf("read abandoned call: %w", err)
	}
	m.Deliveries = a.Deliveries
	call, toolTok := abandonedCall(s.names, m)
	reason := "no acknowledgement within " + s.timing.AckWait.String() + " (worker lost or stalled)"
	if call.CallID != "" {
		if e, found, err := s.failures.Get(ctx, call.CallID); err == nil && found {
			reason = string(e.Value)
		}
	}
	if call.CallID != "" && call.PersonalityID != "" {
		stored, err := s.storedResult(ctx, &call)
		if err != nil {
			return err
		}
		if stored != nil {
			// Answered after all (e.g. a late ack was lost): nothing is abandoned.
			return s.bus.DeleteMsg(ctx, s.names.CallsStream(), a.StreamSeq)
		}
	}
	// A dead letter or a result that retrying cannot publish is given up
	// (logged and counted); any other failure leaves the advisory for a
	// later try.
	if err := s.deadLetter(m, toolTok, reason); err != nil {
		freason, permanent := s.publishFault(err, s.names.DLQStream())
		s.obs.PublishFailed(ctx, "dead_letter", freason)
		if !permanent {
			return err
		}
		s.log.Error("abandoned call not dead-lettered: the dead letter cannot be published", "call_id", call.CallID, "tool", toolTok, "error", err)
	}
	if call.CallID != "" && call.PersonalityID != "" {
		answered, err := s.answerAbandoned(ctx, m, &call, toolTok, reason, a.Deliveries)
		if answered {
			// Answered meanwhile by a late run: the dead letter stays
			// (it says why the call was given up), no abandonment.
			return s.bus.DeleteMsg(ctx, s.names.CallsStream(), a.StreamSeq)
		}
		if err != nil {
			return err
		}
	}
	if err := s.bus.DeleteMsg(ctx, s.names.CallsStream(), a.StreamSeq); err != nil {
		return err
	}
	s.log.Error("call abandoned", "call_id", call.CallID, "tool", toolTok, "deliveries", a.Deliveries, "reason", reason)
	return nil
}

// abandonedCall decodes an abandoned call as far as it can, and the
// <tool> token of its dead letter. The abandonment result goes to the
// subject's personality, like every result (a call whose subject is not of
// version 2 gets none: no personality to answer under).
func abandonedCall(names protocol.Names, m *bus.Msg) (call protocol.Call, toolTok string) {
	tokens, _ := names.ParseCallSubject(m.Subject)
	toolTok = tokens.Tool
	if !protocol.ValidToken(toolTok) {
		toolTok = invalidToolToken
	}
	call, decErr := protocol.DecodeCall(m.Data)
	if decErr != nil {
		de, _ := protocol.AsDecodeError(decErr)
		call = protocol.Call{CallID: de.CallID, BatchID: de.BatchID, Tool: toolTok}
	}
	call.PersonalityID = tokens.Personality
	return call, toolTok
}

// answerAbandoned publishes the abandonment result of call, audits it and
// counts it. answered reports that a late run answered the call meanwhile
// (no abandonment then); err is a failure that retrying may cure (a result
// that retrying cannot publish is given up, logged and counted).
func (s *Services) answerAbandoned(ctx context.Context, m *bus.Msg, call *protocol.Call, toolTok, reason string, deliveries uint64) (answered bool, err error) {
	o := refuse(call, protocol.DecisionAbandoned, protocol.CodeExecutionFailed,
		fmt.Sprintf("call abandoned after %d deliveries: %s", deliveries, reason))
	o.result.Deliveries = int(deliveries)
	// The abandonment result joins the call's trace.
	pctx, cancel := s.BoundCtx(telemetry.Extract(context.Background(), m.Header))
	size, err := s.PublishResult(pctx, call.PersonalityID, call.CallID, &o.result, m.Header)
	cancel()
	if errors.Is(err, bus.ErrSubjectTaken) {
		return true, nil
	}
	if err != nil {
		freason, permanent := s.publishFault(err, s.names.ResultsStream())
		s.obs.PublishFailed(ctx, "result", freason)
		if !permanent {
			return false, err
		}
		s.log.Error("abandonment result not publishable", "call_id", call.CallID, "tool", toolTok, "error", err)
	}
	o.bytes = size
	s.obs.RecordAnswer(ctx, call.Tool, &o.result, o.decision)
	_ = s.audit(ctx, call, o, int(deliveries))
	return false, nil
}
