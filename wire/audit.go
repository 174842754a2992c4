package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// HeaderAuditRecords is the header of an audit message giving the number
// of records it holds, one per line.
const HeaderAuditRecords = "Capstan-Audit-Records"

// AuditRecord is written once per call on <p>.audit.<tool>, in a batch: a
// worker stores the records of many calls of one tool in one message, one
// JSON object per line (DecodeAuditRecords; the header Capstan-Audit-Records,
// HeaderAuditRecords, says how many). It never holds argument or secret values: only the
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
	// Approval is set on the record of a call that was held for approval
	// (the call's own record once it ran, or the record of the decision).
	Approval *ApprovalStamp `json:"approval,omitempty"`
}

// DecodeAuditRecords returns the records of an audit message, as an audit
// consumer reads them from the audit stream: one JSON object per line (a
// message of one record without a final newline, as workers before
// batching wrote, decodes too). A line that is not a record is an error
// naming its number; the records before it are returned with it.
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
