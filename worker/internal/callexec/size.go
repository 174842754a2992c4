package callexec

import (
	"fmt"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/pipeline"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/shape"
)

// Size limits of what the worker publishes (docs/reliability.md, "Result
// size"). Every message also stays under the server's max payload: the
// result limit is the smaller of Config.ResultMaxBytes and the max payload
// the connection reports.
const (
	// DefaultResultMaxBytes is Config.ResultMaxBytes when unset: 1 MiB, the
	// max payload of a stock nats-server, so that results fit any server
	// and any client's buffers, also where the server allows more.
	DefaultResultMaxBytes = 1 << 20
	// MinResultMaxBytes is the smallest ResultMaxBytes accepted.
	MinResultMaxBytes = 16 << 10
	// DefaultStructuredMaxBytes is Config.StructuredMaxBytes when unset: a
	// structured payload whose JSON is larger is left out of the message.
	DefaultStructuredMaxBytes = 256 << 10
	// headerReserve is the room a result message keeps for its headers
	// (protocol version, trace context, Nats-Msg-Id): header() drops a
	// traceparent or tracestate longer than maxTraceHeader.
	headerReserve = 2 << 10
	// maxTraceHeader is the longest traceparent or tracestate passed on
	// (W3C asks to propagate at least 512 characters of tracestate).
	maxTraceHeader = 512
	// blobRefReserve is the room a result keeps for a blob reference when
	// the call may get one.
	blobRefReserve = 1 << 10
	// ProgressMaxChars caps a progress event's message (code points; the
	// rest is cut as the budget trim cuts).
	ProgressMaxChars = 2000
	// ReasonMaxChars caps a failure reason: the Capstan-Dead-Reason header,
	// the stored failure of a call, the reason of an abandonment result.
	ReasonMaxChars = 1000
	// auditSessionMaxChars and auditMaxDenials cap the two parts of an
	// audit record that a call or a tool could make long.
	auditSessionMaxChars = 256
	auditMaxDenials      = 64
)

// resultLimit returns the largest result message body published now: the
// smaller of ResultMaxBytes and the server's max payload, less the room of
// the headers.
func (s *Services) resultLimit() int {
	return min(s.cfg.ResultMaxBytes, s.bus.MaxPayload()) - headerReserve
}

// limitText names the limit a result of limit bytes was held to, for
// messages: the server's max payload or the worker's own limit.
func (s *Services) limitText(limit int) string {
	if s.bus != nil && limit >= s.bus.MaxPayload() {
		return "the server's " + bus.FormatBytes(int64(limit)) + " message limit"
	}
	return "the worker's " + bus.FormatBytes(int64(limit)) + " result limit (CAPSTAN_RESULT_MAX_BYTES)"
}

// encodedLen is the size of r's encoded body (pipeline.EncodedLen).
func encodedLen(r *protocol.Result) int { return pipeline.EncodedLen(r) }

// fitText holds r to limit bytes (pipeline.FitText).
func fitText(r *protocol.Result, text string, budget int, finish func(string) string, limit, structuredMax int) bool {
	return pipeline.FitText(r, text, budget, finish, limit, structuredMax)
}

// oversized returns the result that replaces res when no message of limit
// bytes can carry it (size bytes encoded): execution_failed naming both
// sizes. Its ids, duration, worker, deliveries and blob reference are
// kept: a blob already stored still holds the full output.
func (s *Services) oversized(res protocol.Result, size int, limit string) protocol.Result {
	msg := fmt.Sprintf("result of %s exceeds %s; the output was dropped", bus.FormatBytes(int64(size)), limit)
	if res.Blob != nil {
		msg += " (the full output is in blob " + res.Blob.Bucket + "/" + res.Blob.Name + ")"
	}
	out := protocol.Result{CallID: res.CallID, BatchID: res.BatchID, Tool: res.Tool, Code: protocol.CodeExecutionFailed, Error: msg,
		DurationMS: res.DurationMS, WorkerID: res.WorkerID, Deliveries: res.Deliveries, Blob: res.Blob, Untrusted: res.Untrusted}
	return out
}

// capReason folds a failure reason onto one line and caps it at
// ReasonMaxChars code points (Trim's marker, folded too, after them).
func capReason(s string) string {
	out, _, _ := shape.Trim(oneLine(s), ReasonMaxChars)
	return oneLine(out)
}

// capAudit bounds the parts of an audit record that a call or a tool could
// make long: the session id and the denial codes (at most auditMaxDenials,
// the rest counted).
func capAudit(rec *protocol.AuditRecord) {
	rec.SessionID, _, _ = shape.Trim(rec.SessionID, auditSessionMaxChars)
	if n := len(rec.Denials); n > auditMaxDenials {
		rec.Denials, rec.DenialsOmitted = rec.Denials[:auditMaxDenials], n-auditMaxDenials
	}
}
