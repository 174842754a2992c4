package mcphost

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/argschema"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// States of a hosted server (Status.State).
const (
	// StateStarting: the first start, or a restart right after a healthy
	// server stopped; calls wait for it (Config.StartWait).
	StateStarting = "starting"
	// StateUp: connected, tools listed; calls go through.
	StateUp = "up"
	// StateDown: the last start failed, or the server keeps crashing; it
	// is started again after a backoff, and calls answer not_available
	// meanwhile.
	StateDown = "down"
	// StateStopped: the host is stopping.
	StateStopped = "stopped"
)

// Status is a hosted server's state, as /readyz details show it. It holds
// no secret value.
type Status struct {
	State string `json:"state"`
	// Transport is "stdio" or "http".
	Transport string `json:"transport"`
	// Tools is how many of its tools are hosted.
	Tools int `json:"tools"`
	// PID is a running stdio server's process id.
	PID int `json:"pid,omitempty"`
	// Restarts counts the restarts after the server stopped while up.
	Restarts int `json:"restarts"`
	// Reason says why the server is down or restarting.
	Reason string `json:"reason,omitempty"`
	// NextStart is when a down server is started again.
	NextStart *time.Time `json:"next_start,omitempty"`
	// Since is when the state last changed.
	Since time.Time `json:"since"`
}

// maxTools bounds the tools hosted for one server.
const maxTools = 1000

// server supervises one hosted MCP server.
type server struct {
	h      *Host
	def    *Definition
	log    *slog.Logger
	client *mcp.Client
	// transport is network.transport of its spans: "pipe" or "tcp".
	transport string

	mu      sync.Mutex
	st      Status
	conn    *conn         // the live connection while up
	changed chan struct{} // closed and replaced at every state change
	// checking is the live connection while it is pinged after a call
	// timed out or was cancelled (hang.go); calls wait meanwhile.
	checking *conn
	// checks counts the running checks; run waits for them before it
	// returns.
	checks sync.WaitGroup

	sinks  sinks
	relist chan struct{}
}

func newServer(h *Host, d *Definition) *server {
	s := &server{h: h, def: d, log: h.cfg.Logger.With("mcp_server", d.Name), changed: make(chan struct{}), relist: make(chan struct{}, 1)}
	s.transport, s.st.Transport = "tcp", "http"
	if d.Stdio() {
		s.transport, s.st.Transport = "pipe", "stdio"
	}
	s.st.State, s.st.Since = StateStarting, time.Now().UTC()
	s.client = mcp.NewClient(&mcp.Implementation{Name: "capstan-worker", Version: "1"}, &mcp.ClientOptions{
		Logger: s.log,
		// No roots, sampling or elicitation: a hosted server works from
		// its own arguments, and a worker has no user to ask.
		Capabilities:                &mcp.ClientCapabilities{},
		ProgressNotificationHandler: s.onProgress,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case s.relist <- struct{}{}:
			default:
			}
		},
	})
	s.client.AddSendingMiddleware(s.traceMiddleware)
	return s
}

