//go:build !capstan_faults

package callexec

import "github.com/capstanhq/capstan/internal/protocol"

// injectFault is a fault-injection point for the chaos tests; without the
// capstan_faults build tag it does nothing.
func injectFault(string) {}

// injectCallFault is the chaos tests' crashing-tool point; without the
// capstan_faults build tag it does nothing.
func injectCallFault(*protocol.Call) {}
