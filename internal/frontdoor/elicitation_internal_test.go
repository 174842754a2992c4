package frontdoor

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/wire"
)

// TestDecisionOf: every elicitation answer and the decision it gives.
func TestDecisionOf(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", approval.MaxReason+20)
	cases := []struct {
		name    string
		res     mcp.ElicitResult
		approve bool
		reason  string
		ok      bool
	}{
		{"accept approve", mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, true, "", true},
		{"accept approve with reason", mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true, "reason": " ok\tby me\n"}}, true, "ok by me", true},
		{"accept deny", mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": false, "reason": "no"}}, false, "no", true},
		{"accept deny without reason", mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": false}}, false, DeclinedReason, true},
		{"accept without approve", mcp.ElicitResult{Action: "accept"}, false, DeclinedReason, true},
		{"accept approve not a boolean", mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": "true"}}, false, DeclinedReason, true},
		{"accept long reason cut", mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": false, "reason": long}}, false, long[:2*approval.MaxReason], true},
		{"decline", mcp.ElicitResult{Action: "decline", Content: map[string]any{"approve": true}}, false, DeclinedReason, true},
		{"cancel", mcp.ElicitResult{Action: "cancel"}, false, CancelledReason, true},
		{"unknown action", mcp.ElicitResult{Action: "maybe"}, false, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			approve, reason, ok := decisionOf(&tc.res)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.approve, approve)
			require.Equal(t, tc.reason, reason)
			if ok && !approve {
				r := approval.Request{Decision: wire.ApprovalDenied, Reason: reason, By: DefaultDecider}
				require.NoError(t, r.Check(), "a denial the workers accept")
			}
		})
	}
}

// TestApprovalQuestion: the question names the tool, the arguments, the
// reach, the call and the expiry, and cuts long arguments and lists.
func TestApprovalQuestion(t *testing.T) {
	t.Parallel()
	exp := time.Date(2026, 5, 4, 3, 2, 1, 0, time.UTC)
	hosts := make([]string, maxQuestionList+2)
	for i := range hosts {
		hosts[i] = "h" + string(rune('a'+i)) + ".example.com"
	}
	cases := []struct {
		name    string
		req     client.ApprovalRequest
		want    []string
		notWant []string
	}{
		{"plain", client.ApprovalRequest{CallID: "C1", Tool: "http_request", ExpiresAt: exp,
			Summary: wire.ApprovalSummary{Args: json.RawMessage(`{ "method": "POST",  "url": "https://api.example.com/pay" }`),
				Grant: wire.ApprovalGrant{Hosts: []string{"api.example.com"}, Secrets: []string{"providers/pay/token"}}}},
			[]string{"tool http_request", `Arguments: {"method":"POST","url":"https://api.example.com/pay"}`,
				"Reach: hosts: api.example.com; secrets: providers/pay/token.", "Call C1", "expires at 2026-05-04T03:02:01Z"}, nil},
		{"no reach, no args", client.ApprovalRequest{CallID: "C2", Tool: "echo"},
			[]string{"Arguments: (none)", "Reach: nothing beyond the tool itself"}, []string{"expires"}},
		{"long", client.ApprovalRequest{CallID: "C3", Tool: "echo",
			Summary: wire.ApprovalSummary{Args: json.RawMessage(`{"text":"` + strings.Repeat("x", 3*maxQuestionArgs) + `"}`),
				Grant: wire.ApprovalGrant{Hosts: hosts, ReadPaths: []string{"/srv"}, WritePaths: []string{"/tmp/o"}, Binaries: []string{"git"}, KV: []string{"notes"}}}},
			[]string{"… (cut)", " and 2 more", "reads: /srv", "writes: /tmp/o", "runs: git", "key-value: notes"}, []string{hosts[maxQuestionList]}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := approvalQuestion(tc.req)
			for _, w := range tc.want {
				require.Contains(t, q, w)
			}
			for _, w := range tc.notWant {
				require.NotContains(t, q, w)
			}
			require.Less(t, len([]rune(q)), maxQuestionArgs+1000)
		})
	}
}

// TestRequestStates: a state opens only as sealed by the same front door.
func TestRequestStates(t *testing.T) {
	t.Parallel()
	s := newRequestStates()
	h := heldState{Personality: "p", Session: "stdio-1", CallID: "C1", ArgsSHA256: "ab", Tool: "echo"}
	state := s.seal(h)
	got, err := s.open(state)
	require.NoError(t, err)
	require.Equal(t, h, got)

	payload, sig, _ := strings.Cut(state, ".")
	other := heldState{Personality: "p", Session: "stdio-1", CallID: "C2", ArgsSHA256: "ab", Tool: "echo"}
	otherPayload, _, _ := strings.Cut(s.seal(other), ".")
	for name, bad := range map[string]string{
		"empty":              "",
		"no signature":       payload,
		"other payload":      otherPayload + "." + sig,
		"another front door": newRequestStates().seal(h),
		"bad base64":         "!!." + sig,
	} {
		_, err := s.open(bad)
		require.ErrorIs(t, err, errBadState, name)
	}
}

// FuzzRequestStateOpen: open never panics, and what it accepts is what seal
// gave.
func FuzzRequestStateOpen(f *testing.F) {
	s := newRequestStates()
	f.Add(s.seal(heldState{Personality: "p", Session: "s", CallID: "C", ArgsSHA256: "h", Tool: "t"}))
	f.Add("")
	f.Add("a.b")
	f.Add("e30.")
	f.Fuzz(func(t *testing.T, state string) {
		h, err := s.open(state)
		if err == nil {
			require.Equal(t, state, s.seal(h))
		}
	})
}
