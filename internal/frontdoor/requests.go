package frontdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK gives a tool handler neither the JSON-RPC id of its request nor
// the reason its context ended. The front door needs both: the id is
// recorded in the call (session_key), and only an MCP cancellation
// (notifications/cancelled) may cancel the Capstan call, while a lost
// connection, whose context ends the same way, must leave it running. So it
// looks at the messages before the SDK does, decoding them with the SDK's
// own JSON-RPC decoder and types: over stdio in a wrapper of the SDK's
// connection (stdioTransport), over HTTP in middleware in front of the SDK's
// handler (Server.observe). A tools/call gets its id in requestIDHeader of
// its RequestExtra.Header (where the SDK passes transport data to handlers;
// a client's own header of that name is removed); a cancellation is marked
// in the Server's cancellations.

// requestIDHeader carries the JSON encoding of a tools/call request's
// JSON-RPC id (5, or "abc" with the quotes) to its handler. It never leaves
// the process.
const requestIDHeader = "Capstan-Internal-Mcp-Request-Id"

const (
	methodCallTool  = "tools/call"
	methodCancelled = "notifications/cancelled"
)

// cancelMemory is how long an MCP cancellation is remembered for a request
// whose handler has not asked for it (one that had already ended, say).
const cancelMemory = time.Minute

// requestIDOf returns the JSON-RPC id of a tools/call request as JSON (""
// when unknown, e.g. a call inside a JSON-RPC batch).
func requestIDOf(req *mcp.CallToolRequest) string {
	if req.Extra == nil || req.Extra.Header == nil {
		return ""
	}
	return req.Extra.Header.Get(requestIDHeader)
}

// idJSON renders a JSON-RPC id as JSON: a number as digits, a string
// quoted.
func idJSON(id jsonrpc.ID) string {
	b, err := json.Marshal(id.Raw())
	if err != nil {
		return ""
	}
	return string(b)
}

// requestKey names one request: the verified token's user ("" over stdio),
// the session, and the JSON-RPC id as JSON. Including the user keeps one
// token from marking another token's requests.
type requestKey struct {
	user, session, id string
}

// cancellations remembers the MCP cancellations seen, until the handler of
// the request takes it or cancelMemory passes.
type cancellations struct {
	mu sync.Mutex
	m  map[requestKey]cancellation
}

type cancellation struct {
	reason string
	at     time.Time
}

// mark records a cancellation of the request k.
func (c *cancellations) mark(k requestKey, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[requestKey]cancellation)
	}
	now := time.Now()
	for old, v := range c.m {
		if now.Sub(v.at) > cancelMemory {
			delete(c.m, old)
		}
	}
	c.m[k] = cancellation{reason: reason, at: now}
}

// take reports whether the request k was cancelled by its client, with the
// client's reason, and forgets it.
func (c *cancellations) take(k requestKey) (reason string, cancelled bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	delete(c.m, k)
	return v.reason, ok
}

// observe marks a cancellation notification of session (for user); for a
// tools/call request it returns the id (as JSON) to record.
func (c *cancellations) observe(msg jsonrpc.Message, user, session string) (callID string) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok {
		return ""
	}
	switch {
	case req.IsCall() && req.Method == methodCallTool:
		return idJSON(req.ID)
	case !req.IsCall() && req.Method == methodCancelled:
		var p mcp.CancelledParams
		if json.Unmarshal(req.Params, &p) != nil {
			return ""
		}
		id, err := jsonrpc.MakeID(p.RequestID)
		if err != nil || !id.IsValid() {
			return ""
		}
		c.mark(requestKey{user: user, session: session, id: idJSON(id)}, p.Reason)
	}
	return ""
}

// observe is HTTP middleware in front of the SDK's streamable handler: it
// reads a POST body (within the SDK's own limit), lets the cancellations
// see it, records a tools/call's id in requestIDHeader, and hands the body
// on unchanged. It runs after the bearer check, so the token's user is
// known.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del(requestIDHeader)
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, mcp.DefaultMaxRequestBodyBytes))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "reading the request body failed", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if msg, err := jsonrpc.DecodeMessage(body); err == nil {
			if id := s.cancels.observe(msg, tokenUser(auth.TokenInfoFromContext(r.Context())), r.Header.Get("Mcp-Session-Id")); id != "" {
				r.Header.Set(requestIDHeader, id)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// stdioTransport is the SDK's stdio transport with what the front door
// adds: the session has an id (the SDK's stdio sessions have none, and a
// Capstan call needs a session_id), a tools/call carries its id in
// requestIDHeader, and cancellations are marked. Messages are passed on
// unchanged.
//
// Wrapping the SDK's connection hides one unexported SDK hook from it, the
// negotiated protocol version, which the SDK's stdio connection uses only to
// refuse JSON-RPC batches on protocol 2025-06-18 and later; behind this
// wrapper such a batch is served instead.
type stdioTransport struct {
	inner     mcp.Transport
	sessionID string
	cancels   *cancellations
}

// Connect connects the inner transport and wraps its connection.
func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &stdioConn{Connection: c, t: t}, nil
}

type stdioConn struct {
	mcp.Connection
	t *stdioTransport
}

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		return msg, err
	}
	if id := c.t.cancels.observe(msg, "", c.t.sessionID); id != "" {
		req := msg.(*jsonrpc.Request)
		extra, _ := req.Extra.(*mcp.RequestExtra)
		if extra == nil {
			extra = &mcp.RequestExtra{}
		}
		extra.Header = extra.Header.Clone()
		if extra.Header == nil {
			extra.Header = http.Header{}
		}
		extra.Header.Set(requestIDHeader, id)
		req.Extra = extra
	}
	return msg, nil
}

func (c *stdioConn) SessionID() string { return c.t.sessionID }
