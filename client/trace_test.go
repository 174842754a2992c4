package client_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/capstanhq/capstan/internal/telemetry/telemetrytest"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestSubmitStartsAProducerSpan checks the producer span of a call and the
// trace context in its headers.
func TestSubmitStartsAProducerSpan(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	tp, rec := telemetrytest.Tracing(t)
	c, err := client.New(ctxT(t), client.Config{NATSURL: url, NATSCreds: bustest.Creds(url), Name: t.Name(), TracerProvider: tp})
	require.NoError(t, err)
	t.Cleanup(c.Close)

	// The caller's own span (an LLM turn, say) is the producer span's parent,
	// and its baggage stays in the process.
	ctx, turn := tp.Tracer("agent").Start(ctxT(t), "turn")
	m, err := baggage.NewMember("user", "alice")
	require.NoError(t, err)
	b, err := baggage.New(m)
	require.NoError(t, err)
	ctx = baggage.ContextWithBaggage(ctx, b)
	call := client.Call{CallID: "c1", BatchID: "b1", Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"top secret argument"}`)}
	require.NoError(t, c.Submit(ctx, &call))
	turn.End()

	var producer sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "send capstan.call.default.default.echo" {
			producer = s
		}
	}
	require.NotNil(t, producer, "producer span")
	require.Equal(t, trace.SpanKindProducer, producer.SpanKind())
	require.Equal(t, turn.SpanContext().SpanID(), producer.Parent().SpanID())
	attrs := map[string]string{}
	for _, kv := range producer.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
		require.NotContains(t, kv.Value.String(), "top secret argument")
	}
	require.Equal(t, map[string]string{
		"messaging.system": "nats", "messaging.operation.type": "send", "messaging.operation.name": "send",
		"messaging.destination.name": "capstan.call.default.default.echo", "messaging.message.id": "c1",
		"messaging.message.body.size": attrs["messaging.message.body.size"],
		"gen_ai.tool.name":            "echo", "gen_ai.tool.call.id": "c1", "capstan.batch.id": "b1",
	}, attrs)

	msg, err := bustest.Conn(t, url, "").LastMsg(ctxT(t), "CAPSTAN_CALLS", "capstan.call.default.default.echo")
	require.NoError(t, err)
	sc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), msg.Header))
	require.True(t, sc.IsValid(), "traceparent header: %v", msg.Header)
	require.Equal(t, producer.SpanContext().SpanID(), sc.SpanID(), "the call carries the producer span's context")
	require.NotContains(t, msg.Header, "Traceparent")
	require.NotContains(t, msg.Header, protocol.HeaderBaggage, "baggage is never sent")
}
