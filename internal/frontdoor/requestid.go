package frontdoor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK does not give a tool handler the JSON-RPC id of its request, so
// the front door records it where the SDK does pass data from the transport
// to the handler: the request's RequestExtra.Header. The header is set only
// by the front door (a client's own is removed) and never leaves the process.
const requestIDHeader = "Capstan-Internal-Mcp-Request-Id"

// requestIDOf returns the JSON-RPC id of a tools/call request ("" when
// unknown, e.g. a call inside a JSON-RPC batch).
func requestIDOf(req *mcp.CallToolRequest) string {
	if req.Extra == nil || req.Extra.Header == nil {
		return ""
	}
	return req.Extra.Header.Get(requestIDHeader)
}

// formatID renders a JSON-RPC id: a number as digits, a string as itself.
func formatID(id jsonrpc.ID) string {
	return fmt.Sprint(id.Raw())
}

// recordRequestID is HTTP middleware in front of the SDK's streamable
// handler: it reads a POST body (within the SDK's own limit), and when the
// body is one tools/call request sets requestIDHeader to its id. The body
// is decoded with the SDK's JSON-RPC decoder and handed on unchanged.
func recordRequestID(next http.Handler) http.Handler {
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
			if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() && req.Method == "tools/call" {
				r.Header.Set(requestIDHeader, formatID(req.ID))
			}
		}
		next.ServeHTTP(w, r)
	})
}

// stdioTransport is the MCP stdio transport of the SDK with two additions
// for the front door: the session has an id (sessionID; the SDK's stdio
// sessions have none, and a Capstan call needs a session_id), and every
// tools/call request carries its id in requestIDHeader. Messages are
// otherwise passed through unchanged.
//
// Wrapping the SDK's connection hides one unexported SDK hook from it, the
// negotiated protocol version, which the SDK's stdio connection uses only to
// refuse JSON-RPC batches on protocol 2025-06-18 and later; behind this
// wrapper such a batch is served instead.
type stdioTransport struct {
	inner     mcp.Transport
	sessionID string
}

// Connect connects the inner transport and wraps its connection.
func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &stdioConn{Connection: c, id: t.sessionID}, nil
}

type stdioConn struct {
	mcp.Connection
	id string
}

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if req, ok := msg.(*jsonrpc.Request); ok && err == nil && req.IsCall() && req.Method == "tools/call" {
		extra, _ := req.Extra.(*mcp.RequestExtra)
		if extra == nil {
			extra = &mcp.RequestExtra{}
		}
		extra.Header = extra.Header.Clone()
		if extra.Header == nil {
			extra.Header = http.Header{}
		}
		extra.Header.Set(requestIDHeader, formatID(req.ID))
		req.Extra = extra
	}
	return msg, err
}

func (c *stdioConn) SessionID() string { return c.id }
