package mcphost

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/egress"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	// maxStderrLine caps one logged stderr line; the rest of it is dropped.
	maxStderrLine = 4 << 10
	// stopGrace is how long a stopped server gets to exit on its own once
	// its standard input is closed, before it is killed.
	stopGrace = 500 * time.Millisecond
	// exitWait is how long a start whose initialize failed waits for the
	// child's exit status, which says more than the broken pipe.
	exitWait = 2 * time.Second
	// stderrDrain bounds the wait of the exit reason for the end of the
	// child's stderr once it has exited, so that the last line it wrote is
	// quoted. The wait ends at EOF, which comes at once: the child's cgroup
	// is killed when it exits. The bound is for a process that escaped it.
	stderrDrain = time.Second
	// lostExitWait bounds the wait of a connection whose output ended for
	// the child's exit status (its reason, the stderr drain included), before
	// it fails as "closed its standard output" (a child that closed it and
	// lives on). Well past stderrDrain, so that a child that exited is
	// reported by its status even on a loaded machine.
	lostExitWait = 5 * time.Second
)

// startStdio starts the server's command as a confined child (the process
// accessor's machinery: no shell, clean environment, Landlock to the
// declared fs_reach, network only through an egress proxy of the declared
// hosts, seccomp, its own cgroup) and initializes an MCP session over its
// standard streams. The child lives until life ends or the connection is
// closed; sctx bounds the start.
func (s *server) startStdio(life, sctx context.Context) (*conn, error) {
	d := s.def
	env := maps.Clone(d.Env)
	if env == nil {
		env = map[string]string{}
	}
	c := newConn()
	for name, ref := range d.SecretEnv {
		v, err := resolveSecret(sctx, s.h.cfg.Secrets, ref)
		if err != nil {
			return nil, fmt.Errorf("secret_env.%s: %w", name, err)
		}
		env[name] = v
		c.values = append(c.values, v)
	}
	reach := process.Reach{}
	if len(d.Read) > 0 || len(d.Write) > 0 {
		reach.FS = &capability.FSGrant{Read: d.Read, Write: d.Write}
	}
	if len(d.Network) > 0 {
		g, err := capability.NewNetworkGrant(d.Network, capability.NetworkPolicy{Allow: d.Network})
		if err != nil {
			return nil, err
		}
		reach.Network = true
		reach.Egress = egressProxy{egress.Config{Dialer: fetch.NewDialer(g, fetch.Config{}, s.onDeny)}}
	}
	grant := &capability.BinaryGrant{Declared: d.Capabilities().Process.AllowedBinaries}
	runner := process.New(grant, reach, s.h.cfg.Resolver, s.h.cfg.Process, s.onDeny)

	childCtx, kill := context.WithCancel(life)
	child, err := runner.Start(childCtx, tool.Command{Binary: d.Command[0], Args: d.Command[1:], Env: env})
	if err != nil {
		kill()
		return nil, err
	}
	c.pid = child.Pid
	tail := &lastLine{}
	exited := make(chan struct{})
	var wg sync.WaitGroup
	stderrDone := make(chan struct{})
	wg.Go(func() { s.captureStderr(child.Stderr, c.values, tail); close(stderrDone) })
	wg.Go(func() {
		res, err := child.Wait()
		// The exit reason quotes the last stderr line: let the capture
		// read what the child wrote before it exited (bounded: a process
		// the child left behind may hold the pipe open).
		select {
		case <-stderrDone:
		case <-time.After(stderrDrain):
		}
		c.fail(exitReason(res, err, childCtx, tail))
		close(exited)
	})
	var session *mcp.ClientSession
	c.stop = func() {
		// Closing its input asks the server to exit; then nothing of it
		// is left (its cgroup is killed).
		_ = child.Stdin.Close()
		select {
		case <-exited:
		case <-time.After(stopGrace):
		}
		kill()
		if session != nil {
			_ = session.Close()
		}
		wg.Wait()
		_ = child.Stdout.Close()
	}
	session, err = s.client.Connect(sctx, &mcp.IOTransport{Reader: child.Stdout, Writer: child.Stdin}, nil)
	if err != nil {
		// A child that died while initializing says more than the pipe.
		select {
		case <-exited:
			err = fmt.Errorf("%s, before it answered initialize", c.why)
		case <-time.After(exitWait):
		}
		c.close()
		return nil, err
	}
	c.session = session
	wg.Go(func() {
		_ = session.Wait()
		select {
		case <-exited:
		case <-time.After(lostExitWait):
			c.fail("closed its standard output")
		}
	})
	return c, nil
}

// exitReason says why a stdio server's child ended.
func exitReason(res *tool.ProcessResult, err error, childCtx context.Context, tail *lastLine) string {
	var why string
	var limit *tool.LimitError
	switch {
	case errors.As(err, &limit):
		why = limit.Error()
	case childCtx.Err() != nil:
		return "stopped by the worker"
	case err != nil:
		why = err.Error()
	case res != nil:
		why = fmt.Sprintf("exited with status %d", res.ExitCode)
	default:
		why = "exited"
	}
	if res != nil && len(res.LimitsHit) > 0 {
		why += " (" + strings.Join(res.LimitsHit, ", ") + ")"
	}
	if last := tail.get(); last != "" {
		why += "; last stderr line: " + last
	}
	return why
}

// captureStderr logs the child's stderr line by line, secret values
// redacted, as long as the lines of this start fit in StderrMax bytes (each
// counted with its newline); from the first line that does not fit, the
// rest is read and dropped (a child must never block on a full pipe). The
// last non-empty line is kept in tail for the exit reason.
func (s *server) captureStderr(r io.Reader, values []string, tail *lastLine) {
	br := bufio.NewReaderSize(r, maxStderrLine)
	budget, capped := s.h.cfg.StderrMax, false
	for {
		line, err := readLine(br)
		if line != "" {
			text := shape.Redact(line, values)
			tail.set(text)
			switch n := len(line) + 1; {
			case capped:
			case n <= budget:
				s.log.Info("MCP server stderr", "line", text)
				budget -= n
			default:
				capped = true
				s.log.Warn("MCP server stderr cap reached; the rest of its stderr until the next start is dropped", "cap_bytes", s.h.cfg.StderrMax)
			}
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one line without its end; a line longer than the reader's
// buffer is cut there and the rest of it dropped.
func readLine(br *bufio.Reader) (string, error) {
	line, isPrefix, err := br.ReadLine()
	out := strings.TrimRight(string(line), "\r")
	for isPrefix && err == nil {
		_, isPrefix, err = br.ReadLine()
	}
	return out, err
}

// lastLine keeps the last non-empty stderr line.
type lastLine struct {
	mu   sync.Mutex
	line string
}

func (l *lastLine) set(s string) {
	if strings.TrimSpace(s) == "" {
		return
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	l.mu.Lock()
	l.line = s
	l.mu.Unlock()
}

func (l *lastLine) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.line
}

// onDeny logs a refusal of the server's sandbox or network checks. It is
// not part of any call's audit record: the server is shared by calls.
func (s *server) onDeny(err error) {
	s.log.Warn("MCP server refused by its capability declaration", "error", err.Error())
}

// egressProxy serves a stdio server's egress proxy (process.Egress).
type egressProxy struct{ cfg egress.Config }

func (p egressProxy) Serve(ctx context.Context, ln net.Listener) error {
	return egress.Serve(ctx, ln, p.cfg)
}
