package bench

import (
	"cmp"
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
	"github.com/capstanhq/capstan/internal/bus/embedded"
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
	// Unused when ServerURL is set.
	Dir string
	// ServerURL, when set, is a server to use instead of starting the
	// embedded one in this process, with the credentials file ServerCreds.
	ServerURL   string
	ServerCreds string
	// Server, when set, reports the memory of ServerURL's process (a
	// ServerClient of capstan-bench -server-process), so that the report
	// has the server's own memory per retained result.
	Server ServerProbe
	// ServerHeapProfile, when set (with Server), is where the server
	// process writes its heap profile at the end of the soak; with Settle,
	// it writes a second one, once settled, to ServerHeapProfile+".settled".
	ServerHeapProfile string
	// Settle, when positive, is how long the soak waits, idle, after the
	// state after the load before it takes the state once more (Settled):
	// long enough, the server has dropped what it keeps only for a while
	// (block caches after 10 s, per-block subject state after 2 min, the
	// calls stream's de-duplication ids after its window, 15 min), and
	// what is left is what the retained results cost.
	Settle time.Duration
	// Chunk is how long each chunk of load runs; 10s when 0.
	Chunk time.Duration
	// Progress, when set, receives a line per chunk of calls.
	Progress io.Writer
}

// ServerProbe asks the process that runs the server about its memory.
type ServerProbe interface {
	// Memory returns the server process's memory after a forced collection.
	Memory(ctx context.Context) (ServerMemory, error)
	// WriteHeapProfile makes the server process write its heap profile to
	// path.
	WriteHeapProfile(ctx context.Context, path string) error
}

// SoakReport is the server's state before and after a soak, and what it
// costs per retained result.
type SoakReport struct {
	Calls       int           `json:"calls"`
	Errors      int64         `json:"errors"`
	Elapsed     time.Duration `json:"elapsed"`
	GoVersion   string        `json:"go_version"`
	NATSServer  string        `json:"nats_server"`
	ArgBytes    int           `json:"arg_bytes"`
	Concurrency int           `json:"concurrency"`
	// ServerInProcess is true when the server ran in the benchmark's
	// process (then its memory cannot be told apart from the worker's and
	// the load's, and the server_* figures are absent).
	ServerInProcess bool      `json:"server_in_process"`
	Before          SoakState `json:"before"`
	After           SoakState `json:"after"`
	// Settle and Settled are the idle wait after the load and the state
	// after it (SoakConfig.Settle); Settled is nil without one.
	Settle  time.Duration `json:"settle,omitempty"`
	Settled *SoakState    `json:"settled,omitempty"`
	// RetainedResults is the results stream's messages after the soak
	// minus before: the results the server keeps for the stream's MaxAge.
	RetainedResults int64 `json:"retained_results"`
	// ServerHeapBytesPerRetainedResult and ServerRSSBytesPerRetainedResult
	// are the growth of the server process's heap in use and resident set
	// over the retained results; nil unless the server ran in its own
	// process with a SoakConfig.Server.
	ServerHeapBytesPerRetainedResult *float64 `json:"server_heap_bytes_per_retained_result,omitempty"`
	ServerRSSBytesPerRetainedResult  *float64 `json:"server_rss_bytes_per_retained_result,omitempty"`
	// ServerLiveBytesPerRetainedResult is the growth of the server's live
	// heap objects (HeapAlloc; heap in use also counts the free room of
	// spans still in use) over the retained results.
	ServerLiveBytesPerRetainedResult *float64 `json:"server_live_bytes_per_retained_result,omitempty"`
	// SettledServerHeapBytesPerRetainedResult and
	// SettledServerRSSBytesPerRetainedResult are the same from the settled
	// state (with SoakConfig.Settle).
	SettledServerHeapBytesPerRetainedResult *float64 `json:"settled_server_heap_bytes_per_retained_result,omitempty"`
	SettledServerRSSBytesPerRetainedResult  *float64 `json:"settled_server_rss_bytes_per_retained_result,omitempty"`
	SettledServerLiveBytesPerRetainedResult *float64 `json:"settled_server_live_bytes_per_retained_result,omitempty"`
	// ResultsDiskBytesPerRetainedResult is the results stream's stored
	// bytes (stream state) over the retained results.
	ResultsDiskBytesPerRetainedResult float64 `json:"results_disk_bytes_per_retained_result"`
	// AuditDiskBytesPerCall is the audit stream's stored bytes (stream
	// state) over the retained results: every answered call has one result
	// and one audit record.
	AuditDiskBytesPerCall float64 `json:"audit_disk_bytes_per_call"`
}

