package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/worker/internal/observe"
)

// invalidToolToken names the DLQ subject of a call whose subject has no valid tool token.
const invalidToolToken = "_invalid"

// rejectMalformed dead-letters a call that cannot be decoded (or whose
// subject is malformed) and, when its call_id is readable, answers it with
// input_invalid naming the bad field.
func (d *delivery) rejectMalformed(tokens protocol.CallTokens, de *protocol.DecodeError, cause error) {
	w, ctx, m := d.w, d.ctx, d.m
	subjectTool := tokens.Tool
	toolTok := subjectTool
	if !protocol.ValidToken(toolTok) {
		toolTok = invalidToolToken
	}
	var callID string
	if de != nil {
		callID = de.CallID
	}
	if err := w.deadLetter(m, toolTok, cause.Error()); err != nil {
		reason, permanent := w.publishFault(err, w.names.DLQStream())
		w.obs.PublishFailed(ctx, "dead_letter", reason)
		if !permanent {
			w.retryLater(ctx, m, &protocol.Call{CallID: callID, Tool: toolTok}, err)
			observe.SetOutcome(ctx, "retry")
			return
		}
		// Retrying cannot cure it: the call is answered (when it can be)
		// and acked without its dead letter.
		w.log.ErrorContext(ctx, "malformed call not dead-lettered: the dead letter cannot be published", "subject", m.Subject, "error", err)
	}
	bad := protocol.Call{CallID: callID, Tool: subjectTool, PersonalityID: tokens.Personality}
	if de != nil && !de.Undecodable() && subjectTool != "" {
		bad.BatchID = de.BatchID
		d.call = bad
		d.answerWithoutRunning(refuse(&bad, protocol.DecisionDecode, protocol.CodeInputInvalid, cause.Error()))
		return
	}
	w.ack(ctx, m, callID)
	bad.Tool = toolTok
	w.audit(ctx, &bad, refuse(&bad, protocol.DecisionDecode, protocol.CodeInputInvalid, cause.Error()), int(m.Deliveries))
	observe.SetOutcome(ctx, "dead_lettered")
	w.log.WarnContext(ctx, "undecodable call dead-lettered", "subject", m.Subject, "error", cause)
}

// deadLetter copies a call to <p>.dlq.<tool>: the original body unchanged,
// the original headers plus the dead-letter headers of protocol.md, the
// reason on one line and at most ReasonMaxChars long. A dead letter that
// would exceed the server's max payload (a call near the limit) has its
// reason shortened, then its body cut, with Capstan-Dead-Body-Truncated
// giving the body's original size.
func (w *Worker) deadLetter(m *bus.Msg, toolTok, reason string) error {
	subject, err := w.names.DLQSubject(toolTok)
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
	if over := bus.MessageSize(len(data), h, "") - w.conn.MaxPayload(); over > 0 {
		cut := max(len(reason)-over, 0)
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		h.Set(protocol.HeaderDeadReason, reason[:cut])
		if over = bus.MessageSize(len(data), h, "") - w.conn.MaxPayload(); over > 0 {
			h.Set(protocol.HeaderDeadBodyTruncated, strconv.Itoa(len(data)))
			over = bus.MessageSize(len(data), h, "") - w.conn.MaxPayload()
			data = data[:max(len(data)-over, 0)]
		}
	}
	ctx, cancel := w.opCtx()
	defer cancel()
	// The original headers are kept, Nats-Msg-Id included: one dead letter
	// per call within the DLQ stream's duplicate window.
	if _, err := w.conn.Publish(ctx, subject, data, h, ""); err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	return nil
}

