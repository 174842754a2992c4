package mcphost

import (
	"context"
	"errors"
	"strconv"

	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of the OTel MCP conventions (gen-ai/mcp.md), which the Go
// semconv packages do not carry.
const (
	attrMCPMethod          = attribute.Key("mcp.method.name")
	attrMCPSession         = attribute.Key("mcp.session.id")
	attrMCPProtocolVersion = attribute.Key("mcp.protocol.version")
	attrRPCStatusCode      = attribute.Key("rpc.response.status_code")
)

// traceContext propagates the W3C trace context (never baggage) in
// params._meta, as the MCP conventions recommend.
var traceContext = propagation.TraceContext{}

// traceMiddleware makes a client span for every request the client sends
// ("{mcp.method.name} {target}", the target being the tool of tools/call)
// with the MCP conventions' attributes, and puts its trace context
// (traceparent, tracestate) in the request's params._meta.
func (s *server) traceMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		name, target := method, ""
		var meta func() map[string]any
		var setMeta func(map[string]any)
		switch p := req.GetParams().(type) {
		case *mcp.CallToolParams:
			if p != nil {
				target, meta, setMeta = p.Name, p.GetMeta, p.SetMeta
			}
		case *mcp.ListToolsParams:
			if p != nil {
				meta, setMeta = p.GetMeta, p.SetMeta
			}
		}
		if target != "" {
			name += " " + target
		}
		attrs := []attribute.KeyValue{attrMCPMethod.String(method), semconv.NetworkTransportKey.String(s.transport)}
		if sess, ok := req.GetSession().(*mcp.ClientSession); ok && sess != nil {
			if id := sess.ID(); id != "" {
				attrs = append(attrs, attrMCPSession.String(id))
			}
			if ir := sess.InitializeResult(); ir != nil {
				attrs = append(attrs, attrMCPProtocolVersion.String(ir.ProtocolVersion))
			}
		}
		if target != "" {
			attrs = append(attrs, telemetry.GenAIToolName.String(target), telemetry.GenAIOperationName.String(telemetry.OpExecuteTool))
		}
		ctx, span := s.h.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		defer span.End()
		if meta != nil {
			carrier := propagation.MapCarrier{}
			traceContext.Inject(ctx, carrier)
			m := meta()
			if m == nil {
				m = map[string]any{}
			}
			for k, v := range carrier {
				m[k] = v
			}
			setMeta(m)
		}
		res, err := next(ctx, method, req)
		var werr *jsonrpc.Error
		switch {
		case errors.As(err, &werr):
			code := strconv.FormatInt(werr.Code, 10)
			span.SetAttributes(semconv.ErrorTypeKey.String(code), attrRPCStatusCode.String(code))
			span.SetStatus(codes.Error, "JSON-RPC error "+code)
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			span.SetAttributes(semconv.ErrorTypeKey.String("cancelled"))
			span.SetStatus(codes.Error, "cancelled")
		case err != nil:
			span.SetAttributes(semconv.ErrorTypeKey.String("transport"))
			span.SetStatus(codes.Error, "transport")
		default:
			if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
				span.SetAttributes(semconv.ErrorTypeKey.String("tool_error"))
				span.SetStatus(codes.Error, "tool_error")
			}
		}
		return res, err
	}
}
