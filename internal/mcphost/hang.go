package mcphost

import (
	"context"
	"errors"
	"fmt"
)

// A stdio server that blocks in a call (a single-threaded server sleeping
// in a tool, say) answers nothing else either: every later call would time
// out in turn until two periodic pings had failed. So a call that times out
// or is cancelled is followed at once by a ping; a server that does not
// answer it within HungPingTimeout is hung, and its connection fails, which
// makes the supervisor restart it (its cgroup killed) like any hung server.

// Phrases that end the reason of a check ("... after a call timed out").
const (
	callTimedOut = "timed out"
	callCanceled = "was cancelled"
)

// abandoned says how a call whose ctx ended was abandoned: timed out (its
// deadline passed) or cancelled.
func abandoned(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return callTimedOut
	}
	return callCanceled
}

// suspect is told that a call on c ended without its answer: it timed out
// or was cancelled (how says which). For a stdio server whose live
// connection c is, it starts a check of c (check), unless one is running;
// calls wait for the check's outcome (connection). A url server is left
// to its periodic pings: a restart of its connection would not end a hang
// of the remote server.
func (s *server) suspect(c *conn, how string) {
	if !s.def.Stdio() {
		return
	}
	s.mu.Lock()
	if s.conn != c || s.checking != nil {
		s.mu.Unlock()
		return
	}
	s.checking = c
	// Added under s.mu while c is live: run clears s.conn under s.mu before
	// it waits for the checks, so no check is added after that wait began.
	s.checks.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.checks.Done()
		s.check(c, how)
	}()
}

// check pings c once, bounded by HungPingTimeout. Any answer, an error
// included (a server without ping), keeps the server, and the calls waiting
// for the check go on. No answer in time fails c with the reason "hung: did
// not answer a ping within <d> after a call <how>", and the supervisor
// restarts the server (calls keep waiting, for the restart). A ping that
// fails otherwise found the connection lost: the supervisor's reason (the
// child's exit status) says more, so c is left to it.
func (s *server) check(c *conn, how string) {
	d := s.h.cfg.HungPingTimeout
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s.log.Debug("MCP server pinged after a call "+how, "pid", c.pid)
	err := c.session.Ping(ctx, nil)
	if err != nil && ctx.Err() != nil {
		c.fail(fmt.Sprintf("hung: did not answer a ping within %s after a call %s", d, how))
		return
	}
	if err == nil {
		s.log.Debug("MCP server answered the ping after a call "+how, "pid", c.pid)
	}
	s.setState(func(*Status) {
		if s.checking == c {
			s.checking = nil
		}
	})
}
