package worker

import (
	"context"
	"strconv"
	"sync"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// AuditMaxBytes caps one audit message (a batch of records), headers
// included; the server's max payload caps it further.
const AuditMaxBytes = 256 << 10

// auditLog stores audit records in batches by group commit: a record
// waits while the batch before it is being stored, and every record that
// arrived meanwhile goes into the next message together, one message per
// tool subject. Under light load each record is stored alone, at once;
// under heavy load a message carries many. A call is acknowledged only once
// its record is stored (write's channel), so a crash loses none.
type auditLog struct {
	// publish stores one message of n records on subject.
	publish func(ctx context.Context, subject string, body []byte, n int) error
	// limit is the largest message body publish may be given.
	limit func() int

	mu       sync.Mutex
	queue    []auditLine
	flushing bool
}

// auditLine is one record waiting to be stored.
type auditLine struct {
	subject string
	line    []byte
	// then is given the outcome of storing the record, on the flusher's
	// goroutine: it must not block.
	then func(error)
}

// write queues one record (a line of EncodeAuditRecord) for subject and
// returns the channel that receives the outcome of storing it.
func (a *auditLog) write(subject string, line []byte) <-chan error {
	done := make(chan error, 1)
	a.writeThen(subject, line, func(err error) { done <- err })
	return done
}

// writeThen queues one record for subject and calls then with the outcome
// of storing it, on the flusher's goroutine; then must not block.
func (a *auditLog) writeThen(subject string, line []byte, then func(error)) {
	a.mu.Lock()
	a.queue = append(a.queue, auditLine{subject: subject, line: line, then: then})
	start := !a.flushing
	a.flushing = true
	a.mu.Unlock()
	if start {
		go a.flush()
	}
}

// flush stores what is queued, batch after batch, until the queue is empty.
func (a *auditLog) flush() {
	for {
		a.mu.Lock()
		q := a.queue
		a.queue = nil
		if len(q) == 0 {
			a.flushing = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		a.store(q)
	}
}

// store publishes q's records grouped by subject in order of arrival, as
// few messages as the size limit allows, and tells each record's writer.
func (a *auditLog) store(q []auditLine) {
	limit := max(a.limit(), 1)
	var subjects []string
	groups := make(map[string][]auditLine, 1)
	for _, l := range q {
		if _, ok := groups[l.subject]; !ok {
			subjects = append(subjects, l.subject)
		}
		groups[l.subject] = append(groups[l.subject], l)
	}
	for _, s := range subjects {
		lines := groups[s]
		for len(lines) > 0 {
			n, size := 0, 0
			for n < len(lines) && (n == 0 || size+len(lines[n].line) <= limit) {
				size += len(lines[n].line)
				n++
			}
			body := make([]byte, 0, size)
			for _, l := range lines[:n] {
				body = append(body, l.line...)
			}
			err := a.publish(context.Background(), s, body, n)
			for _, l := range lines[:n] {
				l.then(err)
			}
			lines = lines[n:]
		}
	}
}

// publishAudit is auditLog.publish: one audit message, bounded by the
// worker's operation timeout and shutdown margin.
func (w *Worker) publishAudit(_ context.Context, subject string, body []byte, n int) error {
	ctx, cancel := w.opCtx()
	defer cancel()
	hdr := bus.Header{protocol.HeaderProtocol: {protocol.Version}, protocol.HeaderAuditRecords: {strconv.Itoa(n)}}
	if _, err := w.conn.Publish(ctx, subject, body, hdr, ""); err != nil {
		reason, _ := w.publishFault(err, w.names.AuditStream())
		w.obs.publishFailed(ctx, "audit", reason)
		return err
	}
	return nil
}

// auditLimit is auditLog.limit: AuditMaxBytes or the server's max payload,
// less room for the headers.
func (w *Worker) auditLimit() int {
	return min(AuditMaxBytes, w.conn.MaxPayload()) - 256
}
