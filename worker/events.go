package worker

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
)

// emitter returns the call's Emit function: it validates the event, applies
// the internal default audience, numbers it and publishes it on
// <p>.progress.<audience>.<personality>.<batch>.<call>.
// Secret values the call resolved, and their encoded forms, are redacted
// from the message.
func (w *Worker) emitter(call *protocol.Call, tc *tool.Context) func(tool.Progress) error {
	var seq atomic.Int64
	// The call's redactor, built again only once the call resolved another secret.
	var red atomic.Pointer[shape.Redactor]
	batch := call.EffectiveBatchID()
	return func(p tool.Progress) error {
		aud := protocol.Audience(cmp.Or(string(p.Audience), string(protocol.AudienceInternal)))
		if !aud.Valid() {
			return fmt.Errorf("%w: audience %q must be internal, user or dashboard", tool.ErrInvalidProgress, p.Audience)
		}
		if p.Percent != nil && (math.IsNaN(*p.Percent) || *p.Percent < 0 || *p.Percent > 100) {
			return fmt.Errorf("%w: percent %v must be between 0 and 100", tool.ErrInvalidProgress, *p.Percent)
		}
		subject, err := w.names.ProgressSubject(aud, call.PersonalityID, batch, call.CallID)
		if err != nil {
			return err
		}
		r := red.Load().With(secretValues(tc))
		red.Store(r)
		// Redacted, then capped at ProgressMaxChars.
		msg, _, _ := shape.Trim(r.Redact(p.Message), ProgressMaxChars)
		ev := protocol.Progress{Type: protocol.ProgressType, CallID: call.CallID, BatchID: batch, ToolName: call.Tool,
			Message: msg, Percent: p.Percent, Audience: aud, Seq: seq.Add(1), Time: time.Now().UTC()}
		data, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		ctx, cancel := w.opCtx()
		defer cancel()
		if _, err := w.conn.Publish(ctx, subject, data, bus.Header{protocol.HeaderProtocol: {protocol.Version}}, ""); err != nil {
			reason, _ := w.publishFault(err, w.names.ProgressStream())
			w.obs.PublishFailed(ctx, "progress", reason)
			return fmt.Errorf("%w: progress event not published: %v", tool.ErrUnavailable, err)
		}
		return nil
	}
}

// audit writes the call's audit record on <p>.audit.<tool>: ids, decision,
// outcome, duration, worker, only the hash and size of the arguments, the
// size of the published result and the size and digest of its blob. The
// session id is cut at 256 code points and the denial codes at 64 (the
// rest counted): a record stays within a few KiB. Records are stored in
// batches (auditLog); audit returns once the call's record is stored, or
// with the reason it could not be.
func (w *Worker) audit(ctx context.Context, call *protocol.Call, o outcome, deliveries int) error {
	subject, line, err := w.auditRecord(call, o, deliveries)
	if err != nil {
		return err
	}
	// The batch's publish is bounded (publishAudit: opTimeout, and never
	// past the shutdown margin), so every record's outcome arrives.
	if err = <-w.audits.Write(subject, line); err != nil {
		w.log.WarnContext(ctx, "cannot write audit record", "call_id", call.CallID, "error", err)
	}
	return err
}

// auditRecord returns the subject and the encoded line of the call's audit
// record (audit).
func (w *Worker) auditRecord(call *protocol.Call, o outcome, deliveries int) (subject string, line []byte, err error) {
	toolTok := call.Tool
	if !protocol.ValidToken(toolTok) {
		toolTok = invalidToolToken
	}
	subject, err = w.names.AuditSubject(toolTok)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(call.Args)
	rec := protocol.AuditRecord{
		Time: time.Now().UTC(), CallID: call.CallID, BatchID: o.result.BatchID, SessionID: call.SessionID,
		PersonalityID: call.PersonalityID, Tool: call.Tool, Decision: o.decision,
		Denials: o.denials, OK: o.result.OK, Code: o.result.Code, DurationMS: o.result.DurationMS,
		WorkerID: w.cfg.WorkerID, Deliveries: deliveries, ArgsSHA256: hex.EncodeToString(sum[:]), ArgsBytes: len(call.Args),
		ResultBytes: o.bytes,
	}
	if b := o.result.Blob; b != nil {
		rec.BlobBytes, rec.BlobSHA256 = b.Size, b.SHA256
	}
	capAudit(&rec)
	line, err = protocol.EncodeAuditRecord(nil, &rec)
	if err != nil {
		return "", nil, err
	}
	return subject, line, nil
}
