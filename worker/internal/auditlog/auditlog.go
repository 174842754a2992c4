// Package auditlog stores a worker's audit records in batches by group
// commit: a record waits while the batch before it is being stored, and
// every record that arrived meanwhile goes into the next message together,
// one message per tool subject. It knows nothing of calls or of NATS: the
// worker gives it the function that publishes one message.
package auditlog

import (
	"context"
	"sync"
)

// Log stores audit records in batches by group commit. Under light load
// each record is stored alone, at once; under heavy load a message carries
// many. A call is acknowledged only once its record is stored (Write's
// channel, WriteThen's function), so a crash loses none. Set Publish and
// Limit before the first write; the zero value is otherwise ready.
type Log struct {
	// Publish stores one message of n records on subject. It must return
	// (bounded by its own timeout): every record waits for its outcome.
	Publish func(ctx context.Context, subject string, body []byte, n int) error
	// Limit is the largest message body Publish may be given.
	Limit func() int

	mu       sync.Mutex
	queue    []line
	flushing bool
}

// line is one record waiting to be stored.
type line struct {
	subject string
	line    []byte
	// then is given the outcome of storing the record, on the flusher's
	// goroutine: it must not block.
	then func(error)
}

// Write queues one record (a line of protocol.EncodeAuditRecord) for
// subject and returns the channel that receives the outcome of storing it.
func (a *Log) Write(subject string, record []byte) <-chan error {
	done := make(chan error, 1)
	a.WriteThen(subject, record, func(err error) { done <- err })
	return done
}

// WriteThen queues one record for subject and calls then with the outcome
// of storing it, on the flusher's goroutine; then must not block.
func (a *Log) WriteThen(subject string, record []byte, then func(error)) {
	a.mu.Lock()
	a.queue = append(a.queue, line{subject: subject, line: record, then: then})
	start := !a.flushing
	a.flushing = true
	a.mu.Unlock()
	if start {
		go a.flush()
	}
}

// Flushing reports whether a flusher goroutine is storing records.
func (a *Log) Flushing() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushing
}

// flush stores what is queued, batch after batch, until the queue is empty.
func (a *Log) flush() {
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
func (a *Log) store(q []line) {
	limit := max(a.Limit(), 1)
	var subjects []string
	groups := make(map[string][]line, 1)
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
			err := a.Publish(context.Background(), s, body, n)
			for _, l := range lines[:n] {
				l.then(err)
			}
			lines = lines[n:]
		}
	}
}
