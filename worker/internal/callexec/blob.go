package callexec

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"slices"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker/internal/toolset"
)

// blobTimeout bounds the storing of one blob.
const blobTimeout = time.Minute

// blobPlan is a full output to store by reference: what part of the
// result it is, its content type and its bytes (secrets already redacted).
type blobPlan struct {
	part, contentType string
	data              []byte
}

// blobsAllowed reports whether the full output of a call of tool h under
// personality p may be stored by reference: blobs are on for this worker
// (and its blobs bucket exists), the tool is one of BlobConfig.Tools, and
// the personality does not forbid them.
func (s *Services) blobsAllowed(h *toolset.Hosted, p *capability.Personality) bool {
	if s.cfg.Blobs.Off || !s.blobsOn() || (p != nil && p.ForbidBlobs) {
		return false
	}
	return len(s.cfg.Blobs.Tools) == 0 || slices.Contains(s.cfg.Blobs.Tools, h.Name)
}

// planBlob decides what, if anything, to store by reference for a shaped
// result out, given the tool's raw result and the text body the message
// carries (before the untrusted wrap). One blob per result, of at least
// BlobConfig.MinBytes and at most BlobConfig.MaxBytes:
//
//   - the full text, when the message carries less of it: the value (the
//     tool's Full when it set one, else its Value before the reducer and
//     the trims) or the error message, redacted like the result;
//   - else the structured payload, when the message left it out.
func (s *Services) planBlob(raw tool.Result, body string, out *protocol.Result, tc *tool.Context) *blobPlan {
	fits := func(n int) bool { return n >= s.cfg.Blobs.MinBytes && n <= s.cfg.Blobs.MaxBytes && n > 0 }
	part, full := protocol.BlobPartValue, raw.Value
	switch {
	case !raw.OK:
		part, full = protocol.BlobPartError, raw.Error
	case raw.Full != "":
		full = raw.Full
	}
	if full != body && fits(len(full)) {
		// Redaction first: a blob never holds a secret value.
		full = s.creds.Redact(shape.Redact(full, secretValues(tc)))
		if full != body && fits(len(full)) {
			return &blobPlan{part: part, contentType: protocol.BlobTypeText, data: []byte(full)}
		}
	}
	if out.StructuredOmitted && raw.OK && raw.Structured != nil {
		// The payload as the message would have carried it: redacted.
		redacted := s.creds.RedactResult(shape.RedactResult(tool.Result{OK: true, Structured: raw.Structured}, secretValues(tc)))
		data, err := json.Marshal(redacted.Structured)
		if err == nil && fits(len(data)) {
			return &blobPlan{part: protocol.BlobPartStructured, contentType: protocol.BlobTypeJSON, data: data}
		}
	}
	return nil
}

// storeBlob stores the planned blob of o in the blobs bucket, named
// <personality>/<call_id> with the chunk id <personality>.<random token>,
// and puts its reference into the result. A blob that cannot be stored
// leaves the result without one (logged and counted): the result itself
// is never held back by the blobs bucket.
func (e *Executor) storeBlob(ctx context.Context, call *protocol.Call, o *outcome) {
	s := e.s
	plan := o.blob
	o.blob = nil
	bctx, cancel := context.WithTimeout(s.execBase, blobTimeout)
	defer cancel()
	stop := context.AfterFunc(s.opsBase(), cancel)
	defer stop()
	ref, err := s.bus.PutBlob(bctx, call.PersonalityID+"/"+call.CallID, call.PersonalityID+"."+rand.Text(), plan.contentType, plan.data)
	if err != nil {
		reason, _ := s.publishFault(err, "OBJ_"+s.names.BlobsBucket())
		s.obs.PublishFailed(ctx, "blob", reason)
		s.log.WarnContext(ctx, "cannot store the full output as a blob; the result carries only its cut", "call_id", call.CallID,
			"tool", call.Tool, "bytes", len(plan.data), "error", err)
		return
	}
	ref.Part = plan.part
	o.result.Blob = &ref
	s.obs.BlobStored(ctx, len(plan.data))
}
