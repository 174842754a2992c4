//go:build !capstan_faults

package worker

// injectFault is a fault-injection point for the chaos tests; without the
// capstan_faults build tag it does nothing.
func injectFault(string) {}
