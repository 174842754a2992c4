package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

func TestDLQCommands(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url)}
	admin := bustest.Conn(t, url, "")

	code, stdout, stderr := runT(t, env, "", "dlq", "list")
	require.Equal(t, exitOK, code, stderr)
	require.Empty(t, stdout)
	require.Contains(t, stderr, "capstan: dlq list: the DLQ is empty")

	// Two dead letters as workers write them: an abandoned call and an
	// undecodable one.
	deadLetter := func(tool, body, callID, reason string) {
		h := bus.Header{
			protocol.HeaderProtocol:        {"1"},
			protocol.HeaderTraceparent:     {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			protocol.HeaderDeadReason:      {reason},
			protocol.HeaderDeliveries:      {"5"},
			protocol.HeaderOriginalSubject: {"capstan.call.default.default." + tool},
			protocol.HeaderDeadAt:          {"2026-11-23T10:00:00Z"},
		}
		if callID != "" {
			h.Set(protocol.HeaderMsgID, callID)
		}
		_, err := admin.Publish(ctxT(t), "capstan.dlq."+tool, []byte(body), h, "")
		require.NoError(t, err)
	}
	deadLetter("echo", `{"call_id":"c1","tool":"echo","args":{"text":"x"},"session_id":"s"}`, "c1", "secrets backend unavailable")
	deadLetter("echo", `not json`, "", "invalid call: body is not a JSON object")

	code, stdout, stderr = runT(t, env, "", "dlq", "list")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "SEQ  DEAD AT               TOOL  CALL ID  DELIVERIES  REASON\n"+
		"1    2026-11-23T10:00:00Z  echo  c1       5           secrets backend unavailable\n"+
		"2    2026-11-23T10:00:00Z  echo  -        5           invalid call: body is not a JSON object\n", stdout)

	code, stdout, stderr = runT(t, env, "", "dlq", "list", "--json")
	require.Equal(t, exitOK, code, stderr)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &listed))
	require.Len(t, listed, 2)
	require.Equal(t, "c1", listed[0]["call_id"])
	require.Equal(t, map[string]any{"call_id": "c1", "tool": "echo", "args": map[string]any{"text": "x"}, "session_id": "s"}, listed[0]["body"])
	require.Equal(t, "not json", listed[1]["body"])

	code, stdout, stderr = runT(t, env, "", "dlq", "show", "c1")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "dead letter 1 (subject capstan.dlq.echo)\n")
	require.Contains(t, stdout, "Capstan-Dead-Reason: secrets backend unavailable\n")
	require.Contains(t, stdout, "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n")
	require.Contains(t, stdout, "\n\n"+`{"call_id":"c1","tool":"echo","args":{"text":"x"},"session_id":"s"}`+"\n")

	code, _, stderr = runT(t, env, "", "dlq", "show", "nope")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "capstan: dlq show: no dead letter for call nope")
	code, _, stderr = runT(t, env, "", "dlq", "redrive", "nope")
	require.Equal(t, exitFailed, code)
	require.Contains(t, stderr, "capstan: dlq redrive: no dead letter for call nope")

	code, stdout, stderr = runT(t, env, "", "dlq", "redrive", "c1")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "redriven call c1 to capstan.call.default.default.echo\n", stdout)
	pool, err := admin.PoolConsumer(ctxT(t), "default", 5, bus.DefaultAckWait)
	require.NoError(t, err)
	var m *bus.Msg
	n, err := pool.Fetch(ctxT(t), 1, 10*time.Second, func(got *bus.Msg) { m = got })
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "capstan.call.default.default.echo", m.Subject)
	require.Equal(t, "1", m.Header.Get(protocol.HeaderRedrive))
	require.Equal(t, "c1.redrive-1", m.Header.Get(protocol.HeaderMsgID))
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", m.Header.Get(protocol.HeaderTraceparent))
	require.Empty(t, m.Header.Get(protocol.HeaderDeadReason))
	require.JSONEq(t, `{"call_id":"c1","tool":"echo","args":{"text":"x"},"session_id":"s"}`, string(m.Data))

	code, stdout, _ = runT(t, env, "", "dlq", "list", "--json")
	require.Equal(t, exitOK, code)
	require.NoError(t, json.Unmarshal([]byte(stdout), &listed))
	require.Len(t, listed, 1, "the redriven dead letter left the DLQ")
}

func TestDLQUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq"}, "capstan: dlq: expected list, show <call_id> or redrive <call_id>"},
		{[]string{"dlq", "purge"}, `capstan: dlq: unknown subcommand "purge" (expected list, show or redrive)`},
		{[]string{"dlq", "list", "x"}, "capstan: dlq list: expected no arguments"},
		{[]string{"dlq", "show"}, "capstan: dlq show: expected one call_id"},
		{[]string{"dlq", "redrive", "a.b"}, `capstan: dlq redrive: call_id "a.b" must match`},
	} {
		code, stdout, stderr := runT(t, nil, "", tc.args...)
		require.Equal(t, exitUsage, code, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, tc.want)
	}
}
