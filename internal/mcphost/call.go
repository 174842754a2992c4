package mcphost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// errServerTimeout is the cause of a call that ran past its server's timeout.
type errServerTimeout struct{ d time.Duration }

func (e errServerTimeout) Error() string { return "timed out after " + e.d.String() }

// lostWait is how long a call whose request failed waits to learn whether
// the connection is gone (then the call is handed back) or not (then the
// failure is its answer).
const lostWait = 2 * time.Second

// executor returns the Execute function of the hosted tool mcpName.
func (s *server) executor(mcpName string) func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
	return func(ctx context.Context, args json.RawMessage, tc *tool.Context) (tool.Result, error) {
		return s.call(ctx, mcpName, args, tc)
	}
}

// call runs one tools/call:
//
//   - a server that is down (or still starting after StartWait) answers
//     not_available / "MCP server <name> is not available: <reason>";
//   - content text blocks become the value, structuredContent the
//     structured field, isError an execution_failed result with the
//     server's text, a JSON-RPC error an execution_failed result with its
//     message;
//   - progress notifications become progress events of the definition's
//     audience;
//   - when ctx ends (the call is cancelled or timed out) the SDK sends
//     notifications/cancelled and the call returns context.Cause(ctx);
//     the server's own timeout ends it "timed out after <timeout>"; either
//     way a stdio server is pinged at once, and restarted when it does not
//     answer within HungPingTimeout (hang.go);
//   - a connection lost during the call (the server crashed or hung) is
//     an infrastructure fault wrapping tool.ErrUnavailable: the worker hands
//     the call back for redelivery, and the server is restarted.
//
// Every text from the server has the server's secret values redacted.
func (s *server) call(ctx context.Context, mcpName string, args json.RawMessage, tc *tool.Context) (tool.Result, error) {
	c, why := s.connection(ctx)
	if c == nil {
		if ctx.Err() != nil {
			return tool.Result{}, context.Cause(ctx)
		}
		return tool.Fail(tool.CodeNotAvailable, unavailable(s.def.Name, why)), nil
	}
	cctx, cancel := context.WithTimeoutCause(ctx, s.def.Timeout, errServerTimeout{s.def.Timeout})
	defer cancel()
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	params := &mcp.CallToolParams{Name: mcpName, Arguments: args}
	token, done := s.sinks.add(tc, s.def.ProgressAudience, c.values)
	defer done()
	params.SetProgressToken(token)
	res, err := c.session.CallTool(cctx, params)
	switch {
	case ctx.Err() != nil:
		s.suspect(c, abandoned(ctx))
		return tool.Result{}, context.Cause(ctx)
	case cctx.Err() != nil:
		s.suspect(c, callTimedOut)
		return tool.Fail(tool.CodeExecutionFailed, context.Cause(cctx).Error()), nil
	case err != nil:
		return s.failed(c, err)
	}
	return shape.RedactResult(result(s.def.Name, res), c.values), nil
}

// failed answers a tools/call that returned an error instead of a result.
func (s *server) failed(c *conn, err error) (tool.Result, error) {
	msg := shape.Redact(oneLine(err.Error()), c.values)
	var werr *jsonrpc.Error
	if errors.As(err, &werr) {
		// The server answered with a JSON-RPC error: that is its answer.
		return tool.Fail(tool.CodeExecutionFailed, "MCP server "+s.def.Name+": "+msg), nil
	}
	var denial *tool.DenialError
	if errors.As(err, &denial) {
		// The scoped dialer refused the server's address (now private, say).
		c.fail(msg)
		return tool.Fail(tool.CodeNotAvailable, unavailable(s.def.Name, msg)), nil
	}
	// Wait for the supervisor to see the connection end (its reason, such
	// as the child's exit status, says more than this error). A stdio
	// session that broke has ended, and the supervisor's watch of the child
	// fails c within lostExitWait: wait for that rather than race it.
	wait := lostWait
	fault := transportFault(err)
	if fault && s.def.Stdio() {
		wait += lostExitWait
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-c.lost:
	case <-t.C:
		if !fault {
			return tool.Fail(tool.CodeExecutionFailed, "MCP server "+s.def.Name+": "+msg), nil
		}
		c.fail(msg)
	}
	<-c.lost // c.why is set
	return tool.Result{}, fmt.Errorf("%w: MCP server %s: connection lost during the call: %s", tool.ErrUnavailable, s.def.Name, shape.Redact(c.why, c.values))
}

