package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

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

// AuditRecord is written once per call on <p>.audit.<tool>, in a batch: a
// worker stores the records of many calls of one tool in one message, one
// JSON object per line (DecodeAuditRecords; the header Capstan-Audit-Records
// says how many). It never holds argument or secret values: only the
// arguments' SHA-256 and size.
type AuditRecord struct {
	Time          time.Time `json:"time"`
	CallID        string    `json:"call_id"`
	BatchID       string    `json:"batch_id"`
	SessionID     string    `json:"session_id,omitempty"`
	PersonalityID string    `json:"personality_id,omitempty"`
	Tool          string    `json:"tool"`
	Decision      string    `json:"decision"`
	Denials       []string  `json:"denials,omitempty"`
	// DenialsOmitted counts the denial codes beyond the first 64, which the
	// record leaves out.
	DenialsOmitted int    `json:"denials_omitted,omitempty"`
	OK             bool   `json:"ok"`
	Code           Code   `json:"code,omitempty"`
	DurationMS     int64  `json:"duration_ms"`
	WorkerID       string `json:"worker_id"`
	Deliveries     int    `json:"deliveries,omitempty"`
	ArgsSHA256     string `json:"args_sha256"`
	ArgsBytes      int    `json:"args_bytes"`
	// ResultBytes is the size of the published result message's body.
	ResultBytes int `json:"result_bytes,omitempty"`
	// BlobBytes and BlobSHA256 are the size and hex SHA-256 of the blob
	// holding the call's full output, when one was stored (never its
	// content).
	BlobBytes  int64  `json:"blob_bytes,omitempty"`
	BlobSHA256 string `json:"blob_sha256,omitempty"`
}

// DecisionAnswered is the decision of an audit record written
// for a delivery that found its call already answered (a redelivery after
// the result was stored): the record repeats what the stored result says.
const DecisionAnswered = "answered"

// HeaderAuditRecords is the number of audit records in an audit message.
const HeaderAuditRecords = "Capstan-Audit-Records"

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

// DecodeAuditRecords returns the records of an audit message: one JSON
// object per line (a message of one record without a final newline, as
// protocol version 2 workers before batching wrote, decodes too). A line
// that is not a record is an error naming its number.
func DecodeAuditRecords(data []byte) ([]AuditRecord, error) {
	var out []AuditRecord
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var rec AuditRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			return out, fmt.Errorf("audit message line %d: %w", i+1, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// CatalogEntry is a tool's definition in the tools bucket (wire.CatalogEntry).
type CatalogEntry = wire.CatalogEntry
