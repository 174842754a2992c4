package protocol_test

import (
	"testing"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

func TestApprovalNames(t *testing.T) {
	t.Parallel()
	n, err := protocol.NewNames("capstan")
	require.NoError(t, err)
	require.Equal(t, "capstan_approvals", n.ApprovalsBucket())
	s, err := n.ApprovalSubject("ops", "c1")
	require.NoError(t, err)
	require.Equal(t, "capstan.approval.decide.ops.c1", s)
	s, err = n.ApprovalSelfSubject("ops", "c1")
	require.NoError(t, err)
	require.Equal(t, "capstan.approval.self.ops.c1", s)
	_, err = n.ApprovalSubject("o.ps", "c1")
	require.ErrorContains(t, err, "personality")
	_, err = n.ApprovalSelfSubject("ops", "c*")
	require.ErrorContains(t, err, "call_id")
	require.Equal(t, "capstan.approval.*.*.*", n.ApprovalRequestsFilter())

	for _, tc := range []struct {
		subject string
		self    bool
		ok      bool
	}{
		{"capstan.approval.decide.ops.c1", false, true},
		{"capstan.approval.self.ops.c1", true, true},
		{"capstan.approval.other.ops.c1", false, false},
		{"capstan.approval.decide.ops", false, false},
		{"capstan.approval.decide.ops.c1.x", false, false},
		{"other.approval.decide.ops.c1", false, false},
	} {
		self, p, c, err := n.ParseApprovalSubject(tc.subject)
		if !tc.ok {
			require.Error(t, err, tc.subject)
			continue
		}
		require.NoError(t, err, tc.subject)
		require.Equal(t, tc.self, self)
		require.Equal(t, "ops", p)
		require.Equal(t, "c1", c)
	}

	require.Equal(t, "hold.ops.c1", protocol.HoldKey("ops", "c1"))
	require.Equal(t, "decision.ops.c1", protocol.DecisionKey("ops", "c1"))
	kind, p, c, err := protocol.ParseApprovalKey("decision.ops.c1")
	require.NoError(t, err)
	require.Equal(t, []string{"decision", "ops", "c1"}, []string{kind, p, c})
	for _, bad := range []string{"hold.ops", "other.ops.c1", "hold.o*.c1", "hold.ops.c1.x"} {
		_, _, _, err := protocol.ParseApprovalKey(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, "c1.decided", protocol.DecidedCallMsgID("c1"))
	require.Equal(t, "c1.approval", protocol.ApprovalAuditMsgID("c1"))
}
