package callexec

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/worker/internal/observe"
)

// invalidToolToken names the DLQ subject of a call whose subject has no valid tool token.
const invalidToolToken = "_invalid"

// rejectMalformed dead-letters a call that cannot be decoded (or whose
// subject is malformed) and, when its call_id is readable, answers it with
// input_invalid naming the bad field.
func (e *Executor) rejectMalformed(tokens protocol.CallTokens, de *protocol.DecodeError, cause error) {
	s, ctx, m := e.s, e.ctx, e.m
	subjectTool := tokens.Tool
	toolTok := subjectTool
	if !protocol.ValidToken(toolTok) {
		toolTok = invalidToolToken
	}
	var callID string
	if de != nil {
		callID = de.CallID
	}
	if err := s.deadLetter(m, toolTok, cause.Error()); err != nil {
		reason, permanent := s.publishFault(err, s.names.DLQStream())
		s.obs.PublishFailed(ctx, "dead_letter", reason)
		if !permanent {
			s.retryLater(ctx, m, &protocol.Call{CallID: callID, Tool: toolTok}, err)
			observe.SetOutcome(ctx, "retry")
			return
		}
		// Retrying cannot cure it: the call is answered (when it can be)
		// and acked without its dead letter.
		s.log.ErrorContext(ctx, "malformed call not dead-lettered: the dead letter cannot be published", "subject", m.Subject, "error", err)
	}
	bad := protocol.Call{CallID: callID, Tool: subjectTool, PersonalityID: tokens.Personality}
	if de != nil && !de.Undecodable() && subjectTool != "" {
		bad.BatchID = de.BatchID
		e.call = bad
		e.answerWithoutRunning(refuse(&bad, protocol.DecisionDecode, protocol.CodeInputInvalid, cause.Error()))
		return
	}
	s.ack(ctx, m, callID)
	bad.Tool = toolTok
	s.audit(ctx, &bad, refuse(&bad, protocol.DecisionDecode, protocol.CodeInputInvalid, cause.Error()), int(m.Deliveries))
	observe.SetOutcome(ctx, "dead_lettered")
	s.log.WarnContext(ctx, "undecodable call dead-lettered", "subject", m.Subject, "error", cause)
}

// deadLetter copies a call to <p>.dlq.<tool>: the original body unchanged,
// the original headers plus the dead-letter headers of protocol.md, the
// reason on one line and at most ReasonMaxChars long. A dead letter that
// would exceed the server's max payload (a call near the limit) has its
// reason shortened, then its body cut, with Capstan-Dead-Body-Truncated
// giving the body's original size.
func (s *Services) deadLetter(m *bus.Msg, toolTok, reason string) error {
	subject, err := s.names.DLQSubject(toolTok)
	if err != nil {
		return err
	}
	h := m.Header.Clone()
	if h == nil {
		h = bus.Header{}
	}
	// JetStream acts on these publish-control headers; copied to the DLQ
	// they would make the dead letter itself fail (or roll the stream up).
	for k := range h {
		if strings.HasPrefix(k, "Nats-Expected-") || k == "Nats-Rollup" || k == "Nats-TTL" {
			delete(h, k)
		}
	}
	reason = capReason(reason)
	h.Set(protocol.HeaderDeadReason, reason)
	h.Set(protocol.HeaderDeliveries, strconv.FormatUint(max(m.Deliveries, 1), 10))
	h.Set(protocol.HeaderOriginalSubject, m.Subject)
	h.Set(protocol.HeaderDeadAt, time.Now().UTC().Format(time.RFC3339))
	data := m.Data
	if over := bus.MessageSize(len(data), h, "") - s.bus.MaxPayload(); over > 0 {
		cut := max(len(reason)-over, 0)
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		h.Set(protocol.HeaderDeadReason, reason[:cut])
		if over = bus.MessageSize(len(data), h, "") - s.bus.MaxPayload(); over > 0 {
			h.Set(protocol.HeaderDeadBodyTruncated, strconv.Itoa(len(data)))
			over = bus.MessageSize(len(data), h, "") - s.bus.MaxPayload()
			data = data[:max(len(data)-over, 0)]
		}
	}
	ctx, cancel := s.opCtx()
	defer cancel()
	// The original headers are kept, Nats-Msg-Id included: one dead letter
	// per call within the DLQ stream's duplicate window.
	if _, err := s.bus.Publish(ctx, subject, data, h, ""); err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	return nil
}

// oneLine folds a message onto one line for a header.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
