package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/embedded"
)

// The commands of Serve's protocol, one a line on its input.
const (
	// CommandMemory asks for the server process's memory after a forced
	// collection; the answer is a ServerMemory.
	CommandMemory = "memory"
	// CommandHeapProfile, followed by a space and a file path, asks the
	// server process to write its heap profile (in use and allocated,
	// pprof format, after a forced collection) to that file.
	CommandHeapProfile = "heapprofile"
)

// ServerMemory is the memory of the process that runs the server, after a
// forced garbage collection that returned what it freed to the system.
type ServerMemory struct {
	// HeapInuse is the bytes in in-use heap spans (runtime.MemStats).
	HeapInuse uint64 `json:"heap_inuse_bytes"`
	// HeapAlloc is the bytes of live heap objects.
	HeapAlloc uint64 `json:"heap_alloc_bytes"`
	// HeapObjects is the number of live heap objects.
	HeapObjects uint64 `json:"heap_objects"`
	// Sys is the bytes the Go runtime obtained from the system.
	Sys uint64 `json:"sys_bytes"`
	// RSS is the process's resident set size (0 where /proc is missing).
	RSS uint64 `json:"rss_bytes"`
}

// serveReply is one line Serve writes in answer to a command: the memory,
// or nothing (a profile written), or an error.
type serveReply struct {
	Memory *ServerMemory `json:"memory,omitempty"`
	Error  string        `json:"error,omitempty"`
}

// serveCommand is a parsed line of Serve's input.
type serveCommand struct {
	name string // CommandMemory or CommandHeapProfile
	path string // CommandHeapProfile's file
}

// parseServeCommand parses one line of Serve's input: "memory" or
// "heapprofile <path>" (the path is the rest of the line, spaces and all,
// and must not be empty). Surrounding white space is ignored.
func parseServeCommand(line string) (serveCommand, error) {
	line = strings.TrimSpace(line)
	name, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	switch name {
	case CommandMemory:
		if rest != "" {
			return serveCommand{}, fmt.Errorf("command %s takes no argument, got %q", CommandMemory, rest)
		}
		return serveCommand{name: name}, nil
	case CommandHeapProfile:
		if rest == "" {
			return serveCommand{}, fmt.Errorf("command %s needs a file path", CommandHeapProfile)
		}
		return serveCommand{name: name, path: rest}, nil
	case "":
		return serveCommand{}, errors.New("empty command")
	default:
		return serveCommand{}, fmt.Errorf("unknown command %q (want %s or %s <path>)", name, CommandMemory, CommandHeapProfile)
	}
}

// Serve runs the embedded server alone, storing in dir, for a benchmark in
// another process (capstan-bench -server-process). It writes the server's
// URL as one line to out, then answers commands read one a line from in
// (CommandMemory, CommandHeapProfile), each with one JSON line on out, until
// in reaches its end (the parent closed it or died) or ctx ends. Clients
// authenticate with the credentials file ServeCredsFile(dir); NewServerClient
// speaks this protocol.
func Serve(ctx context.Context, dir string, in io.Reader, out io.Writer) error {
	srv, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer srv.Shutdown()
	if _, err := fmt.Fprintln(out, srv.ClientURL()); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	lines := make(chan string)
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-done:
				return
			}
		}
	}()
	enc := json.NewEncoder(out)
	for {
		select {
		case <-ctx.Done():
			return nil
		case line, ok := <-lines:
			if !ok {
				return nil
			}
			if err := enc.Encode(answer(line)); err != nil {
				return fmt.Errorf("bench: serve: write reply: %w", err)
			}
		}
	}
}

// answer runs the command of one input line.
func answer(line string) serveReply {
	cmd, err := parseServeCommand(line)
	if err != nil {
		return serveReply{Error: err.Error()}
	}
	switch cmd.name {
	case CommandMemory:
		m := memory()
		return serveReply{Memory: &m}
	default: // CommandHeapProfile
		if err := writeHeapProfile(cmd.path); err != nil {
			return serveReply{Error: err.Error()}
		}
		return serveReply{}
	}
}

// memory is this process's memory after a forced collection.
func memory() ServerMemory {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ServerMemory{HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc, HeapObjects: ms.HeapObjects, Sys: ms.Sys, RSS: rss()}
}

