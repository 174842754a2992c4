package worker

import "time"

// WithoutNetworkNamespaces makes w's process runners behave as on a machine
// that allows no user namespace (for the test of the refusal).
func WithoutNetworkNamespaces(w *Worker) { w.procCfg.NoNetNS = true }

// SetResultRetryLimit shortens how long w retries publishing a result
// (ResultRetryLimit), for the tests of giving up; call it before Run.
func SetResultRetryLimit(w *Worker, d time.Duration) { w.retryLimit = d }
