package callexec

import "sync/atomic"

// Runners runs tools on long-lived goroutines. A tool runs apart from its
// handler so that a tool ignoring its cancellation cannot hold the slot
// (execute returns at the timeout or the cancel, whatever the tool does);
// a goroutine started for every call would grow its stack anew each time,
// as the handlers' did (Run). A runner that finishes a tool waits for the
// next one. No goroutine is started per call while a runner is idle; one
// is when every runner is busy or stuck in a tool that ignored its
// cancellation, so there are never more runners than tools running at once
// plus those finishing.
type Runners struct {
	jobs chan func()
	// started counts the runners started.
	started atomic.Int64
}

// NewRunners returns runners, none started yet.
func NewRunners() *Runners { return &Runners{jobs: make(chan func())} }

// run runs f on an idle runner, or on a new one when none is idle.
func (r *Runners) run(f func()) {
	select {
	case r.jobs <- f:
	default:
		r.started.Add(1)
		go r.loop(f)
	}
}

// loop runs f, then every job handed to it, until close.
func (r *Runners) loop(f func()) {
	for ok := true; ok; f, ok = <-r.jobs {
		f()
	}
}

// Close ends the idle runners, and every busy one once its tool returns.
// run may not be called after Close.
func (r *Runners) Close() { close(r.jobs) }
