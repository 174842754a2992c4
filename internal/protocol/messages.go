package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Call is a tool call as published on <p>.call.<pool>.<personality>.<tool>.
// Unknown fields are ignored on decode. PersonalityID, when present, must
// equal the subject's personality (PersonalityMismatch). A call can never carry policy: capabilities and the
// personality document come only from the workers' configuration.
type Call struct {
	CallID            string          `json:"call_id"`
	BatchID           string          `json:"batch_id,omitempty"`
	Tool              string          `json:"tool"`
	Args              json.RawMessage `json:"args"`
	SessionID         string          `json:"session_id"`
	SessionKey        string          `json:"session_key,omitempty"`
	Platform          string          `json:"platform,omitempty"`
	WorkingDir        string          `json:"working_dir,omitempty"`
	PersonalityID     string          `json:"personality_id,omitempty"`
	AgentID           string          `json:"agent_id,omitempty"`
	TeamID            string          `json:"team_id,omitempty"`
	MemoryScopeID     string          `json:"memory_scope_id,omitempty"`
	CurrentTurn       int64           `json:"current_turn,omitempty"`
	MessageCount      int64           `json:"message_count,omitempty"`
	ResultBudgetChars int64           `json:"result_budget_chars,omitempty"`
	DryRun            bool            `json:"dry_run,omitempty"`
	Deadline          *time.Time      `json:"deadline,omitempty"`
	TimeoutMS         int64           `json:"timeout_ms,omitempty"`
	// ExcludeTools and NarrowTools keep the difference between absent (nil) and
	// empty: an empty narrow_tools narrows to nothing.
	ExcludeTools []string `json:"exclude_tools,omitzero"`
	NarrowTools  []string `json:"narrow_tools,omitzero"`
}

// EffectiveBatchID returns batch_id, or call_id when the call has none.
func (c *Call) EffectiveBatchID() string {
	if c.BatchID == "" {
		return c.CallID
	}
	return c.BatchID
}

// Result is the one answer to a call, published on
// <p>.result.<personality>.<batch>.<call>.
type Result struct {
	CallID        string          `json:"call_id"`
	BatchID       string          `json:"batch_id"`
	Tool          string          `json:"tool"`
	OK            bool            `json:"ok"`
	Value         string          `json:"value"`
	Structured    json.RawMessage `json:"structured,omitempty"`
	CostUSD       *float64        `json:"cost_usd,omitempty"`
	Code          Code            `json:"code,omitempty"`
	Error         string          `json:"error,omitempty"`
	RetryAfterMS  int64           `json:"retry_after_ms,omitempty"`
	Truncated     bool            `json:"truncated,omitempty"`
	OriginalChars int             `json:"original_chars,omitempty"`
	Untrusted     bool            `json:"untrusted,omitempty"`
	DurationMS    int64           `json:"duration_ms"`
	WorkerID      string          `json:"worker_id,omitempty"`
	Deliveries    int             `json:"deliveries,omitempty"`
	// StructuredOmitted is true when the tool returned a structured payload
	// that the result message could not carry (protocol.md, "Result size");
	// Blob holds it when its Part is BlobPartStructured.
	StructuredOmitted bool `json:"structured_omitted,omitempty"`
	// Blob refers to the call's full output, stored in the blobs bucket
	// because the message carries only a cut of it; nil when nothing was
	// stored.
	Blob *BlobRef `json:"blob,omitempty"`
}

// BlobRef refers to a call's full output stored in the blobs bucket, a
// JetStream Object Store bucket (protocol.md, "Large outputs by
// reference"). The object can be read by name with any Object Store client,
// or, by a user that may read only its personality's blobs, from its chunk
// subject (ChunkSubject) in stream order; either way its bytes must have
// Size and SHA256.
type BlobRef struct {
	// Bucket is the Object Store bucket: <p>_blobs (stream OBJ_<p>_blobs).
	Bucket string `json:"bucket"`
	// Name is the object's name: <personality>/<call_id>.
	Name string `json:"name"`
	// NUID is the object's chunk id, "<personality>.<random token>": its
	// chunks are the messages on $O.<bucket>.C.<nuid>.
	NUID string `json:"nuid"`
	// Size is the object's size in bytes.
	Size int64 `json:"size"`
	// SHA256 is the hex SHA-256 digest of the object's bytes.
	SHA256 string `json:"sha256"`
	// ContentType is "text/plain; charset=utf-8" for a value or an error
	// message, "application/json" for a structured payload.
	ContentType string `json:"content_type"`
	// Part says what the object holds in full: BlobPartValue,
	// BlobPartError or BlobPartStructured.
	Part string `json:"part"`
}

// What a blob holds (BlobRef.Part).
const (
	BlobPartValue      = "value"
	BlobPartError      = "error"
	BlobPartStructured = "structured"
)

// Content types of blobs.
const (
	BlobTypeText = "text/plain; charset=utf-8"
	BlobTypeJSON = "application/json"
)

// ChunkSubject returns the subject of the object's chunks,
// $O.<bucket>.C.<nuid>, or an error when the bucket or the id is not made
// of valid tokens.
func (b *BlobRef) ChunkSubject() (string, error) {
	if err := CheckToken("blob bucket", b.Bucket); err != nil {
		return "", err
	}
	personality, id, ok := strings.Cut(b.NUID, ".")
	if !ok || !ValidToken(personality) || !ValidToken(id) {
		return "", fmt.Errorf("blob nuid %q must be <personality>.<token>", b.NUID)
	}
	return "$O." + b.Bucket + ".C." + b.NUID, nil
}

// MarshalJSON writes value only for ok results and error/code only for failures.
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	type okShape struct {
		plain
		Code  Code   `json:"code,omitempty"`
		Error string `json:"error,omitempty"`
	}
	type failShape struct {
		plain
		Value string `json:"value,omitempty"`
	}
	if r.OK {
		p := plain(r)
		p.Code, p.Error = "", ""
		return json.Marshal(okShape{plain: p})
	}
	return json.Marshal(failShape{plain: plain(r)})
}

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

// Progress is a progress event on
// <p>.progress.<audience>.<personality>.<batch>.<call>.
type Progress struct {
	Type     string    `json:"type"`
	CallID   string    `json:"call_id"`
	BatchID  string    `json:"batch_id"`
	ToolName string    `json:"tool_name"`
	Message  string    `json:"message"`
	Percent  *float64  `json:"percent,omitempty"`
	Audience Audience  `json:"audience"`
	Seq      int64     `json:"seq"`
	Time     time.Time `json:"time"`
}

// ProgressType is the value of Progress.Type.
const ProgressType = "progress"

// CancelRequest is the optional body of a cancel message.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

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

// CatalogEntry is a tool's definition in the capstan_tools bucket, keyed by name.
type CatalogEntry struct {
	Name              string          `json:"name"`
	Description       string          `json:"description"`
	Schema            json.RawMessage `json:"schema"`
	Toolset           string          `json:"toolset"`
	Capabilities      json.RawMessage `json:"capabilities"`
	Permissions       []string        `json:"permissions"`
	OutputIsUntrusted bool            `json:"output_is_untrusted"`
	AlwaysInclude     bool            `json:"always_include"`
	MaxResultChars    int             `json:"max_result_chars"`
	Plugin            string          `json:"plugin,omitempty"`
	// SideEffects is the tool's side-effect class: none, idempotent or
	// exclusive (only exclusive calls run under a lease).
	SideEffects string    `json:"side_effects,omitempty"`
	Pool        string    `json:"pool"`
	Workers     []string  `json:"workers"`
	Updated     time.Time `json:"updated"`
}
