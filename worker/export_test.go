package worker

// WithoutNetworkNamespaces makes w's process runners behave as on a machine
// that allows no user namespace (for the test of the refusal).
func WithoutNetworkNamespaces(w *Worker) { w.procCfg.NoNetNS = true }
