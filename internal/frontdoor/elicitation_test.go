package frontdoor_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/frontdoor"
	"github.com/capstanhq/capstan/internal/frontdoor/frontdoortest"
)

// elicitations records the approval questions a Go SDK client gets and
// answers each with answer.
type elicitations struct {
	answer *mcp.ElicitResult

	mu  sync.Mutex
	got []*mcp.ElicitParams
}

func (el *elicitations) options() *mcp.ClientOptions {
	return &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		el.mu.Lock()
		el.got = append(el.got, req.Params)
		el.mu.Unlock()
		return el.answer, nil
	}}
}

func (el *elicitations) count() int {
	el.mu.Lock()
	defer el.mu.Unlock()
	return len(el.got)
}

// TestElicitationDecidesAHeldCall checks that a held call of a personality
// with approval.self is asked of a client that declared elicitation, once,
// naming the tool and its arguments, and that the answer decides it:
// approved → the ordinary result; denied, declined or cancelled → the tool
// error APPROVAL_DENIED with the reason. The decision carries the token's
// name (HTTP) or "mcp client" (stdio).
func TestElicitationDecidesAHeldCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	endpoint := e.httpFront()

	cases := []struct {
		name    string
		answer  *mcp.ElicitResult
		want    string // the result's text
		isError bool
	}{
		{"accept approve", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true, "reason": "looks right"}}, "", false},
		{"accept deny with reason", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": false, "reason": "not\nthis  one"}},
			"not_available: APPROVAL_DENIED: not this one", true},
		{"accept deny without reason", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": false}},
			"not_available: APPROVAL_DENIED: " + frontdoor.DeclinedReason, true},
		{"decline", &mcp.ElicitResult{Action: "decline"}, "not_available: APPROVAL_DENIED: " + frontdoor.DeclinedReason, true},
		{"cancel", &mcp.ElicitResult{Action: "cancel"}, "not_available: APPROVAL_DENIED: " + frontdoor.CancelledReason, true},
	}
	for _, transport := range []string{"stdio", "http"} {
		for _, tc := range cases {
			t.Run(transport+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				el := &elicitations{answer: tc.answer}
				var cs *mcp.ClientSession
				by := frontdoor.DefaultDecider
				if transport == "stdio" {
					cs = e.stdio(frontdoortest.SelfApproval, el.options())
				} else {
					cs = e.httpSession(endpoint, selfApprovalToken, el.options())
					by = selfApprovalName
				}
				msg := transport + " " + tc.name
				res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": msg}})
				require.NoError(t, err)
				want := tc.want
				if want == "" {
					want = msg
				}
				require.Equal(t, tc.isError, res.IsError, text(t, res))
				require.Equal(t, want, text(t, res))

				require.Equal(t, 1, el.count(), "asked once")
				q := el.got[0]
				require.Contains(t, q.Message, "echo")
				require.Contains(t, q.Message, `{"text":"`+msg+`"}`)
				callID, _ := res.Meta[frontdoor.MetaCallID].(string)
				require.Contains(t, q.Message, callID)

				decisions, err := e.c.Decisions(ctxT(t), frontdoortest.SelfApproval)
				require.NoError(t, err)
				var found bool
				for _, d := range decisions {
					if d.Hold.CallID == callID {
						found = true
						require.Equal(t, by, d.By)
					}
				}
				require.True(t, found, "the decision of %s is stored", callID)
			})
		}
	}
}

