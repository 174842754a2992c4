package callexec

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestRunnersReuseIdleGoroutines(t *testing.T) {
	r := NewRunners()
	defer r.Close()
	done := make(chan struct{})
	const jobs = 1000
	for range jobs {
		r.run(func() { done <- struct{}{} })
		<-done
	}
	// A job may be handed out while the runner that finished the one
	// before is not yet waiting again, so a few runners are started; a
	// goroutine per job would be 1000.
	assert.Less(t, r.started.Load(), int64(jobs/10), "runners started for %d jobs run one after the other", jobs)
}

func TestRunnersNeverWaitForABusyRunner(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := NewRunners()
	release := make(chan struct{})
	var running sync.WaitGroup
	const stuck = 5
	running.Add(stuck)
	for range stuck {
		// Tools that ignore their cancellation: each holds its runner.
		r.run(func() { running.Done(); <-release })
	}
	running.Wait() // would never return if run waited for a busy runner
	ran := make(chan struct{})
	r.run(func() { close(ran) })
	<-ran
	assert.GreaterOrEqual(t, r.started.Load(), int64(stuck+1))

	// close ends the idle runners at once and the busy ones when their
	// tools return.
	r.Close()
	close(release)
	require.Panics(t, func() { r.jobs <- func() {} }, "the jobs channel is closed")
}
