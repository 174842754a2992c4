package callexec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// AuditMaxBytes caps one audit message (a batch of records), headers
// included; the server's max payload caps it further.
const AuditMaxBytes = 256 << 10

// PublishAudit is auditlog.Log.Publish: one audit message, bounded by the
// worker's operation timeout and shutdown margin.
func (s *Services) PublishAudit(_ context.Context, subject string, body []byte, n int) error {
	ctx, cancel := s.opCtx()
	defer cancel()
	hdr := bus.Header{protocol.HeaderProtocol: {protocol.Version}, protocol.HeaderAuditRecords: {strconv.Itoa(n)}}
	if _, err := s.bus.Publish(ctx, subject, body, hdr, ""); err != nil {
		reason, _ := s.publishFault(err, s.names.AuditStream())
		s.obs.PublishFailed(ctx, "audit", reason)
		return err
	}
	return nil
}

// AuditLimit is auditlog.Log.Limit: AuditMaxBytes or the server's max payload,
// less room for the headers.
func (s *Services) AuditLimit() int {
	return min(AuditMaxBytes, s.bus.MaxPayload()) - 256
}

// audit writes the call's audit record on <p>.audit.<tool>: ids, decision,
// outcome, duration, worker, only the hash and size of the arguments, the
// size of the published result and the size and digest of its blob. The
// session id is cut at 256 code points and the denial codes at 64 (the
// rest counted): a record stays within a few KiB. Records are stored in
// batches (auditLog); audit returns once the call's record is stored, or
// with the reason it could not be.
func (s *Services) audit(ctx context.Context, call *protocol.Call, o outcome, deliveries int) error {
	subject, line, err := s.auditRecord(call, o, deliveries)
	if err != nil {
		return err
	}
	// The batch's publish is bounded (publishAudit: OpTimeout, and never
	// past the shutdown margin), so every record's outcome arrives.
	if err = <-s.audits.Write(subject, line); err != nil {
		s.log.WarnContext(ctx, "cannot write audit record", "call_id", call.CallID, "error", err)
	}
	return err
}

// auditRecord returns the subject and the encoded line of the call's audit
// record (audit).
func (s *Services) auditRecord(call *protocol.Call, o outcome, deliveries int) (subject string, line []byte, err error) {
	toolTok := call.Tool
	if !protocol.ValidToken(toolTok) {
		toolTok = invalidToolToken
	}
	subject, err = s.names.AuditSubject(toolTok)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(call.Args)
	rec := protocol.AuditRecord{
		Time: time.Now().UTC(), CallID: call.CallID, BatchID: o.result.BatchID, SessionID: call.SessionID,
		PersonalityID: call.PersonalityID, Tool: call.Tool, Decision: o.decision,
		Denials: o.denials, OK: o.result.OK, Code: o.result.Code, DurationMS: o.result.DurationMS,
		WorkerID: s.cfg.WorkerID, Deliveries: deliveries, ArgsSHA256: hex.EncodeToString(sum[:]), ArgsBytes: len(call.Args),
		ResultBytes: o.bytes, Approval: o.approval,
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
