package protocol_test

import (
	"testing"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

func TestValidToken(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "A-z_0", "call-123_x"} {
		require.True(t, protocol.ValidToken(ok), ok)
	}
	for _, bad := range []string{"", "a.b", "*", ">", "a b", "é", "a\n", string(make([]byte, 129))} {
		require.False(t, protocol.ValidToken(bad), "%q", bad)
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	n, err := protocol.NewNames("")
	require.NoError(t, err)
	require.Equal(t, "CAPSTAN_CALLS", n.CallsStream())
	require.Equal(t, "capstan_tools", n.ToolsBucket())
	require.Equal(t, "capstan_personalities", n.PersonalitiesBucket())
	s, err := n.CallSubject("default", "researcher", "echo")
	require.NoError(t, err)
	require.Equal(t, "capstan.call.default.researcher.echo", s)
	ct, err := n.ParseCallSubject(s)
	require.NoError(t, err)
	require.Equal(t, protocol.CallTokens{Pool: "default", Personality: "researcher", Tool: "echo"}, ct)
	_, err = n.ParseCallSubject("capstan.call.default.a.b.c")
	require.ErrorContains(t, err, `subject "capstan.call.default.a.b.c" is not <prefix>.call.<pool>.<personality>.<tool>`)
	_, err = n.ParseCallSubject("capstan.call.default.echo")
	require.ErrorContains(t, err, "a call of protocol version 1?")
	_, err = n.ParseCallSubject("capstan.call.default.a b.echo")
	require.Error(t, err)
	s, err = n.ResultSubject("researcher", "b", "c")
	require.NoError(t, err)
	require.Equal(t, "capstan.result.researcher.b.c", s)
	s, err = n.BatchResultsFilter("researcher", "b")
	require.NoError(t, err)
	require.Equal(t, "capstan.result.researcher.b.>", s)
	s, err = n.BatchResultsFilter("researcher", "")
	require.NoError(t, err)
	require.Equal(t, "capstan.result.researcher.>", s)
	s, err = n.CallResultFilter("researcher", "c")
	require.NoError(t, err)
	require.Equal(t, "capstan.result.researcher.*.c", s)
	s, err = n.ProgressSubject(protocol.AudienceUser, "researcher", "b", "c")
	require.NoError(t, err)
	require.Equal(t, "capstan.progress.user.researcher.b.c", s)
	_, err = n.ProgressSubject("admin", "researcher", "b", "c")
	require.ErrorContains(t, err, `audience "admin" must be internal, user or dashboard`)
	s, err = n.ProgressTail(protocol.AudienceUser, "researcher", "")
	require.NoError(t, err)
	require.Equal(t, "capstan.progress.user.researcher.*.*", s)
	s, err = n.ProgressTail("", "researcher", "b")
	require.NoError(t, err)
	require.Equal(t, "capstan.progress.*.researcher.b.*", s)
	_, err = n.ProgressTail("", "", "b")
	require.ErrorContains(t, err, "personality must not be empty")
	s, err = n.CancelSubject("researcher", "c")
	require.NoError(t, err)
	require.Equal(t, "capstan.cancel.researcher.c", s)
	require.Equal(t, "capstan.cancel.*.*", n.CancelFilter())
	pers, id, err := n.ParseCancelSubject(s)
	require.NoError(t, err)
	require.Equal(t, []string{"researcher", "c"}, []string{pers, id})
	for _, bad := range []string{"capstan.cancel.c", "capstan.cancel.a.b.c", "capstan.cancel..c", "other.cancel.a.c"} {
		_, _, err = n.ParseCancelSubject(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, `personality_id "beta" does not match the subject's personality "alpha"`, protocol.PersonalityMismatch("beta", "alpha"))
	s, err = n.DLQSubject("echo")
	require.NoError(t, err)
	require.Equal(t, "capstan.dlq.echo", s)
	s, err = n.AuditSubject("echo")
	require.NoError(t, err)
	require.Equal(t, "capstan.audit.echo", s)
	require.Equal(t, "c.result", protocol.ResultMsgID("c"))

	other, err := protocol.NewNames("acme")
	require.NoError(t, err)
	require.Equal(t, "ACME_RESULTS", other.ResultsStream())
	_, err = protocol.NewNames("a.b")
	require.Error(t, err)

	for _, bad := range []string{"a.b", "*", ">", "a b", ""} {
		_, err := n.CallSubject("default", "p", bad)
		require.Error(t, err, "tool %q must never reach a subject", bad)
		_, err = n.CallSubject("default", bad, "echo")
		require.Error(t, err, "personality %q must never reach a subject", bad)
		_, err = n.ResultSubject("p", bad, "c")
		require.Error(t, err)
		_, err = n.ResultSubject(bad, "b", "c")
		require.Error(t, err)
		_, err = n.CancelSubject(bad, "c")
		require.Error(t, err)
		_, err = n.ProgressSubject(protocol.AudienceUser, bad, "b", "c")
		require.Error(t, err)
	}
}

func TestPersonalityConsumerNames(t *testing.T) {
	t.Parallel()
	n, err := protocol.NewNames("capstan")
	require.NoError(t, err)
	f, err := n.PersonalityFilter("default", "researcher")
	require.NoError(t, err)
	require.Equal(t, "capstan.call.default.researcher.>", f)
	_, err = n.PersonalityFilter("default", "a.b")
	require.Error(t, err)
	w, err := n.PoolWaitingFilter("batch")
	require.NoError(t, err)
	require.Equal(t, "capstan.call.batch.*.*", w)
	name := protocol.PersonalityConsumer("default", "re_search-1")
	require.Equal(t, "default~re_search-1", name)
	pool, p, ok := protocol.ParsePersonalityConsumer(name)
	require.True(t, ok)
	require.Equal(t, "default", pool)
	require.Equal(t, "re_search-1", p)
	for _, bad := range []string{"default", "abandoned", "~x", "x~", "a~b~c", "a b~c"} {
		_, _, ok := protocol.ParsePersonalityConsumer(bad)
		require.False(t, ok, bad)
	}
}
