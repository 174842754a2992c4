package bus

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// ErrPermissionDenied is wrapped by the error of an operation the NATS server
// refused because the connection's user may not publish to a subject the
// operation needs (the server's "Permissions Violation"), as opposed to a
// server that is down or slow. Test for it with errors.Is; the error is a
// *PermissionError naming the subject.
var ErrPermissionDenied = errors.New("permission denied by the NATS server")

// PermissionError is a publish the NATS server refused for lack of permission.
type PermissionError struct {
	// Subject is the subject the server refused.
	Subject string
	// Message is the server's own message, e.g.
	// `Permissions Violation for Publish to "$KV.capstan_personalities.x"`.
	Message string
}

// Error names the subject and quotes the server.
func (e *PermissionError) Error() string {
	return fmt.Sprintf("the NATS server refused this user's publish to %q: %s", e.Subject, e.Message)
}

// Unwrap returns ErrPermissionDenied.
func (e *PermissionError) Unwrap() error { return ErrPermissionDenied }

// pubViolationRE extracts the subject of a publish permissions violation as
// nats.go reports it (the server's text after "nats: permissions violation: ").
var pubViolationRE = regexp.MustCompile(`(Permissions Violation for Publish to "([^"]+)")`)

// denials turns the server's asynchronous "Permissions Violation for Publish"
// errors into errors of the operation that caused them. A JetStream request
// to a subject the user may not publish to gets no reply at all (the server
// drops the message and reports the violation on the side), so without this
// the operation would only end when its context does, with a bare deadline
// error.
type denials struct {
	mu      sync.Mutex
	waiters map[*denialWaiter][]string // the subject patterns each waits on
}

type denialWaiter struct {
	cancel context.CancelCauseFunc
}

// onAsyncError is the connection's nats.ErrorHandler.
func (d *denials) onAsyncError(_ *nats.Conn, _ *nats.Subscription, err error) {
	pe := violation(err)
	if pe == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for w, patterns := range d.waiters {
		if slices.ContainsFunc(patterns, func(p string) bool { return subjectMatch(p, pe.Subject) }) {
			w.cancel(pe)
		}
	}
}

// violation returns the publish permissions violation err reports, or nil.
func violation(err error) *PermissionError {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	m := pubViolationRE.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	return &PermissionError{Subject: m[2], Message: m[1]}
}

// guard runs op with a context that ends as soon as the server refuses a
// publish of this connection to a subject matching one of patterns (NATS
// wildcards: "*" one token, ">" the rest); op's error is then replaced by
// the *PermissionError. patterns name what op publishes to, JetStream API
// subjects included.
func (d *denials) guard(ctx context.Context, patterns []string, op func(context.Context) error) error {
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := &denialWaiter{cancel: cancel}
	d.mu.Lock()
	if d.waiters == nil {
		d.waiters = make(map[*denialWaiter][]string)
	}
	d.waiters[w] = patterns
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.waiters, w)
		d.mu.Unlock()
	}()
	err := op(gctx)
	if err != nil {
		var pe *PermissionError
		if errors.As(context.Cause(gctx), &pe) {
			return pe
		}
	}
	return err
}

// subjectMatch reports whether subject matches pattern, with NATS wildcards.
func subjectMatch(pattern, subject string) bool {
	for {
		pt, prest, pmore := strings.Cut(pattern, ".")
		if pt == ">" {
			return subject != ""
		}
		st, srest, smore := strings.Cut(subject, ".")
		if pt != "*" && pt != st {
			return false
		}
		if !pmore || !smore {
			return pmore == smore
		}
		pattern, subject = prest, srest
	}
}

// JetStream API subjects of the operations guarded here (default API prefix).
func apiStreamCreate(stream string) string    { return "$JS.API.STREAM.CREATE." + stream }
func apiStreamInfo(stream string) string      { return "$JS.API.STREAM.INFO." + stream }
func apiStreamUpdate(stream string) string    { return "$JS.API.STREAM.UPDATE." + stream }
func apiStreamPurge(stream string) string     { return "$JS.API.STREAM.PURGE." + stream }
func apiStreamMsgDelete(stream string) string { return "$JS.API.STREAM.MSG.DELETE." + stream }

// apiDirectGet is the direct get of the last message on subject in stream,
// the subject being part of the request subject (server permissions can
// bind it).
func apiDirectGet(stream, subject string) string {
	return "$JS.API.DIRECT.GET." + stream + "." + subject
}

// apiStreamRead matches the requests that read messages of stream by
// sequence or subject (STREAM.MSG.GET, and DIRECT.GET with or without the
// subject in the request subject).
func apiStreamRead(stream string) []string {
	return []string{"$JS.API.STREAM.MSG.GET." + stream, "$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>"}
}

// apiConsumer matches every consumer request on stream: create (with or
// without a name and filter), info, delete, and pulls.
func apiConsumer(stream string) []string {
	return []string{"$JS.API.CONSUMER.*." + stream, "$JS.API.CONSUMER.*." + stream + ".>", "$JS.API.CONSUMER.MSG.NEXT." + stream + ".>"}
}

func kvStream(bucket string) string       { return "KV_" + bucket }
func kvSubject(bucket, key string) string { return "$KV." + bucket + "." + key }
