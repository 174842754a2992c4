package console

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/approval"
)

// approvalTokens are the tokens of the approvals tests: an operator, a
// viewer, carol (an approver ops lists) and erin (an approver it does not).
var approvalTokens = []Token{
	{Token: operatorToken, Role: RoleOperator, Name: "alice"},
	{Token: viewerToken, Role: RoleViewer, Name: "bob"},
	{Token: approverToken, Role: RoleApprover, Name: "carol"},
	{Token: outsiderToken, Role: RoleApprover, Name: "erin"},
}

// postForm posts form to url with a bearer token, as htmx does when htmx
// is set, and returns the status and body.
func postForm(t *testing.T, url, token string, form url.Values, htmx bool) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), "POST", url, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if htmx {
		req.Header.Set("HX-Request", "true")
	}
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// holdCall submits an echo of text as personality ops and waits until the
// worker holds it.
func (e *env) holdCall(t *testing.T, text string) client.Hold {
	t.Helper()
	ops, err := e.client.WithPersonality("ops")
	require.NoError(t, err)
	call := client.Call{CallID: client.NewID(), Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"` + text + `"}`)}
	require.NoError(t, ops.Submit(ctxT(t), &call))
	var h client.Hold
	eventually(t, 30*time.Second, "call "+call.CallID+" to be held", func() bool {
		var found bool
		h, found, err = e.client.FindHold(ctxT(t), call.CallID)
		return err == nil && found
	})
	return h
}

// await returns the result of an ops call.
func (e *env) await(t *testing.T, callID string) client.Result {
	t.Helper()
	ops, err := e.client.WithPersonality("ops")
	require.NoError(t, err)
	r, err := ops.Await(ctxT(t), "", callID)
	require.NoError(t, err)
	return r
}

func TestApprovalsAccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, approvalTokens)
	sha := strings.Repeat("0", 64)
	for _, tc := range []struct {
		name, path, token string
		form              url.Values
		want              int
		body              string
	}{
		{"viewer may not approve", "/approvals/c1/approve", viewerToken, url.Values{"args_sha256": {sha}}, http.StatusForbidden,
			"forbidden: approve needs the approver role; token bob has role viewer"},
		{"viewer may not deny", "/approvals/c1/deny", viewerToken, url.Values{"reason": {"no"}}, http.StatusForbidden,
			"forbidden: deny needs the approver role; token bob has role viewer"},
		{"an operator does not decide", "/approvals/c1/approve", operatorToken, url.Values{"args_sha256": {sha}}, http.StatusForbidden,
			"forbidden: approve needs the approver role; token alice has role operator"},
		{"no token", "/approvals/c1/approve", "", url.Values{"args_sha256": {sha}}, http.StatusUnauthorized, "a token is required"},
		{"an approver may not cancel", "/calls/c1/cancel", approverToken, nil, http.StatusForbidden,
			"forbidden: cancel needs the operator role; token carol has role approver"},
		{"an approver may not redrive", "/dlq/c1/redrive", approverToken, nil, http.StatusForbidden, "redrive needs the operator role"},
		{"deny needs a reason", "/approvals/c1/deny", approverToken, url.Values{"reason": {"  "}}, http.StatusBadRequest,
			"deny c1: reason: is required to deny"},
		{"approve needs the hash", "/approvals/c1/approve", approverToken, nil, http.StatusBadRequest,
			"approve c1: args_sha256: is required to approve"},
		{"a reason of at most 500 characters", "/approvals/c1/deny", approverToken, url.Values{"reason": {strings.Repeat("x", 501)}},
			http.StatusBadRequest, "reason: must be at most 500 characters (it has 501)"},
		{"bad call id", "/approvals/a.b/approve", approverToken, url.Values{"args_sha256": {sha}}, http.StatusBadRequest, `call_id "a.b" must match`},
		{"a call that is not held", "/approvals/nothing-here/approve", approverToken, url.Values{"args_sha256": {sha}}, http.StatusConflict,
			"Refused: call nothing-here: no held call nothing-here"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, body := postForm(t, srv.URL+tc.path, tc.token, tc.form, true)
			require.Equal(t, tc.want, code, body)
			require.Contains(t, body, tc.body)
		})
	}

	code, body := do(t, "GET", srv.URL+"/approvals", viewerToken)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<a href="/approvals" aria-current="page">Approvals</a>`)
	require.Contains(t, body, "No call waits for a decision.")
	require.Contains(t, body, "Only a token of role approver approves and denies")
	code, body = do(t, "GET", srv.URL+"/approvals?personality=a.b", viewerToken)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, `personality "a.b" must match`)
}

func TestApproverApprovesAHeldCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, approvalTokens)
	h := e.holdCall(t, "pay")
	want, err := approval.ArgsSHA256("ops", "echo", json.RawMessage(`{"text":"pay"}`))
	require.NoError(t, err)
	require.Equal(t, want, h.ArgsSHA256)

	// A viewer sees the held call and its summary, without buttons.
	code, body := do(t, "GET", srv.URL+"/approvals", viewerToken)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-call="`+h.CallID+`" data-personality="ops"`)
	require.Contains(t, body, `<code class="sha">`+want+`</code>`)
	require.Contains(t, body, "<pre class=\"args\">{\n  &#34;text&#34;: &#34;pay&#34;\n}</pre>", "the arguments as formatted JSON")
	require.Contains(t, body, "<dt>Hosts</dt><dd><span class=\"muted\">none</span></dd>")
	require.NotContains(t, body, `hx-post="/approvals/`)
	require.NotContains(t, body, "Approve call")

	// The approver's page posts the hash it shows.
	code, body = do(t, "GET", srv.URL+"/approvals?personality=ops", approverToken)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<input type="hidden" name="args_sha256" value="`+want+`">`)
	require.Contains(t, body, `hx-post="/approvals/`+h.CallID+`/approve"`)
	require.Contains(t, body, `sse-connect="/events/approvals?personality=ops"`)
	code, body = do(t, "GET", srv.URL+"/approvals?personality=default", approverToken)
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, h.CallID, "filtered on the personality")

	// Refusals are shown: another hash, an approver the personality does
	// not list. The call stays held.
	approve := func(token, sha string) (int, string) {
		return postForm(t, srv.URL+"/approvals/"+h.CallID+"/approve", token, url.Values{"args_sha256": {sha}, "reason": {"ok"}}, true)
	}
	code, body = approve(approverToken, strings.Repeat("0", 64))
	require.Equal(t, http.StatusConflict, code, body)
	require.Equal(t, `<p class="error" role="alert">Refused: call `+h.CallID+`: approval does not match the call&#39;s arguments</p>`, body)
	code, body = approve(outsiderToken, want)
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "erin is not an approver of personality ops (approval.approvers)")

	code, body = approve(approverToken, want)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<p class="flash" role="status">Approved call `+h.CallID+` as carol`)
	r := e.await(t, h.CallID)
	require.True(t, r.OK, r.Error)
	require.Equal(t, "pay", r.Value)

	code, body = approve(approverToken, want)
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, "already approved by carol")

	// The history lists the decision; the call no longer waits.
	code, body = do(t, "GET", srv.URL+"/approvals", viewerToken)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<tr data-call="`+h.CallID+`" data-decision="approved">`)
	require.Contains(t, body, "<td>carol</td><td>ok</td>")
	require.NotContains(t, body, `<article class="hold" data-call="`+h.CallID+`"`)
}

func TestApproverDeniesWithAPlainForm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, approvalTokens)
	h := e.holdCall(t, "refund")
	code, body := postForm(t, srv.URL+"/approvals/"+h.CallID+"/deny", approverToken, url.Values{"reason": {"not this week"}}, false)
	require.Equal(t, http.StatusSeeOther, code, body)
	r := e.await(t, h.CallID)
	require.False(t, r.OK)
	require.Equal(t, "not_available", string(r.Code))
	require.Equal(t, "APPROVAL_DENIED: not this week", r.Error)

	// A refusal of a plain form is the page with the refusal on it.
	code, body = postForm(t, srv.URL+"/approvals/"+h.CallID+"/approve", approverToken, url.Values{"args_sha256": {h.ArgsSHA256}}, false)
	require.Equal(t, http.StatusConflict, code, body)
	require.Contains(t, body, `<p class="error" role="alert" id="refusal">Refused: call `+h.CallID+`: already denied by carol</p>`)
	require.Contains(t, body, `<tr data-call="`+h.CallID+`" data-decision="denied">`)
	require.Contains(t, body, "<td>not this week</td>")
}

func TestApprovalEventsFollowTheBucket(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, approvalTokens)
	req, err := http.NewRequestWithContext(ctxT(t), "GET", srv.URL+"/events/approvals?personality=ops", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+viewerToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	// next returns the data of the next "approvals" event.
	next := func() string {
		var data strings.Builder
		inEvent := false
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "event: approvals":
				inEvent = true
			case inEvent && line == "":
				return data.String()
			case inEvent:
				data.WriteString(strings.TrimPrefix(line, "data: ") + "\n")
			}
		}
		t.Fatalf("the event stream ended: %v", sc.Err())
		return ""
	}
	require.Contains(t, next(), "No call waits for a decision.", "the lists are sent when the stream opens")

	h := e.holdCall(t, "pay")
	for {
		if strings.Contains(next(), `<article class="hold" data-call="`+h.CallID+`"`) {
			break
		}
	}
	_, err = e.client.Deny(ctxT(t), h.CallID, "no", "dave")
	require.NoError(t, err)
	for {
		if strings.Contains(next(), `<tr data-call="`+h.CallID+`" data-decision="denied">`) {
			break
		}
	}
}

func TestConsoleWithoutTokensHasNoApprover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, nil)
	code, body := postForm(t, srv.URL+"/approvals/c1/approve", "", url.Values{"args_sha256": {strings.Repeat("0", 64)}}, true)
	require.Equal(t, http.StatusForbidden, code, body)
	require.Contains(t, body, "approve needs the approver role; token local has role operator (a console without tokens has no approver")
	code, body = do(t, "GET", srv.URL+"/approvals", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "This console has no tokens, hence no approver")
}

func TestApprovalPostsFromAnotherSiteAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, srv := e.serve(t, approvalTokens)
	req, err := http.NewRequestWithContext(ctxT(t), "POST", srv.URL+"/approvals/c1/deny", strings.NewReader("reason=x"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: cookieName, Value: approverToken})
	req.Header.Set("Origin", "http://evil.example")
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, string(b), "forbidden: cross-origin request")
}
