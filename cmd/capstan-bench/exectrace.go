package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/trace"
	"strconv"
	"time"

	"github.com/capstanhq/capstan/internal/bench"
)

// Timings of the flight recorder of -exectrace.
const (
	// traceWindow is the least the flight recorder keeps: a snapshot holds
	// at least this much before the slow call's result.
	traceWindow = 2 * time.Second
	// traceAfter is how long after a slow call's result its snapshot is
	// taken, so the snapshot shows what followed it too.
	traceAfter = 100 * time.Millisecond
	// traceMaxBytes bounds the flight recorder's buffer.
	traceMaxBytes = 256 << 20
)

// slowCallCategory is the category of the trace log event that marks a
// slow call at the arrival of its result; its message is
// "<scenario> <call id> latency_us=<µs> start_unix_ns=<ns>".
const slowCallCategory = "capstan-bench.slow-call"

// execTracer captures the execution trace of a run (-exectrace): the whole
// run, or, with a threshold, a flight recorder's snapshot around each call
// slower than it.
type execTracer struct {
	path   string
	slow   time.Duration
	limit  int
	stderr io.Writer

	whole *os.File
	fr    *trace.FlightRecorder

	trigger chan bench.CallSample
	done    chan struct{}
	// wrote and err belong to the snapshots goroutine until done is closed.
	wrote int
	err   error
}

// startExecTrace starts tracing to path: the whole run when slow is 0,
// otherwise a flight recorder whose window around each call slower than
// slow (at most limit of them) is written to path.1, path.2, ...
func startExecTrace(path string, slow time.Duration, limit int, stderr io.Writer) (*execTracer, error) {
	t := &execTracer{path: path, slow: slow, limit: limit, stderr: stderr}
	if slow == 0 {
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		if err := trace.Start(f); err != nil {
			_ = f.Close()
			return nil, err
		}
		t.whole = f
		return t, nil
	}
	t.fr = trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: traceWindow, MaxBytes: traceMaxBytes})
	if err := t.fr.Start(); err != nil {
		return nil, err
	}
	t.trigger = make(chan bench.CallSample, 1)
	t.done = make(chan struct{})
	go t.snapshots()
	return t, nil
}

// onCall is bench.Config.OnCall: it marks a slow call in the trace and asks
// for a snapshot (dropped while one is under way).
func (t *execTracer) onCall(c bench.CallSample) {
	if t.slow == 0 || c.Latency < t.slow {
		return
	}
	trace.Log(context.Background(), slowCallCategory, c.Scenario+" "+c.CallID+
		" latency_us="+strconv.FormatInt(c.Latency.Microseconds(), 10)+
		" start_unix_ns="+strconv.FormatInt(c.Start.UnixNano(), 10))
	select {
	case t.trigger <- c:
	default:
	}
}

// snapshots writes a snapshot for each trigger, traceAfter after it, until
// the trigger channel is closed; at most limit of them.
func (t *execTracer) snapshots() {
	defer close(t.done)
	var last time.Time // when the last snapshot was taken
	for c := range t.trigger {
		if t.wrote >= t.limit || c.Start.Add(c.Latency).Before(last) {
			// Enough, or the call is in the last snapshot already.
			continue
		}
		time.Sleep(traceAfter) // let the snapshot show what followed the call
		t.wrote++
		last = time.Now()
		path := t.path + "." + strconv.Itoa(t.wrote)
		if err := t.writeSnapshot(path); err != nil {
			if t.err == nil {
				t.err = fmt.Errorf("-exectrace: %s: %w", path, err)
			}
			continue
		}
		fmt.Fprintf(t.stderr, "exectrace: %s: call %s of %s took %.2f ms (published %s)\n",
			path, c.CallID, c.Scenario, float64(c.Latency)/1e6, c.Start.Format("15:04:05.000000"))
	}
}

func (t *execTracer) writeSnapshot(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := t.fr.WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// stop ends tracing and reports the first error of writing the trace.
func (t *execTracer) stop() error {
	if t.whole != nil {
		trace.Stop()
		if err := t.whole.Close(); err != nil {
			return fmt.Errorf("-exectrace: %w", err)
		}
		return nil
	}
	close(t.trigger)
	<-t.done
	t.fr.Stop()
	if t.wrote == 0 {
		fmt.Fprintf(t.stderr, "exectrace: no call took %s or more: no snapshot written\n", t.slow)
	}
	return t.err
}
