package worker

import (
	"context"
	"sync"
	"time"
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
	publish := w.audits.publish
	w.audits.publish = func(ctx context.Context, subject string, body []byte, n int) error {
		<-gate
		return publish(ctx, subject, body, n)
	}
	return func() { once.Do(func() { close(gate) }) }
}
