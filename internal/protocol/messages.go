package protocol

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/capstanhq/capstan/internal/jsonenc"
	"github.com/capstanhq/capstan/wire"
)

// Call is the call message (wire.Call).
type Call = wire.Call

// Result is the result message (wire.Result).
type Result = wire.Result

// BlobRef refers to a call's full output in the blobs bucket (wire.BlobRef).
type BlobRef = wire.BlobRef

// What a blob holds (BlobRef.Part).
const (
	BlobPartValue      = wire.BlobPartValue
	BlobPartError      = wire.BlobPartError
	BlobPartStructured = wire.BlobPartStructured
)

// Content types of blobs.
const (
	BlobTypeText = wire.BlobTypeText
	BlobTypeJSON = wire.BlobTypeJSON
)

// EncodeResult encodes r as MarshalJSON does. Calling it rather than
// json.Marshal(r) spares encoding/json's second pass over the bytes a
// MarshalJSON method returns (validation and compaction), a pass over the
// whole value of every result.
func EncodeResult(r *Result) ([]byte, error) { return r.MarshalJSON() }

// PersonalityMismatch is the error of the input_invalid result of a call whose
// body names personality body while its subject names personality subject
// (security.md section 3): the subject decides, so a body cannot claim a
// personality its publisher may not use.
func PersonalityMismatch(body, subject string) string {
	return fmt.Sprintf("personality_id %q does not match the subject's personality %q", body, subject)
}

// Failure builds a failed result for call with the given code and message.
func Failure(call *Call, code Code, msg string) Result {
	return Result{CallID: call.CallID, BatchID: call.EffectiveBatchID(), Tool: call.Tool, Code: code, Error: msg}
}

// Progress is a progress event (wire.Progress).
type Progress = wire.Progress

// ProgressType is the value of Progress.Type.
const ProgressType = wire.ProgressType

// CancelRequest is the optional body of a cancel message (wire.CancelRequest).
type CancelRequest = wire.CancelRequest

// Decision values of an audit record: "allowed", or the gate that refused the call.
const (
	DecisionAllowed     = "allowed"
	DecisionDecode      = "decode"
	DecisionCancelled   = "cancelled"
	DecisionDeadline    = "deadline"
	DecisionUnknownTool = "unknown_tool"
	DecisionExcluded    = "exclude_tools"
	DecisionPersonality = "personality"
	DecisionToolset     = "toolset"
	DecisionPermission  = "permission"
	DecisionAvailable   = "availability"
	DecisionRateLimit   = "rate_limit"
	DecisionSchema      = "schema"
	DecisionCapability  = "capability"
	DecisionDryRun      = "dry_run"
	DecisionAbandoned   = "abandoned"
)

// AuditRecord is one call's audit record (wire.AuditRecord).
type AuditRecord = wire.AuditRecord

// DecisionAnswered is the decision of an audit record written
// for a delivery that found its call already answered (a redelivery after
// the result was stored): the record repeats what the stored result says.
const DecisionAnswered = "answered"

// HeaderAuditRecords is the number of audit records in an audit message.
const HeaderAuditRecords = wire.HeaderAuditRecords

