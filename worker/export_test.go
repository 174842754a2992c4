package worker

import "time"

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