// SoakState is a snapshot of what the server holds.
type SoakState struct {
	// RSSBytes is the benchmark process's resident memory (with the
	// server in it: server, worker and load generator; else worker and load
	// generator), and HeapBytes its Go heap in use after a forced collection.
	RSSBytes  uint64 `json:"rss_bytes"`
	HeapBytes uint64 `json:"heap_bytes"`
	// Server is the server process's memory (with a server in its own
	// process and a SoakConfig.Server only).
	Server  *ServerMemory     `json:"server,omitempty"`
	Streams []bus.StreamState `json:"streams"`
}

// Soak runs cfg.Calls echo calls through a worker at saturation on one
// server and reports the server's state before and after: memory (the
// server process's own with cfg.Server), every stream's messages, bytes and
// subjects (a KV bucket's subjects are its keys), and the cost per retained
// result.
func Soak(ctx context.Context, cfg SoakConfig) (*SoakReport, error) {
	if cfg.Calls <= 0 {
		return nil, errors.New("bench: soak: the number of calls must be positive")
	}
	if cfg.ServerHeapProfile != "" && cfg.Server == nil {
		return nil, errors.New("bench: soak: a server heap profile needs a server in its own process")
	}
	cfg.Concurrency = cmp.Or(max(cfg.Concurrency, 0), 64)
	cfg.ArgBytes = cmp.Or(cfg.ArgBytes, 1024)
	cfg.Chunk = cmp.Or(cfg.Chunk, 10*time.Second)
	dir := cfg.Dir
	if dir == "" && cfg.ServerURL == "" {
		d, err := os.MkdirTemp("", "capstan-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	e, err := newEnv(ctx, dir, cfg.ServerURL, cfg.ServerCreds)
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
	rep := &SoakReport{GoVersion: runtime.Version(), NATSServer: embedded.Version(), ArgBytes: cfg.ArgBytes,
		Concurrency: cfg.Concurrency, ServerInProcess: e.srv != nil}
	if rep.Before, err = e.soakState(ctx, cfg.Server); err != nil {
		return nil, err
	}
	subject, err := e.names.CallSubject(sys.pool, personalityID, echo.Name)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for chunk := 0; rep.Calls < cfg.Calls; chunk++ {
		g := newLoad(e.conn, e.names, subject, "soak-"+strconv.Itoa(chunk), s, cfg.ArgBytes)
		r, err := g.run(ctx, 0, cfg.Chunk)
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
	if rep.After, err = e.soakState(ctx, cfg.Server); err != nil {
		return nil, err
	}
	if cfg.ServerHeapProfile != "" {
		if err := cfg.Server.WriteHeapProfile(ctx, cfg.ServerHeapProfile); err != nil {
			return nil, err
		}
	}
	if cfg.Settle > 0 {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "soak: load done, settling for %s\n", cfg.Settle)
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(cfg.Settle):
		}
		st, err := e.soakState(ctx, cfg.Server)
		if err != nil {
			return nil, err
		}
		rep.Settle, rep.Settled = cfg.Settle, &st
		if cfg.ServerHeapProfile != "" {
			if err := cfg.Server.WriteHeapProfile(ctx, cfg.ServerHeapProfile+".settled"); err != nil {
				return nil, err
			}
		}
	}
	rep.perResult(e.names.ResultsStream(), e.names.AuditStream())
	return rep, nil
}

// perResult fills the costs per retained result from the states before and
// after.
func (r *SoakReport) perResult(results, audit string) {
	delta := func(name string) (msgs, bytes int64) {
		var b, a bus.StreamState
		for _, s := range r.Before.Streams {
			if s.Name == name {
				b = s
			}
		}
		for _, s := range r.After.Streams {
			if s.Name == name {
				a = s
			}
		}
		return int64(a.Msgs) - int64(b.Msgs), int64(a.Bytes) - int64(b.Bytes)
	}
	n, resultBytes := delta(results)
	r.RetainedResults = n
	if n <= 0 {
		return
	}
	per := func(before, after uint64) *float64 {
		v := round(float64(int64(after)-int64(before))/float64(n), 1)
		return &v
	}
	r.ResultsDiskBytesPerRetainedResult = round(float64(resultBytes)/float64(n), 1)
	_, auditBytes := delta(audit)
	r.AuditDiskBytesPerCall = round(float64(auditBytes)/float64(n), 1)
	if b, a := r.Before.Server, r.After.Server; b != nil && a != nil {
		r.ServerHeapBytesPerRetainedResult = per(b.HeapInuse, a.HeapInuse)
		r.ServerRSSBytesPerRetainedResult = per(b.RSS, a.RSS)
		r.ServerLiveBytesPerRetainedResult = per(b.HeapAlloc, a.HeapAlloc)
		if st := r.Settled; st != nil && st.Server != nil {
			r.SettledServerHeapBytesPerRetainedResult = per(b.HeapInuse, st.Server.HeapInuse)
			r.SettledServerRSSBytesPerRetainedResult = per(b.RSS, st.Server.RSS)
			r.SettledServerLiveBytesPerRetainedResult = per(b.HeapAlloc, st.Server.HeapAlloc)
		}
	}
}

func (e *env) soakState(ctx context.Context, server ServerProbe) (SoakState, error) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st := SoakState{HeapBytes: ms.HeapInuse, RSSBytes: rss()}
	if server != nil {
		m, err := server.Memory(ctx)
		if err != nil {
			return SoakState{}, err
		}
		st.Server = &m
	}
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

// WriteTable prints the report: memory, each stream before and after,
// and the costs per retained result.
func (r *SoakReport) WriteTable(w io.Writer) error {
	where := "in its own process"
	if r.ServerInProcess {
		where = "in the benchmark's process"
	}
	fmt.Fprintf(w, "soak: %d calls in %s, %d errors; %s, nats-server %s %s, %d slots, %d-byte args\n\n",
		r.Calls, r.Elapsed, r.Errors, r.GoVersion, r.NATSServer, where, r.Concurrency, r.ArgBytes)
	if err := r.writeMemory(w); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
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
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nper retained result (%d retained):\n", r.RetainedResults)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if r.ServerHeapBytesPerRetainedResult != nil && r.ServerRSSBytesPerRetainedResult != nil {
		fmt.Fprintf(tw, "server heap\t%.0f bytes\n", *r.ServerHeapBytesPerRetainedResult)
		fmt.Fprintf(tw, "server RSS\t%.0f bytes\n", *r.ServerRSSBytesPerRetainedResult)
		if r.ServerLiveBytesPerRetainedResult != nil {
			fmt.Fprintf(tw, "server live heap objects\t%.0f bytes\n", *r.ServerLiveBytesPerRetainedResult)
		}
		if r.SettledServerHeapBytesPerRetainedResult != nil && r.SettledServerRSSBytesPerRetainedResult != nil {
			fmt.Fprintf(tw, "server heap, settled\t%.0f bytes\n", *r.SettledServerHeapBytesPerRetainedResult)
			fmt.Fprintf(tw, "server RSS, settled\t%.0f bytes\n", *r.SettledServerRSSBytesPerRetainedResult)
		}
		if r.SettledServerLiveBytesPerRetainedResult != nil {
			fmt.Fprintf(tw, "server live heap objects, settled\t%.0f bytes\n", *r.SettledServerLiveBytesPerRetainedResult)
		}
	} else {
		fmt.Fprintln(tw, "server heap, RSS\tnot measured (the server shares the process; use -server-process)")
	}
	fmt.Fprintf(tw, "results stream\t%.0f bytes stored\n", r.ResultsDiskBytesPerRetainedResult)
	fmt.Fprintf(tw, "audit stream\t%.0f bytes stored per call\n", r.AuditDiskBytesPerCall)
	return tw.Flush()
}

