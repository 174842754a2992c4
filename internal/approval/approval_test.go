package approval_test

import (
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

func TestRequestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  approval.Request
		want string
	}{
		{"approve", approval.Request{Decision: "approved", ArgsSHA256: "ab", By: "a"}, ""},
		{"deny", approval.Request{Decision: "denied", Reason: "no", By: "a"}, ""},
		{"approve without hash", approval.Request{Decision: "approved", By: "a"}, "args_sha256: is required to approve"},
		{"deny without reason", approval.Request{Decision: "denied", Reason: "  ", By: "a"}, "reason: is required to deny"},
		{"other decision", approval.Request{Decision: "expired", By: "a"}, `decision: must be "approved" or "denied", not "expired"`},
		{"reason of 500 characters", approval.Request{Decision: "denied", Reason: strings.Repeat("é", 500), By: "a"}, ""},
		{"reason of 501 characters", approval.Request{Decision: "denied", Reason: strings.Repeat("é", 501), By: "a"}, "reason: must be at most 500 characters (it has 501)"},
		{"no name", approval.Request{Decision: "denied", Reason: "r"}, "by: is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.req.Check()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.want)
		})
	}
}

func TestMessages(t *testing.T) {
	t.Parallel()
	require.Equal(t, "APPROVAL_DENIED: too much", approval.Denied("too much"))
	require.Equal(t, "APPROVAL_EXPIRED: no decision within 1h", approval.Expired("1h"))
	require.Equal(t, "already approved by alice", approval.Already(&approval.Decision{Decision: "approved", By: "alice"}))
	require.Equal(t, "already expired", approval.Already(&approval.Decision{Decision: "expired"}))
	require.Equal(t, "no held call c1", approval.NotHeld("c1"))
}

func TestHoldDue(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	h := approval.HoldRecord{Hold: protocol.Hold{HeldAt: now, ExpiresAt: now.Add(time.Hour)}}
	at, d := h.Due()
	require.Equal(t, now.Add(time.Hour), at)
	require.Equal(t, protocol.ApprovalExpired, d)
	soon := now.Add(time.Minute)
	h.Deadline = &soon
	at, d = h.Due()
	require.Equal(t, soon, at)
	require.Equal(t, protocol.ApprovalDeadline, d)
	late := now.Add(2 * time.Hour)
	h.Deadline = &late
	_, d = h.Due()
	require.Equal(t, protocol.ApprovalExpired, d, "the expiry comes first")
}