// run starts the server and keeps it running until ctx ends. firstDone is
// called once its first start attempt has ended.
func (s *server) run(ctx context.Context, firstDone func()) {
	var once sync.Once
	first := func() { once.Do(firstDone) }
	defer s.checks.Wait() // last: every connection is closed by then
	defer first()
	defer s.setState(func(st *Status) {
		st.State, st.Reason, st.PID, st.NextStart = StateStopped, "the worker is stopping", 0, nil
	})
	failures := 0 // consecutive failed starts and short-lived connections
	for {
		c, tools, err := s.start(ctx)
		if ctx.Err() != nil {
			if c != nil {
				c.close()
			}
			return
		}
		if err != nil {
			failures++
			delay := s.h.backoff(failures)
			reason := oneLine(err.Error())
			s.log.WarnContext(ctx, "MCP server did not start", "error", reason, "retry_in", delay.String())
			s.setDown(reason, delay, false)
			first()
			if !sleep(ctx, delay) {
				return
			}
			continue
		}
		upAt := time.Now()
		s.setUp(c, tools)
		first()
		s.log.InfoContext(ctx, "MCP server up", "tools", len(tools), "pid", c.pid, "transport", s.transport)
		reason := s.watch(ctx, c)
		if ctx.Err() != nil {
			s.setState(func(*Status) { s.conn, s.checking = nil, nil })
			c.close()
			return
		}
		// The new state is set before the old connection is closed (which
		// may take stopGrace): calls that arrive meanwhile wait for the
		// restart, or are refused during a backoff, and none is sent to
		// the connection being closed.
		if failures == 0 || time.Since(upAt) >= stableAfter {
			// A healthy server stopped: start it again at once; calls wait.
			failures = 1
			s.log.WarnContext(ctx, "MCP server stopped; restarting", "reason", reason)
			s.setState(func(st *Status) {
				s.conn, s.checking = nil, nil
				st.State, st.Reason, st.PID, st.NextStart = StateStarting, "restarting: "+reason, 0, nil
				st.Restarts++
			})
			c.close()
			if !sleep(ctx, s.h.cfg.RestartMin) {
				return
			}
			continue
		}
		failures++
		delay := s.h.backoff(failures)
		s.log.WarnContext(ctx, "MCP server stopped again soon after its restart; backing off", "reason", reason, "retry_in", delay.String())
		next := s.setDown("stopped: "+reason, delay, true)
		c.close()
		if !sleep(ctx, time.Until(next)) {
			return
		}
	}
}

// start connects once: child or HTTP connection, initialize, tools/list.
func (s *server) start(ctx context.Context) (*conn, []tool.Tool, error) {
	sctx, cancel := context.WithTimeout(ctx, s.h.cfg.StartTimeout)
	defer cancel()
	var c *conn
	var err error
	if s.def.Stdio() {
		c, err = s.startStdio(ctx, sctx)
	} else {
		c, err = s.startHTTP(ctx, sctx)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer to initialize within %s", s.h.cfg.StartTimeout)
		}
		return nil, nil, err
	}
	tools, err := s.list(sctx, c)
	if err != nil {
		c.close()
		return nil, nil, fmt.Errorf("tools/list: %w", err)
	}
	return c, tools, nil
}

// watch keeps a live connection under watch until it is lost or ctx ends,
// pinging it and listing its tools again when it says they changed. It
// returns why the connection ended.
func (s *server) watch(ctx context.Context, c *conn) string {
	ping := time.NewTicker(s.h.cfg.PingInterval)
	defer ping.Stop()
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return "the worker is stopping"
		case <-c.lost:
			return c.why
		case <-s.relist:
			lctx, cancel := context.WithTimeout(ctx, s.h.cfg.StartTimeout)
			tools, err := s.list(lctx, c)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					c.fail(oneLine("tools/list after tools/list_changed failed: " + err.Error()))
				}
				continue
			}
			s.publishTools(tools)
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, s.h.cfg.PingTimeout)
			err := c.session.Ping(pctx, nil)
			cancel()
			var werr *jsonrpc.Error
			switch {
			case err == nil || ctx.Err() != nil:
				misses = 0
			case errors.As(err, &werr) && werr.Code == jsonrpc.CodeMethodNotFound:
				ping.Stop() // a server without ping: rely on its connection
			default:
				misses++
				if misses >= 2 {
					c.fail(fmt.Sprintf("hung: no answer to %d pings in a row (%s each)", misses, s.h.cfg.PingTimeout))
				}
			}
		}
	}
}

var mcpToolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// list lists the server's tools and builds the hosted ones. A tool that
// cannot be hosted (its name is not a subject token, its schema does not
// compile) is left out with a warning.
func (s *server) list(ctx context.Context, c *conn) ([]tool.Tool, error) {
	var out []tool.Tool
	for t, err := range c.session.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		if len(out) == maxTools {
			s.log.WarnContext(ctx, "MCP server lists too many tools; the rest are not hosted", "max", maxTools)
			break
		}
		ht, err := s.hostedTool(t, c.values)
		if err != nil {
			s.log.WarnContext(ctx, "MCP tool not hosted", "mcp_tool", t.Name, "error", err)
			continue
		}
		out = append(out, ht)
	}
	return out, nil
}

