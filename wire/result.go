package wire

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/jsonenc"
)

// Result is the one answer to a call, published on
// <p>.result.<personality>.<batch>.<call>. Every field is set by the worker
// (or, for a call abandoned after its last delivery, by whoever answers
// for it). OK says which of Value or Code and Error apply.
type Result struct {
	// CallID is the call's id.
	CallID string `json:"call_id"`
	// BatchID is the call's batch id (its CallID when it had none).
	BatchID string `json:"batch_id"`
	// Tool is the call's tool.
	Tool string `json:"tool"`
	// OK is true for a successful call: Value holds its output. False:
	// Code and Error say why it failed.
	OK bool `json:"ok"`
	// Value is the LLM-ready text of an ok result: reduced, trimmed to the
	// budget, wrapped when untrusted; it may be empty. Always present in an
	// ok result's JSON, absent in a failure's.
	Value string `json:"value"`
	// Structured is the tool's machine-readable payload, a JSON object, when
	// it returned one and it fits the message (StructuredOmitted otherwise).
	Structured json.RawMessage `json:"structured,omitempty"`
	// CostUSD is the cost the tool reported, if any.
	CostUSD *float64 `json:"cost_usd,omitempty"`
	// Code is the failure class of a failed result; empty when OK.
	Code Code `json:"code,omitempty"`
	// Error is the message of a failed result, written for the LLM; empty
	// when OK.
	Error string `json:"error,omitempty"`
	// RetryAfterMS is set on rate-limit refusals: the time to the end of the
	// window.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	// Truncated is true when the budget trim or the size limit cut Value.
	Truncated bool `json:"truncated,omitempty"`
	// OriginalChars is the length of Value before the cut, in code points,
	// when Truncated.
	OriginalChars int `json:"original_chars,omitempty"`
	// Untrusted is true when the tool declares its output untrusted (Value
	// is then wrapped in <untrusted>).
	Untrusted bool `json:"untrusted,omitempty"`
	// DurationMS is the execution time; 0 for calls refused before
	// execution and for dry runs.
	DurationMS int64 `json:"duration_ms"`
	// WorkerID is the worker that answered; empty on abandonment results.
	WorkerID string `json:"worker_id,omitempty"`
	// Deliveries is the JetStream delivery count of the call.
	Deliveries int `json:"deliveries,omitempty"`
	// StructuredOmitted is true when the tool returned a structured payload
	// that the result message could not carry (docs/protocol.md, "Result
	// size"); Blob holds it when its Part is BlobPartStructured.
	StructuredOmitted bool `json:"structured_omitted,omitempty"`
	// Blob refers to the call's full output, stored in the blobs bucket
	// because the message carries only a cut of it; nil when nothing was
	// stored.
	Blob *BlobRef `json:"blob,omitempty"`
}

// MarshalJSON writes value only for ok results (always, even empty) and
// code and error only for failures (when not empty); the other fields as
// their tags say, in their order. The bytes are encoding/json's for the
// same fields: its string escaping (HTML-safe), its number formats,
// Structured validated, compacted and HTML-escaped. Structured that is not
// valid JSON and a CostUSD that is NaN or infinite are encoding/json's
// errors.
func (r Result) MarshalJSON() ([]byte, error) {
	return r.appendJSON(make([]byte, 0, r.sizeHint()))
}