// TestNoElicitationWithoutSelfOrCapability checks that nothing is asked
// when the personality does not set approval.self, or when the client did
// not declare elicitation: the call waits for an approver, whose decision
// the result then follows.
func TestNoElicitationWithoutSelfOrCapability(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	e := newEnv(t, frontdoor.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	endpoint := e.httpFront()
	t.Cleanup(func() { // after the parallel subtests
		require.NotContains(t, logs.String(), "asking the MCP client")
	})

	cases := []struct {
		name        string
		personality string
		connect     func(opts *mcp.ClientOptions) *mcp.ClientSession
		elicits     bool // the client declares elicitation
	}{
		{"self without elicitation, stdio", frontdoortest.SelfApproval,
			func(o *mcp.ClientOptions) *mcp.ClientSession { return e.stdio(frontdoortest.SelfApproval, o) }, false},
		{"self without elicitation, http", frontdoortest.SelfApproval,
			func(o *mcp.ClientOptions) *mcp.ClientSession { return e.httpSession(endpoint, selfApprovalToken, o) }, false},
		{"elicitation without self, stdio", frontdoortest.OthersApprove,
			func(o *mcp.ClientOptions) *mcp.ClientSession { return e.stdio(frontdoortest.OthersApprove, o) }, true},
		{"elicitation without self, http", frontdoortest.OthersApprove,
			func(o *mcp.ClientOptions) *mcp.ClientSession { return e.httpSession(endpoint, othersApproveToken, o) }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			el := &elicitations{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
			var opts *mcp.ClientOptions
			if tc.elicits {
				opts = el.options()
			}
			cs := tc.connect(opts)
			msg := "wait for an approver: " + tc.name
			type outcome struct {
				res *mcp.CallToolResult
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": msg}})
				done <- outcome{res, err}
			}()

			hold := waitHold(t, e.c, tc.personality, msg)
			select {
			case o := <-done:
				t.Fatalf("the held call answered before a decision: %+v %v", o.res, o.err)
			default:
			}
			_, err := e.c.Approve(ctxT(t), hold.CallID, hold.ArgsSHA256, "", "test-approver")
			require.NoError(t, err)
			var o outcome
			select {
			case o = <-done:
			case <-ctxT(t).Done():
				t.Fatal("no result after the approval")
			}
			require.NoError(t, o.err)
			require.False(t, o.res.IsError, text(t, o.res))
			require.Equal(t, msg, text(t, o.res))
			require.Zero(t, el.count(), "the client was not asked")
		})
	}
}

// waitHold waits up to 20s for the held call of personality whose
// arguments' summary contains text.
func waitHold(t *testing.T, c *client.Client, personality, text string) client.Hold {
	t.Helper()
	var hold client.Hold
	require.Eventually(t, func() bool {
		holds, err := c.Holds(ctxT(t), personality)
		if err != nil {
			return false
		}
		for _, h := range holds {
			if strings.Contains(string(h.Summary.Args), text) {
				hold = h
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "no call of %s held", personality)
	return hold
}

// syncBuffer is a bytes.Buffer safe for concurrent writes (a log handler's
// output).
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestInputRequiredAskedInTheResult checks the exchange of a client of
// protocol 2026-07-28 (which a server may not send requests while it waits)
// step by step, with the Go SDK's automatic retry turned off: the held call
// is answered "input required" with the approval question and a request
// state; a retry with a state that is not the front door's, for another
// tool, or without the answer is refused as invalid params; the retry with
// the answer decides the call and gets its result, and publishes no second
// call.
func TestInputRequiredAskedInTheResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t, frontdoor.Config{})
	rec := e.recordCalls()
	el := &elicitations{answer: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	opts := el.options()
	opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
	cs := e.stdio(frontdoortest.SelfApproval, opts)
	require.GreaterOrEqual(t, cs.InitializeResult().ProtocolVersion, "2026-07-28")

	args := map[string]any{"text": "asked in the result"}
	res, err := cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: args})
	require.NoError(t, err)
	require.True(t, res.NeedsInput(), "input required")
	callID, _ := res.Meta[frontdoor.MetaCallID].(string)
	require.NotEmpty(t, callID)
	q, ok := res.InputRequests[frontdoor.ApprovalInput].(*mcp.ElicitParams)
	require.True(t, ok, "the approval question under %s: %#v", frontdoor.ApprovalInput, res.InputRequests)
	require.Contains(t, q.Message, "echo")
	require.Contains(t, q.Message, `{"text":"asked in the result"}`)
	require.NotEmpty(t, res.RequestState)
	require.Zero(t, el.count(), "no elicitation/create request on this protocol")

	accept := mcp.InputResponseMap{frontdoor.ApprovalInput: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}}
	for name, params := range map[string]*mcp.CallToolParams{
		"forged state":   {Name: "echo", Arguments: args, InputResponses: accept, RequestState: res.RequestState[:len(res.RequestState)-2] + "AA"},
		"other tool":     {Name: frontdoortest.WhoAmI, InputResponses: accept, RequestState: res.RequestState},
		"without answer": {Name: "echo", Arguments: args, RequestState: res.RequestState},
	} {
		_, err := cs.CallTool(ctxT(t), params)
		var rpcErr *jsonrpc.Error
		require.ErrorAs(t, err, &rpcErr, name)
		require.EqualValues(t, jsonrpc.CodeInvalidParams, rpcErr.Code, name)
	}
	hold := waitHold(t, e.c, frontdoortest.SelfApproval, "asked in the result")
	require.Equal(t, callID, hold.CallID, "still held")

	res, err = cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "echo", Arguments: args, InputResponses: accept, RequestState: res.RequestState})
	require.NoError(t, err)
	require.False(t, res.IsError, text(t, res))
	require.Equal(t, "asked in the result", text(t, res))
	require.Equal(t, callID, res.Meta[frontdoor.MetaCallID])
	require.NoError(t, e.pool.Conn.Flush(ctxT(t)))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range rec.msgs {
		require.Equal(t, callID, m.call.CallID, "the retry published no call (the worker re-publishes the held one)")
	}
}