// writeMemory prints the memory table: before and after the load, and
// settled when there is a settled state.
func (r *SoakReport) writeMemory(w io.Writer) error {
	states := []SoakState{r.Before, r.After}
	head := "\tbefore\tafter"
	if r.Settled != nil {
		states = append(states, *r.Settled)
		head += "\tsettled (" + r.Settle.String() + " later)"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, head)
	row := func(name string, v func(SoakState) string) {
		fmt.Fprint(tw, name)
		for _, st := range states {
			fmt.Fprint(tw, "\t"+v(st))
		}
		fmt.Fprintln(tw)
	}
	size := func(n uint64) string { return bus.FormatBytes(int64(n)) }
	server := func(v func(ServerMemory) string) func(SoakState) string {
		return func(st SoakState) string {
			if st.Server == nil {
				return "-"
			}
			return v(*st.Server)
		}
	}
	if r.Before.Server != nil {
		row("server process RSS", server(func(m ServerMemory) string { return size(m.RSS) }))
		row("server Go heap in use", server(func(m ServerMemory) string { return size(m.HeapInuse) }))
		row("server live heap objects", server(func(m ServerMemory) string { return size(m.HeapAlloc) }))
		row("server heap objects", server(func(m ServerMemory) string { return strconv.FormatUint(m.HeapObjects, 10) }))
		row("benchmark process RSS (worker, load)", func(st SoakState) string { return size(st.RSSBytes) })
		row("benchmark Go heap in use", func(st SoakState) string { return size(st.HeapBytes) })
	} else {
		row("process RSS", func(st SoakState) string { return size(st.RSSBytes) })
		row("Go heap in use", func(st SoakState) string { return size(st.HeapBytes) })
	}
	return tw.Flush()
}