// writeHeapProfile writes this process's heap profile to path after a
// forced collection (so that in-use figures are current).
func writeHeapProfile(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("heap profile %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}

// ServeCredsFile returns the credentials file that clients of the server Serve
// runs storing in dir must use (Config.ServerCreds).
func ServeCredsFile(dir string) string { return bus.EmbeddedCredsFile(dir) }

// ServerClient speaks Serve's protocol to a server in another process,
// through the process's input and output. Its methods may be called from
// several goroutines; requests are answered one at a time.
type ServerClient struct {
	url   string
	w     io.Writer
	lines <-chan string

	mu     sync.Mutex
	broken error // set when a request was abandoned: replies no longer match requests
}

// NewServerClient reads the URL line Serve writes first from r (waiting at
// most until ctx ends) and returns a client that sends commands to w and
// reads their replies from r. It reads r from a goroutine that ends when r
// reaches its end, so the caller must make r end (for the child process,
// close its input and wait for it) when done.
func NewServerClient(ctx context.Context, w io.Writer, r io.Reader) (*ServerClient, error) {
	lines := make(chan string, 1)
	go func() {
		defer close(lines)
		br := bufio.NewReader(r)
		for {
			s, err := br.ReadString('\n')
			if s != "" {
				lines <- strings.TrimSpace(s)
			}
			if err != nil {
				return
			}
		}
	}()
	c := &ServerClient{w: w, lines: lines}
	line, err := c.next(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: server URL: %w", err)
	}
	if !strings.HasPrefix(line, "nats://") {
		return nil, fmt.Errorf("bench: the server printed %q, not a nats:// URL", line)
	}
	c.url = line
	return c, nil
}

// URL returns the server's client URL.
func (c *ServerClient) URL() string { return c.url }

// Memory returns the server process's memory after a forced collection.
func (c *ServerClient) Memory(ctx context.Context) (ServerMemory, error) {
	rep, err := c.request(ctx, CommandMemory)
	if err != nil {
		return ServerMemory{}, err
	}
	if rep.Memory == nil {
		return ServerMemory{}, errors.New("bench: server memory: the reply has no memory")
	}
	return *rep.Memory, nil
}

// WriteHeapProfile makes the server process write its heap profile to path
// (a path in the server's file system; relative to its working directory).
func (c *ServerClient) WriteHeapProfile(ctx context.Context, path string) error {
	if strings.ContainsAny(path, "\r\n") || strings.TrimSpace(path) != path || path == "" {
		return fmt.Errorf("bench: heap profile path %q must be non-empty, on one line, without surrounding spaces", path)
	}
	_, err := c.request(ctx, CommandHeapProfile+" "+path)
	return err
}

// request sends one command and reads its reply.
func (c *ServerClient) request(ctx context.Context, cmd string) (serveReply, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return serveReply{}, c.broken
	}
	name, _, _ := strings.Cut(cmd, " ")
	if _, err := io.WriteString(c.w, cmd+"\n"); err != nil {
		return serveReply{}, fmt.Errorf("bench: server %s: %w", name, err)
	}
	line, err := c.next(ctx)
	if err != nil {
		c.broken = fmt.Errorf("bench: server %s: an earlier request got no reply: %w", name, err)
		return serveReply{}, fmt.Errorf("bench: server %s: %w", name, err)
	}
	rep, err := parseServeReply(line)
	if err != nil {
		return serveReply{}, fmt.Errorf("bench: server %s: %w", name, err)
	}
	return rep, nil
}

// next returns the next line of the server's output.
func (c *ServerClient) next(ctx context.Context) (string, error) {
	select {
	case line, ok := <-c.lines:
		if !ok {
			return "", io.ErrUnexpectedEOF
		}
		return line, nil
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}

// parseServeReply decodes one reply line; a reply carrying an error
// becomes that error.
func parseServeReply(line string) (serveReply, error) {
	var rep serveReply
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		return serveReply{}, fmt.Errorf("reply %q is not JSON: %w", line, err)
	}
	if rep.Error != "" {
		return serveReply{}, errors.New(rep.Error)
	}
	return rep, nil
}
