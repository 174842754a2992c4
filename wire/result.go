package wire

import (
	"encoding/json"
	"fmt"
	"strings"
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