// EncodeAuditRecord appends rec to dst as one line of an audit message: a
// JSON object and a newline. The object is the bytes json.Marshal writes
// for rec, written without reflection; a Time that json.Marshal refuses
// (a year outside [0,9999], a zone offset of 24 hours or more) is its
// error, and dst is returned unchanged.
func EncodeAuditRecord(dst []byte, rec *AuditRecord) ([]byte, error) {
	n0 := len(dst)
	dst = slices.Grow(dst, auditSizeHint(rec))
	dst = append(dst, `{"time":`...)
	dst, err := jsonenc.AppendTime(dst, rec.Time)
	if err != nil {
		return dst[:n0], err
	}
	dst = append(dst, `,"call_id":`...)
	dst = jsonenc.AppendString(dst, rec.CallID)
	dst = append(dst, `,"batch_id":`...)
	dst = jsonenc.AppendString(dst, rec.BatchID)
	if rec.SessionID != "" {
		dst = append(dst, `,"session_id":`...)
		dst = jsonenc.AppendString(dst, rec.SessionID)
	}
	if rec.PersonalityID != "" {
		dst = append(dst, `,"personality_id":`...)
		dst = jsonenc.AppendString(dst, rec.PersonalityID)
	}
	dst = append(dst, `,"tool":`...)
	dst = jsonenc.AppendString(dst, rec.Tool)
	dst = append(dst, `,"decision":`...)
	dst = jsonenc.AppendString(dst, rec.Decision)
	if len(rec.Denials) > 0 {
		dst = append(dst, `,"denials":[`...)
		for i, d := range rec.Denials {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonenc.AppendString(dst, d)
		}
		dst = append(dst, ']')
	}
	if rec.DenialsOmitted != 0 {
		dst = append(dst, `,"denials_omitted":`...)
		dst = strconv.AppendInt(dst, int64(rec.DenialsOmitted), 10)
	}
	dst = append(dst, `,"ok":`...)
	dst = jsonenc.AppendBool(dst, rec.OK)
	if rec.Code != "" {
		dst = append(dst, `,"code":`...)
		dst = jsonenc.AppendString(dst, string(rec.Code))
	}
	dst = append(dst, `,"duration_ms":`...)
	dst = strconv.AppendInt(dst, rec.DurationMS, 10)
	dst = append(dst, `,"worker_id":`...)
	dst = jsonenc.AppendString(dst, rec.WorkerID)
	if rec.Deliveries != 0 {
		dst = append(dst, `,"deliveries":`...)
		dst = strconv.AppendInt(dst, int64(rec.Deliveries), 10)
	}
	dst = append(dst, `,"args_sha256":`...)
	dst = jsonenc.AppendString(dst, rec.ArgsSHA256)
	dst = append(dst, `,"args_bytes":`...)
	dst = strconv.AppendInt(dst, int64(rec.ArgsBytes), 10)
	if rec.ResultBytes != 0 {
		dst = append(dst, `,"result_bytes":`...)
		dst = strconv.AppendInt(dst, int64(rec.ResultBytes), 10)
	}
	if rec.BlobBytes != 0 {
		dst = append(dst, `,"blob_bytes":`...)
		dst = strconv.AppendInt(dst, rec.BlobBytes, 10)
	}
	if rec.BlobSHA256 != "" {
		dst = append(dst, `,"blob_sha256":`...)
		dst = jsonenc.AppendString(dst, rec.BlobSHA256)
	}
	if a := rec.Approval; a != nil {
		dst = append(dst, `,"approval":{"decision":`...)
		dst = jsonenc.AppendString(dst, a.Decision)
		if a.By != "" {
			dst = append(dst, `,"by":`...)
			dst = jsonenc.AppendString(dst, a.By)
		}
		dst = append(dst, `,"at":`...)
		if dst, err = jsonenc.AppendTime(dst, a.At); err != nil {
			return dst[:n0], err
		}
		dst = append(dst, `,"args_sha256":`...)
		dst = jsonenc.AppendString(dst, a.ArgsSHA256)
		if a.Reason != "" {
			dst = append(dst, `,"reason":`...)
			dst = jsonenc.AppendString(dst, a.Reason)
		}
		dst = append(dst, '}')
	}
	return append(dst, '}', '\n'), nil
}

// auditSizeHint is about the size of rec's line when no string needs
// escaping: what EncodeAuditRecord makes room for at once.
func auditSizeHint(rec *AuditRecord) int {
	const number = 20 // the digits of an int64, or its sign
	n := len(`{"time":"2006-01-02T15:04:05.999999999-07:00","call_id":"","batch_id":"","tool":"","decision":"",`+
		`"ok":false,"duration_ms":,"worker_id":"","args_sha256":"","args_bytes":}`+"\n") + 2*number +
		len(rec.CallID) + len(rec.BatchID) + len(rec.Tool) + len(rec.Decision) + len(rec.WorkerID) + len(rec.ArgsSHA256)
	if rec.SessionID != "" {
		n += len(`,"session_id":""`) + len(rec.SessionID)
	}
	if rec.PersonalityID != "" {
		n += len(`,"personality_id":""`) + len(rec.PersonalityID)
	}
	if len(rec.Denials) > 0 {
		n += len(`,"denials":[]`)
		for _, d := range rec.Denials {
			n += len(d) + len(`"",`)
		}
	}
	if rec.Code != "" {
		n += len(`,"code":""`) + len(rec.Code)
	}
	if rec.BlobSHA256 != "" {
		n += len(`,"blob_sha256":""`) + len(rec.BlobSHA256)
	}
	if a := rec.Approval; a != nil {
		n += len(`,"approval":{"decision":"","by":"","at":"2006-01-02T15:04:05.999999999-07:00","args_sha256":"","reason":""}`) +
			len(a.Decision) + len(a.By) + len(a.ArgsSHA256) + len(a.Reason)
	}
	for _, v := range [...]int64{int64(rec.DenialsOmitted), int64(rec.Deliveries), int64(rec.ResultBytes), rec.BlobBytes} {
		if v != 0 {
			n += len(`,"denials_omitted":`) + number // the longest name
		}
	}
	return n
}

// DecodeAuditRecords returns the records of an audit message
// (wire.DecodeAuditRecords).
func DecodeAuditRecords(data []byte) ([]AuditRecord, error) { return wire.DecodeAuditRecords(data) }

// CatalogEntry is a tool's definition in the tools bucket (wire.CatalogEntry).
type CatalogEntry = wire.CatalogEntry