// hostedTool builds the tool.Tool of one listed MCP tool. Text the server
// wrote (description, schema) has the server's secret values redacted:
// nothing of them may reach the catalog.
func (s *server) hostedTool(t *mcp.Tool, values []string) (tool.Tool, error) {
	if !mcpToolNameRE.MatchString(t.Name) {
		return tool.Tool{}, fmt.Errorf("its name %q must match ^[A-Za-z0-9_-]+$ to be hosted as mcp__%s__<tool>", t.Name, s.def.Name)
	}
	name := "mcp__" + s.def.Name + "__" + t.Name
	schema := json.RawMessage(`{"type":"object"}`)
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return tool.Tool{}, fmt.Errorf("input schema: %w", err)
		}
		schema = json.RawMessage(shape.Redact(string(b), values))
	}
	if _, err := argschema.Compile(name, schema); err != nil {
		return tool.Tool{}, err
	}
	title := t.Title
	if title == "" && t.Annotations != nil {
		title = t.Annotations.Title
	}
	desc := cmp.Or(t.Description, title, "Tool "+t.Name+" of MCP server "+s.def.Name)
	ht := tool.Tool{
		Name:              name,
		Description:       shape.Redact(desc, values),
		Schema:            schema,
		Toolset:           "mcp",
		Capabilities:      s.def.Capabilities(),
		OutputIsUntrusted: s.def.Untrusted,
		Execute:           s.executor(t.Name),
	}
	if err := ht.Validate(); err != nil {
		return tool.Tool{}, err
	}
	return ht, nil
}

// setUp records a live connection and publishes its tools (before calls
// see the server up, so that none finds its tool unknown).
func (s *server) setUp(c *conn, tools []tool.Tool) {
	s.publishTools(tools)
	s.setState(func(st *Status) {
		s.conn = c
		st.State, st.Reason, st.PID, st.NextStart = StateUp, "", c.pid, nil
	})
}

func (s *server) publishTools(tools []tool.Tool) {
	s.setState(func(st *Status) { st.Tools = len(tools) })
	if s.h.cfg.OnTools != nil {
		s.h.cfg.OnTools(s.def.Name, tools)
	}
}

// setDown marks the server down for delay with reason, counting a restart
// when a live connection ended (restart), and returns when it is started
// again.
func (s *server) setDown(reason string, delay time.Duration, restart bool) time.Time {
	next := time.Now().Add(delay).UTC()
	s.setState(func(st *Status) {
		s.conn, s.checking = nil, nil
		if restart {
			st.Restarts++
		}
		st.State, st.Reason, st.PID, st.NextStart = StateDown, reason, 0, &next
	})
	return next
}

// setState applies fn to the status under the lock, stamps the change,
// wakes every waiter and tells OnStatus.
func (s *server) setState(fn func(*Status)) {
	s.mu.Lock()
	prev := s.st.State
	fn(&s.st)
	if s.st.State != prev {
		s.st.Since = time.Now().UTC()
	}
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	s.h.statusChanged()
}

func (s *server) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// connection returns the live connection, waiting up to StartWait while
// the server starts, or is pinged after a call timed out or was cancelled
// (hang.go); otherwise it returns nil and why the server is not available.
// A ctx that ends first returns nil and "".
func (s *server) connection(ctx context.Context) (*conn, string) {
	timer := time.NewTimer(s.h.cfg.StartWait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		st, c, checking, changed := s.st, s.conn, s.checking, s.changed
		s.mu.Unlock()
		switch st.State {
		case StateUp:
			if checking == nil {
				return c, ""
			}
			// Pinged after a call timed out or was cancelled: wait for the
			// answer, or for the restart of a hung server.
		case StateDown, StateStopped:
			return nil, st.Reason
		}
		select {
		case <-changed:
		case <-timer.C:
			if st.State == StateUp {
				return nil, fmt.Sprintf("no answer yet to the ping that followed a call that timed out or was cancelled, after %s", s.h.cfg.StartWait)
			}
			return nil, fmt.Sprintf("still starting after %s (%s)", s.h.cfg.StartWait, cmp.Or(st.Reason, "first start"))
		case <-ctx.Done():
			return nil, ""
		}
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
