package worker

import (
	"context"
	"strconv"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// AuditMaxBytes caps one audit message (a batch of records), headers
// included; the server's max payload caps it further.
const AuditMaxBytes = 256 << 10

// publishAudit is auditlog.Log.Publish: one audit message, bounded by the
// worker's operation timeout and shutdown margin.
func (w *Worker) publishAudit(_ context.Context, subject string, body []byte, n int) error {
	ctx, cancel := w.opCtx()
	defer cancel()
	hdr := bus.Header{protocol.HeaderProtocol: {protocol.Version}, protocol.HeaderAuditRecords: {strconv.Itoa(n)}}
	if _, err := w.conn.Publish(ctx, subject, body, hdr, ""); err != nil {
		reason, _ := w.publishFault(err, w.names.AuditStream())
		w.obs.PublishFailed(ctx, "audit", reason)
		return err
	}
	return nil
}

// auditLimit is auditlog.Log.Limit: AuditMaxBytes or the server's max payload,
// less room for the headers.
func (w *Worker) auditLimit() int {
	return min(AuditMaxBytes, w.conn.MaxPayload()) - 256
}