// handleAbandoned consumes the pool's max-deliveries advisories until ctx
// ends. An advisory that cannot be handled now is retried later: it stays in
// the advisories stream until a worker of the pool has dealt with it.
func (w *Worker) handleAbandoned(ctx context.Context, cons *bus.PoolConsumer) {
	for ctx.Err() == nil {
		_, err := cons.Fetch(ctx, 16, time.Second, func(m *bus.Msg) {
			a, err := bus.ParseMaxDeliveries(m.Data)
			if err != nil {
				w.log.Warn("ignoring malformed advisory", "error", err)
				w.ack(ctx, m, "")
				return
			}
			if err := w.onMaxDeliveries(a); err != nil {
				w.log.Warn("cannot handle abandoned call yet; will retry", "stream_seq", a.StreamSeq, "error", err)
				_ = m.Nak(5 * time.Second)
				return
			}
			w.ack(ctx, m, "")
		})
		if err != nil && ctx.Err() == nil {
			w.log.Warn("fetch abandoned calls failed", "error", err)
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
func (w *Worker) onMaxDeliveries(a bus.MaxDeliveries) error {
	ctx, cancel := w.opCtx()
	defer cancel()
	m, err := w.conn.GetMsg(ctx, w.names.CallsStream(), a.StreamSeq)
	if errors.Is(err, bus.ErrNotFound) {
		return nil // already handled
	}
	if err != nil {
		return fmt.Errorf("read abandoned call: %w", err)
	}
	m.Deliveries = a.Deliveries
	tokens, _ := w.names.ParseCallSubject(m.Subject)
	toolTok := tokens.Tool
	if !protocol.ValidToken(toolTok) {
		toolTok = invalidToolToken
	}
	call, decErr := protocol.DecodeCall(m.Data)
	if decErr != nil {
		de, _ := protocol.AsDecodeError(decErr)
		call = protocol.Call{CallID: de.CallID, BatchID: de.BatchID, Tool: toolTok}
	}
	// The abandonment result goes to the subject's personality, like every
	// result (a call whose subject is not of version 2 gets none: no
	// personality to answer under).
	call.PersonalityID = tokens.Personality
	reason := "no acknowledgement within " + w.timing.AckWait.String() + " (worker lost or stalled)"
	if call.CallID != "" {
		if e, found, err := w.kv.failures.Get(ctx, call.CallID); err == nil && found {
			reason = string(e.Value)
		}
	}
	if call.CallID != "" && call.PersonalityID != "" {
		stored, err := w.storedResult(ctx, &call)
		if err != nil {
			return err
		}
		if stored != nil {
			// Answered after all (e.g. a late ack was lost): nothing is abandoned.
			return w.conn.DeleteMsg(ctx, w.names.CallsStream(), a.StreamSeq)
		}
	}
	// A dead letter or a result that retrying cannot publish is given up
	// (logged and counted); any other failure leaves the advisory for a
	// later try.
	if err := w.deadLetter(m, toolTok, reason); err != nil {
		freason, permanent := w.publishFault(err, w.names.DLQStream())
		w.obs.PublishFailed(ctx, "dead_letter", freason)
		if !permanent {
			return err
		}
		w.log.Error("abandoned call not dead-lettered: the dead letter cannot be published", "call_id", call.CallID, "tool", toolTok, "error", err)
	}
	if call.CallID != "" && call.PersonalityID != "" {
		o := refuse(&call, protocol.DecisionAbandoned, protocol.CodeExecutionFailed,
			fmt.Sprintf("call abandoned after %d deliveries: %s", a.Deliveries, reason))
		o.result.Deliveries = int(a.Deliveries)
		// The abandonment result joins the call's trace.
		pctx, cancel := w.boundCtx(telemetry.Extract(context.Background(), m.Header))
		size, err := w.publishResult(pctx, call.PersonalityID, call.CallID, &o.result, m.Header)
		cancel()
		if errors.Is(err, bus.ErrSubjectTaken) {
			// Answered meanwhile by a late run: the dead letter stays
			// (it says why the call was given up), no abandonment.
			return w.conn.DeleteMsg(ctx, w.names.CallsStream(), a.StreamSeq)
		}
		if err != nil {
			freason, permanent := w.publishFault(err, w.names.ResultsStream())
			w.obs.PublishFailed(ctx, "result", freason)
			if !permanent {
				return err
			}
			w.log.Error("abandonment result not publishable", "call_id", call.CallID, "tool", toolTok, "error", err)
		}
		o.bytes = size
		w.obs.RecordAnswer(ctx, call.Tool, &o.result, o.decision)
		_ = w.audit(ctx, &call, o, int(a.Deliveries))
	}
	if err := w.conn.DeleteMsg(ctx, w.names.CallsStream(), a.StreamSeq); err != nil {
		return err
	}
	w.log.Error("call abandoned", "call_id", call.CallID, "tool", toolTok, "deliveries", a.Deliveries, "reason", reason)
	return nil
}

// oneLine folds a message onto one line for a header.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
