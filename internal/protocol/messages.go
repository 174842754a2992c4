package protocol

import (
	"encoding/json"
	"fmt"

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
// JSON object and a newline.
func EncodeAuditRecord(dst []byte, rec *AuditRecord) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return dst, err
	}
	dst = append(dst, b...)
	return append(dst, '\n'), nil
}

// DecodeAuditRecords returns the records of an audit message
// (wire.DecodeAuditRecords).
func DecodeAuditRecords(data []byte) ([]AuditRecord, error) { return wire.DecodeAuditRecords(data) }

// CatalogEntry is a tool's definition in the tools bucket (wire.CatalogEntry).
type CatalogEntry = wire.CatalogEntry