// transportFault reports an error of the connection itself, not of the call.
func transportFault(err error) bool {
	var ne net.Error
	return errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &ne)
}

// result converts a CallToolResult: text blocks joined by newlines make the
// value (other blocks are described in one line each); structuredContent
// is the structured field (a value that is not an object is kept under
// "value"); isError makes an execution_failed result with the text.
func result(server string, r *mcp.CallToolResult) tool.Result {
	var parts []string
	for _, c := range r.Content {
		if s := contentText(c); s != "" {
			parts = append(parts, s)
		}
	}
	text := strings.Join(parts, "\n")
	if r.IsError {
		if text == "" {
			text = "MCP server " + server + " reported an error without a message"
		}
		return tool.Fail(tool.CodeExecutionFailed, text)
	}
	out := tool.Result{OK: true, Value: text}
	if r.StructuredContent != nil {
		if m, ok := r.StructuredContent.(map[string]any); ok {
			out.Structured = m
		} else {
			out.Structured = map[string]any{"value": r.StructuredContent}
		}
		if text == "" {
			if b, err := json.Marshal(r.StructuredContent); err == nil {
				out.Value = string(b)
			}
		}
	}
	return out
}

// contentText is the text of one content block: its text, or a one-line
// description of what is not text.
func contentText(c mcp.Content) string {
	switch c := c.(type) {
	case *mcp.TextContent:
		return c.Text
	case *mcp.ImageContent:
		return fmt.Sprintf("[image: %s, %d bytes]", c.MIMEType, len(c.Data))
	case *mcp.AudioContent:
		return fmt.Sprintf("[audio: %s, %d bytes]", c.MIMEType, len(c.Data))
	case *mcp.ResourceLink:
		return strings.TrimSpace(fmt.Sprintf("[resource link: %s %s]", c.URI, c.Name))
	case *mcp.EmbeddedResource:
		if c.Resource == nil {
			return ""
		}
		if c.Resource.Text != "" {
			return c.Resource.Text
		}
		return fmt.Sprintf("[resource %s: %s, %d bytes]", c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob))
	}
	return ""
}

// sinks routes the progress notifications of a server to the calls that
// sent their tokens.
type sinks struct {
	mu  sync.Mutex
	m   map[string]*sink
	seq uint64
}

// sink is one call's progress: closed once the call returns, so that no
// event follows its result.
type sink struct {
	mu       sync.Mutex
	closed   bool
	tc       *tool.Context
	audience tool.Audience
	values   []string
	warned   bool
}

// add registers the progress of the call tc and returns its token and the
// function that closes it.
func (ss *sinks) add(tc *tool.Context, aud tool.Audience, values []string) (string, func()) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = make(map[string]*sink)
	}
	ss.seq++
	token := "capstan-" + strconv.FormatUint(ss.seq, 10)
	k := &sink{tc: tc, audience: aud, values: values}
	ss.m[token] = k
	return token, func() {
		ss.mu.Lock()
		delete(ss.m, token)
		ss.mu.Unlock()
		k.mu.Lock()
		k.closed = true
		k.mu.Unlock()
	}
}

func (ss *sinks) get(token string) *sink {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.m[token]
}

// onProgress turns a notifications/progress into a progress event of the
// call whose token it carries; one for no running call is dropped.
func (s *server) onProgress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p := req.Params
	if p == nil {
		return
	}
	token, ok := p.ProgressToken.(string)
	if !ok {
		return
	}
	k := s.sinks.get(token)
	if k == nil {
		return
	}
	ev := tool.Progress{Message: p.Message, Audience: k.audience}
	if p.Total > 0 {
		pct := min(max(p.Progress/p.Total*100, 0), 100)
		ev.Percent = &pct
	}
	if ev.Message == "" {
		ev.Message = strconv.FormatFloat(p.Progress, 'f', -1, 64)
		if p.Total > 0 {
			ev.Message += "/" + strconv.FormatFloat(p.Total, 'f', -1, 64)
		}
	}
	ev.Message = shape.Redact(ev.Message, k.values)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return
	}
	if err := k.tc.Emit(ev); err != nil && !k.warned {
		k.warned = true
		s.log.Warn("progress event of an MCP call not published", "call_id", k.tc.CallID, "error", err)
	}
}
