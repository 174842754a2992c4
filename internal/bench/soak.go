package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/tools/echo"
)

// SoakConfig configures Soak.
type SoakConfig struct {
	// Calls is how many calls the soak answers (at saturation).
	Calls int
	// Concurrency is the worker's slots; 64 when 0.
	Concurrency int
	// ArgBytes is the size of each call's args; 1024 when 0.
	ArgBytes int
	// Dir is the embedded server's store; a temporary directory when empty.
	Dir string
	// Progress, when set, receives a line per chunk of calls.
	Progress io.Writer
}

// SoakReport is the server's state before and after a soak.
type SoakReport struct {
	Calls   int           `json:"calls"`
	Errors  int64         `json:"errors"`
	Elapsed time.Duration `json:"elapsed"`
	Before  SoakState     `json:"before"`
	After   SoakState     `json:"after"`
}

// SoakState is a snapshot of what the server holds.
type SoakState struct {
	// RSSBytes is the benchmark process's resident memory (server, worker
	// and load generator), and HeapBytes its Go heap in use after a
	// forced collection.
	RSSBytes  uint64            `json:"rss_bytes"`
	HeapBytes uint64            `json:"heap_bytes"`
	Streams   []bus.StreamState `json:"streams"`
}

// Soak runs cfg.Calls echo calls through a worker at saturation on one
// embedded server and reports the server's state before and after: the
// process's memory and every stream's messages, bytes and subjects (a KV
// bucket's subjects are its keys).
func Soak(ctx context.Context, cfg SoakConfig) (*SoakReport, error) {
	if cfg.Calls <= 0 {
		return nil, errors.New("bench: soak: the number of calls must be positive")
	}
	cfg.Concurrency = max(cfg.Concurrency, 0)
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 64
	}
	if cfg.ArgBytes == 0 {
		cfg.ArgBytes = 1024
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "capstan-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	e, err := newEnv(ctx, dir, "", "")
	if err != nil {
		return nil, err
	}
	defer e.close()
	s := Scenario{Name: "capstan-echo/saturate", System: Capstan, Concurrency: cfg.Concurrency, Load: Saturate, Outstanding: 2 * cfg.Concurrency}
	sys, err := e.start(ctx, s)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sys.stop() }()
	rep := &SoakReport{}
	if rep.Before, err = e.soakState(ctx); err != nil {
		return nil, err
	}
	subject, err := e.names.CallSubject(sys.pool, personalityID, echo.Name)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for chunk := 0; rep.Calls < cfg.Calls; chunk++ {
		g := newLoad(e.conn, e.names, subject, "soak-"+strconv.Itoa(chunk), s, cfg.ArgBytes)
		r, err := g.run(ctx, 0, 10*time.Second)
		if err != nil {
			return nil, err
		}
		rep.Calls += r.Calls
		rep.Errors += r.Errors
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "soak: %d of %d calls, %.0f calls/s\n", rep.Calls, cfg.Calls, r.CallsPerSec)
		}
	}
	rep.Elapsed = time.Since(start).Round(time.Second)
	if err := sys.stop(); err != nil {
		return nil, err
	}
	sys.stop = func() error { return nil }
	if rep.After, err = e.soakState(ctx); err != nil {
		return nil, err
	}
	return rep, nil
}

func (e *env) soakState(ctx context.Context) (SoakState, error) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := SoakState{HeapBytes: ms.HeapInuse, RSSBytes: rss()}
	var err error
	st.Streams, err = e.conn.StreamStates(ctx)
	return st, err
}

// rss is the process's resident set size from /proc/self/status (0 where
// there is none).
func rss() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// WriteTable prints the report: memory, then each stream before and after.
func (r *SoakReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "soak: %d calls in %s, %d errors\n\n", r.Calls, r.Elapsed, r.Errors)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tbefore\tafter")
	fmt.Fprintf(tw, "process RSS\t%s\t%s\n", bus.FormatBytes(int64(r.Before.RSSBytes)), bus.FormatBytes(int64(r.After.RSSBytes)))
	fmt.Fprintf(tw, "Go heap in use\t%s\t%s\n", bus.FormatBytes(int64(r.Before.HeapBytes)), bus.FormatBytes(int64(r.After.HeapBytes)))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "stream\tmsgs before\tmsgs after\tbytes before\tbytes after\tsubjects/keys before\tsubjects/keys after")
	before := map[string]bus.StreamState{}
	for _, s := range r.Before.Streams {
		before[s.Name] = s
	}
	for _, a := range r.After.Streams {
		b := before[a.Name]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\n", a.Name, b.Msgs, a.Msgs,
			bus.FormatBytes(int64(b.Bytes)), bus.FormatBytes(int64(a.Bytes)), b.Subjects, a.Subjects)
	}
	return tw.Flush()
}
