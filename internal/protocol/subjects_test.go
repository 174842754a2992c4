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
	s, err := n.CallSubject("default", "echo")
	require.NoError(t, err)
	require.Equal(t, "capstan.call.default.echo", s)
	pool, tool, err := n.ParseCallSubject(s)
	require.NoError(t, err)
	require.Equal(t, []string{"default", "echo"}, []string{pool, tool})
	_, _, err = n.ParseCallSubject("capstan.call.default.a.b")
	require.Error(t, err)
	s, err = n.ResultSubject("b", "c")
	require.NoError(t, err)
	require.Equal(t, "capstan.result.b.c", s)
	s, err = n.ProgressSubject(protocol.AudienceUser, "b", "c")
	require.NoError(t, err)
	require.Equal(t, "capstan.progress.user.b.c", s)
	_, err = n.ProgressSubject("admin", "b", "c")
	require.ErrorContains(t, err, `audience "admin" must be internal, user or dashboard`)
	s, err = n.ProgressTail(protocol.AudienceUser, "")
	require.NoError(t, err)
	require.Equal(t, "capstan.progress.user.*.*", s)
	s, err = n.CancelSubject("c")
	require.NoError(t, err)
	require.Equal(t, "capstan.cancel.c", s)
	id, err := n.ParseCancelSubject(s)
	require.NoError(t, err)
	require.Equal(t, "c", id)
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
		_, err := n.CallSubject("default", bad)
		require.Error(t, err, "tool %q must never reach a subject", bad)
		_, err = n.ResultSubject(bad, "c")
		require.Error(t, err)
	}
}
