package worker_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/worker"
	"github.com/stretchr/testify/require"
)

// These tests speak the raw wire protocol of version 2 (security.md section
// 3): the personality is the call subject's fourth token, and results,
// progress and cancels carry it too.

// publishV2 publishes body on <p>.call.default.<personality>.<tool> with
// Capstan-Protocol: 2.
func (e *env) publishV2(personality, toolName, body, msgID string) {
	e.t.Helper()
	subject := e.names.Prefix() + ".call.default." + personality + "." + toolName
	_, err := e.conn.Publish(ctxT(e.t), subject, []byte(body), bus.Header{protocol.HeaderProtocol: {"2"}}, msgID)
	require.NoError(e.t, err)
}

// decodeResult decodes a result message.
func decodeResult(t *testing.T, m *bus.Msg) protocol.Result {
	t.Helper()
	var r protocol.Result
	require.NoError(t, json.Unmarshal(m.Data, &r))
	return r
}

// TestPersonalityMismatchIsRefused (regression): a call published under
// personality alpha whose body claims beta is refused with input_invalid and
// the exact message, on alpha's result subject, with an audit record naming
// alpha; it never runs as beta.
func TestPersonalityMismatchIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPersonality("alpha", "id: alpha\n")
	e.putPersonality("beta", "id: beta\n")
	e.start(worker.Config{})
	results := e.tail(e.names.ResultsStream(), "capstan.result.>")
	audit := e.tail(e.names.AuditStream(), "capstan.audit.>")
	e.publishV2("alpha", "echo", `{"call_id":"pm1","batch_id":"b1","tool":"echo","args":{"text":"x"},"session_id":"s","personality_id":"beta"}`, "pm1")

	m := recv(t, results)
	require.Equal(t, "capstan.result.alpha.b1.pm1", m.Subject)
	require.Equal(t, "2", m.Header.Get(protocol.HeaderProtocol))
	r := decodeResult(t, m)
	require.False(t, r.OK)
	require.Equal(t, protocol.CodeInputInvalid, r.Code)
	require.Equal(t, `personality_id "beta" does not match the subject's personality "alpha"`, r.Error)
	require.Zero(t, r.DurationMS)

	rec, _ := auditOn(t, audit, "pm1")
	require.Equal(t, "alpha", rec.PersonalityID)
	require.Equal(t, protocol.DecisionPersonality, rec.Decision)
	require.Equal(t, protocol.CodeInputInvalid, rec.Code)
	e.waitCallsDrained()
}

// TestBodyWithoutPersonalityTakesTheSubjects: a call without personality_id
// runs as the subject's personality (an unknown one is refused by its name),
// and its result, progress events and audit record carry it.
func TestBodyWithoutPersonalityTakesTheSubjects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPersonality("beta", "id: beta\n")
	e.start(worker.Config{})
	results := e.tail(e.names.ResultsStream(), "capstan.result.>")
	progress := e.tail(e.names.ProgressStream(), "capstan.progress.>")
	audit := e.tail(e.names.AuditStream(), "capstan.audit.>")

	e.publishV2("beta", "echo", `{"call_id":"np1","tool":"echo","args":{"text":"hi","progress":[{"message":"half","audience":"user"}]},"session_id":"s"}`, "np1")
	p := recv(t, progress)
	require.Equal(t, "capstan.progress.user.beta.np1.np1", p.Subject)
	require.Equal(t, "2", p.Header.Get(protocol.HeaderProtocol))
	m := recv(t, results)
	require.Equal(t, "capstan.result.beta.np1.np1", m.Subject)
	r := decodeResult(t, m)
	require.True(t, r.OK, r.Error)
	require.Equal(t, "hi", r.Value)
	rec, _ := auditOn(t, audit, "np1")
	require.Equal(t, "beta", rec.PersonalityID)
	require.Equal(t, "2", recv(t, e.tail(e.names.AuditStream(), "capstan.audit.>")).Header.Get(protocol.HeaderProtocol))

	e.publishV2("ghost", "echo", `{"call_id":"np2","tool":"echo","args":{"text":"hi"},"session_id":"s"}`, "np2")
	m = recv(t, results)
	require.Equal(t, "capstan.result.ghost.np2.np2", m.Subject)
	require.Equal(t, "Unknown personality: ghost", decodeResult(t, m).Error)
}

// TestCancelAppliesOnlyToItsPersonality (regression): a cancel published
// under personality beta cancels neither a running call of alpha with the
// same call id nor one that starts after it; a cancel under alpha does.
func TestCancelAppliesOnlyToItsPersonality(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.putPersonality("alpha", "id: alpha\n")
	e.putPersonality("beta", "id: beta\n")
	e.start(worker.Config{})
	results := e.tail(e.names.ResultsStream(), "capstan.result.>")

	// Running: beta's cancel arrives while alpha's call sleeps.
	started := e.tail(e.names.ProgressStream(), "capstan.progress.internal.alpha.same1.same1")
	e.publishV2("alpha", "echo", `{"call_id":"same1","tool":"echo","args":{"text":"kept","sleep_ms":1500,"progress":[{"message":"sleeping"}]},"session_id":"s"}`, "same1")
	recv(t, started)
	require.NoError(t, e.conn.PublishCore("capstan.cancel.beta.same1", []byte(`{"reason":"not yours"}`), nil))
	m := recv(t, results)
	require.Equal(t, "capstan.result.alpha.same1.same1", m.Subject)
	r := decodeResult(t, m)
	require.True(t, r.OK, "beta's cancel must not cancel alpha's call: %s", r.Error)
	require.Equal(t, "kept", r.Value)

	// Recorded before the call starts: beta's record does not stop alpha's call.
	kv, err := e.conn.KV(ctxT(t), bus.Cancels)
	require.NoError(t, err)
	require.NoError(t, e.conn.PublishCore("capstan.cancel.beta.same2", nil, nil))
	require.Eventually(t, func() bool {
		keys, err := kv.Keys(ctxT(t))
		if err != nil {
			return false
		}
		for _, k := range keys {
			if strings.HasSuffix(k, "same2") {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the worker records beta's cancel request")
	e.publishV2("alpha", "echo", `{"call_id":"same2","tool":"echo","args":{"text":"kept too"},"session_id":"s"}`, "same2")
	m = recv(t, results)
	require.Equal(t, "capstan.result.alpha.same2.same2", m.Subject)
	r = decodeResult(t, m)
	require.True(t, r.OK, "beta's recorded cancel must not cancel alpha's call: %s", r.Error)

	// Alpha's own cancel does.
	require.NoError(t, e.conn.PublishCore("capstan.cancel.alpha.same3", nil, nil))
	require.Eventually(t, func() bool {
		keys, err := kv.Keys(ctxT(t))
		if err != nil {
			return false
		}
		for _, k := range keys {
			if strings.HasSuffix(k, "same3") {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	e.publishV2("alpha", "echo", `{"call_id":"same3","tool":"echo","args":{"text":"x"},"session_id":"s"}`, "same3")
	m = recv(t, results)
	require.Equal(t, "capstan.result.alpha.same3.same3", m.Subject)
	require.Equal(t, "cancelled: by request", decodeResult(t, m).Error)
}
