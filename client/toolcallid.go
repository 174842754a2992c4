package client

import "context"

type toolCallIDsKey struct{}

// WithToolCallIDs returns ctx carrying the model provider's tool-call ids of
// calls whose Capstan call_id differs from them, keyed by call_id: the
// producer span of each such call published under ctx (Submit,
// ExecuteParallel, Collect) records the provider's id as gen_ai.tool.call.id
// instead of the call_id (which stays in messaging.message.id). The envelope
// package sets it; ids maps call_id to provider id and must not be changed
// afterwards.
func WithToolCallIDs(ctx context.Context, ids map[string]string) context.Context {
	return context.WithValue(ctx, toolCallIDsKey{}, ids)
}

// toolCallID returns the provider's id of call callID carried by ctx, or
// callID itself.
func toolCallID(ctx context.Context, callID string) string {
	if ids, ok := ctx.Value(toolCallIDsKey{}).(map[string]string); ok {
		if id, ok := ids[callID]; ok && id != "" {
			return id
		}
	}
	return callID
}