// appendJSON appends r's JSON (MarshalJSON) to dst; on error it returns
// nil.
func (r *Result) appendJSON(dst []byte) ([]byte, error) {
	var err error
	dst = append(dst, `{"call_id":`...)
	dst = jsonenc.AppendString(dst, r.CallID)
	dst = append(dst, `,"batch_id":`...)
	dst = jsonenc.AppendString(dst, r.BatchID)
	dst = append(dst, `,"tool":`...)
	dst = jsonenc.AppendString(dst, r.Tool)
	if r.OK {
		dst = append(dst, `,"ok":true,"value":`...)
		dst = jsonenc.AppendString(dst, r.Value)
	} else {
		dst = append(dst, `,"ok":false`...)
	}
	if len(r.Structured) > 0 {
		dst = append(dst, `,"structured":`...)
		if dst, err = jsonenc.AppendRawMessage(dst, r.Structured); err != nil {
			return nil, err
		}
	}
	if r.CostUSD != nil {
		dst = append(dst, `,"cost_usd":`...)
		if dst, err = jsonenc.AppendFloat64(dst, *r.CostUSD); err != nil {
			return nil, err
		}
	}
	if !r.OK {
		if r.Code != "" {
			dst = append(dst, `,"code":`...)
			dst = jsonenc.AppendString(dst, string(r.Code))
		}
		if r.Error != "" {
			dst = append(dst, `,"error":`...)
			dst = jsonenc.AppendString(dst, r.Error)
		}
	}
	if r.RetryAfterMS != 0 {
		dst = append(dst, `,"retry_after_ms":`...)
		dst = strconv.AppendInt(dst, r.RetryAfterMS, 10)
	}
	if r.Truncated {
		dst = append(dst, `,"truncated":true`...)
	}
	if r.OriginalChars != 0 {
		dst = append(dst, `,"original_chars":`...)
		dst = strconv.AppendInt(dst, int64(r.OriginalChars), 10)
	}
	if r.Untrusted {
		dst = append(dst, `,"untrusted":true`...)
	}
	dst = append(dst, `,"duration_ms":`...)
	dst = strconv.AppendInt(dst, r.DurationMS, 10)
	if r.WorkerID != "" {
		dst = append(dst, `,"worker_id":`...)
		dst = jsonenc.AppendString(dst, r.WorkerID)
	}
	if r.Deliveries != 0 {
		dst = append(dst, `,"deliveries":`...)
		dst = strconv.AppendInt(dst, int64(r.Deliveries), 10)
	}
	if r.StructuredOmitted {
		dst = append(dst, `,"structured_omitted":true`...)
	}
	if r.Blob != nil {
		dst = append(dst, `,"blob":`...)
		dst = r.Blob.appendJSON(dst)
	}
	return append(dst, '}'), nil
}

// sizeHint is about the size of r's JSON when no string needs escaping:
// the capacity MarshalJSON starts with, so that most results take one
// allocation.
func (r *Result) sizeHint() int {
	n := len(`{"call_id":"","batch_id":"","tool":"","ok":false,"value":"","duration_ms":-9223372036854775808}`) +
		len(r.CallID) + len(r.BatchID) + len(r.Tool)
	if r.OK {
		n += len(r.Value)
	} else {
		n += len(`,"code":"","error":""`) + len(r.Code) + len(r.Error)
	}
	if len(r.Structured) > 0 {
		n += len(`,"structured":`) + len(r.Structured)
	}
	if r.CostUSD != nil {
		n += len(`,"cost_usd":`) + 24
	}
	if r.RetryAfterMS != 0 {
		n += len(`,"retry_after_ms":`) + 20
	}
	if r.OriginalChars != 0 {
		n += len(`,"original_chars":`) + 20
	}
	if r.WorkerID != "" {
		n += len(`,"worker_id":""`) + len(r.WorkerID)
	}
	if r.Deliveries != 0 {
		n += len(`,"deliveries":`) + 20
	}
	if r.Truncated {
		n += len(`,"truncated":true`)
	}
	if r.Untrusted {
		n += len(`,"untrusted":true`)
	}
	if r.StructuredOmitted {
		n += len(`,"structured_omitted":true`)
	}
	if b := r.Blob; b != nil {
		n += len(`,"blob":{"bucket":"","name":"","nuid":"","size":-9223372036854775808,"sha256":"","content_type":"","part":""}`) +
			len(b.Bucket) + len(b.Name) + len(b.NUID) + len(b.SHA256) + len(b.ContentType) + len(b.Part)
	}
	return n
}

// BlobRef refers to a call's full output stored in the blobs bucket, a
// JetStream Object Store bucket (docs/protocol.md, "Large outputs by
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
	// ContentType is BlobTypeText for a value or an error message,
	// BlobTypeJSON for a structured payload.
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

// Content types of blobs (BlobRef.ContentType).
const (
	BlobTypeText = "text/plain; charset=utf-8"
	BlobTypeJSON = "application/json"
)

// appendJSON appends b's JSON, as encoding/json writes it, to dst.
func (b *BlobRef) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"bucket":`...)
	dst = jsonenc.AppendString(dst, b.Bucket)
	dst = append(dst, `,"name":`...)
	dst = jsonenc.AppendString(dst, b.Name)
	dst = append(dst, `,"nuid":`...)
	dst = jsonenc.AppendString(dst, b.NUID)
	dst = append(dst, `,"size":`...)
	dst = strconv.AppendInt(dst, b.Size, 10)
	dst = append(dst, `,"sha256":`...)
	dst = jsonenc.AppendString(dst, b.SHA256)
	dst = append(dst, `,"content_type":`...)
	dst = jsonenc.AppendString(dst, b.ContentType)
	dst = append(dst, `,"part":`...)
	dst = jsonenc.AppendString(dst, b.Part)
	return append(dst, '}')
}

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
