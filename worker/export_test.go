package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/worker/internal/cancelbook"
)

// WithoutNetworkNamespaces makes w's process runners behave as on a machine
// that allows no user namespace (for the test of the refusal).
func WithoutNetworkNamespaces(w *Worker) { w.procCfg.NoNetNS = true }

// SetResultRetryLimit shortens how long w retries publishing a result
// (ResultRetryLimit), for the tests of giving up; call it before Run.
func SetResultRetryLimit(w *Worker, d time.Duration) { w.retryLimit = d }

// WithPrivateMCPURLs lets the hosted url servers of a worker built with c
// be reached on loopback (mcphost.Config.AllowPrivateURLs), for tests with
// an MCP server of their own.
func WithPrivateMCPURLs(c Config) Config {
	c.mcpPrivateURLs = true
	return c
}

// HoldAuditRecords makes w's audit log wait, before storing each message of
// records, until release is called (for the tests of what waits for an
// audit record); call it before Run.
func HoldAuditRecords(w *Worker) (release func()) {
	gate := make(chan struct{})
	var once sync.Once
	publish := w.audits.Publish
	w.audits.Publish = func(ctx context.Context, subject string, body []byte, n int) error {
		<-gate
		return publish(ctx, subject, body, n)
	}
	return func() { once.Do(func() { close(gate) }) }
}

// HeldPublish is how one result publish held by HoldResultPublishes ended.
type HeldPublish struct {
	CallID string
	// Err is the publish's context's error when it ended.
	Err error
	// GraceOver: the worker's execution base had ended (cancelbook.ErrShutdown: the
	// shutdown grace was over) when the publish's context ended.
	GraceOver bool
	// MarginOver: the worker's operations context had ended (the shutdown
	// margin was over) when the publish's context ended.
	MarginOver bool
}

// HoldResultPublishes makes every result publish of w's deliveries wait
// until its context ends, and fail then without publishing anything.
// started receives the call id of each publish as it begins to wait, ended
// how it ended (both hold 16 before they block). Call it before Run.
func HoldResultPublishes(w *Worker) (started <-chan string, ended <-chan HeldPublish) {
	s, e := make(chan string, 16), make(chan HeldPublish, 16)
	w.sendResult = func(ctx context.Context, _, callID string, _ *protocol.Result, _ bus.Header) (int, error) {
		s <- callID
		<-ctx.Done()
		e <- HeldPublish{CallID: callID, Err: ctx.Err(),
			GraceOver:  errors.Is(context.Cause(w.execBase), cancelbook.ErrShutdown),
			MarginOver: w.ops.Err() != nil}
		return 0, fmt.Errorf("publish result: %w", ctx.Err())
	}
	return s, e
}
