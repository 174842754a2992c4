package frontdoor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/frontdoor"
	"github.com/capstanhq/capstan/internal/frontdoor/frontdoortest"
)

// tsClientDir holds the pinned official TypeScript SDK (package.json,
// package-lock.json; test.sh installs it with npm ci) and the client
// scripts these tests drive.
const tsClientDir = "testdata/ts-client"

// requireTSClient returns the path of node, skipping the test when Node.js
// or the pinned SDK is missing.
func requireTSClient(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the front door tests against the official TypeScript SDK client need Node.js")
	}
	if _, err := os.Stat(filepath.Join(tsClientDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Skipf("@modelcontextprotocol/sdk is not installed: run `npm ci` in internal/frontdoor/%s (test.sh does)", tsClientDir)
	}
	return node
}

// tsLine is one line printed by elicit.mjs.
type tsLine struct {
	Op     string          `json:"op"`
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error"`
}

// tsCallResult is a tools/call result as the TypeScript client returns it.
type tsCallResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	IsError bool           `json:"isError"`
	Meta    map[string]any `json:"_meta"`
}

// runElicitClient runs elicit.mjs with plan and returns its lines.
func runElicitClient(t *testing.T, node string, plan map[string]any) []tsLine {
	t.Helper()
	data, err := json.Marshal(plan)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "elicit.mjs", string(data))
	cmd.Dir = tsClientDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "elicit.mjs: %s", stderr.String())
	var lines []tsLine
	for line := range strings.Lines(string(out)) {
		var l tsLine
		require.NoError(t, json.Unmarshal([]byte(line), &l), "line %q (stderr: %s)", line, stderr.String())
		lines = append(lines, l)
	}
	return lines
}

// tsCall decodes the result of a call line.
func tsCall(t *testing.T, l tsLine) tsCallResult {
	t.Helper()
	require.Equal(t, "call", l.Op)
	require.Empty(t, l.Error)
	var r tsCallResult
	require.NoError(t, json.Unmarshal(l.Result, &r))
	require.Len(t, r.Content, 1)
	return r
}

// TestElicitationWithTheTypeScriptSDK drives the approval question with the
// official TypeScript SDK client (protocol 2025-11-25, elicitation/create)
// over streamable HTTP: a client that declared elicitation and accepts gets
// the call's result; one that declines gets the tool error APPROVAL_DENIED;
// a client without elicitation is not asked, and its call waits for an
// approver.
func TestElicitationWithTheTypeScriptSDK(t *testing.T) {
	t.Parallel()
	node := requireTSClient(t)
	e := newEnv(t, frontdoor.Config{})
	endpoint := e.httpFront()

	cases := []struct {
		name   string
		answer map[string]any
		want   string
	}{
		{"accept", map[string]any{"action": "accept", "content": map[string]any{"approve": true, "reason": "fine"}}, "ts accept"},
		{"decline", map[string]any{"action": "decline"}, "not_available: APPROVAL_DENIED: " + frontdoor.DeclinedReason},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := runElicitClient(t, node, map[string]any{"url": endpoint, "token": selfApprovalToken, "elicitation": true,
				"answer": tc.answer, "calls": []any{map[string]any{"name": "echo", "arguments": map[string]any{"text": "ts " + tc.name}}}})
			require.Len(t, out, 2, "one call and the elicitations: %+v", out)
			r := tsCall(t, out[0])
			require.Equal(t, tc.want, r.Content[0].Text)
			require.Equal(t, tc.name != "accept", r.IsError)

			var asked []struct {
				Message         string         `json:"message"`
				RequestedSchema map[string]any `json:"requestedSchema"`
			}
			require.NoError(t, json.Unmarshal(out[1].Result, &asked))
			require.Len(t, asked, 1, "asked once")
			require.Contains(t, asked[0].Message, "echo")
			require.Contains(t, asked[0].Message, `{"text":"ts `+tc.name+`"}`)
			require.Contains(t, asked[0].Message, r.Meta[frontdoor.MetaCallID])
			require.Contains(t, asked[0].RequestedSchema["properties"], frontdoor.ElicitApprove)
		})
	}

	t.Run("without elicitation", func(t *testing.T) {
		t.Parallel()
		done := make(chan []tsLine, 1)
		go func() {
			done <- runElicitClient(t, node, map[string]any{"url": endpoint, "token": selfApprovalToken, "elicitation": false,
				"calls": []any{map[string]any{"name": "echo", "arguments": map[string]any{"text": "ts not asked"}}}})
		}()
		hold := waitHold(t, e.c, frontdoortest.SelfApproval, "ts not asked")
		_, err := e.c.Approve(ctxT(t), hold.CallID, hold.ArgsSHA256, "", "test-approver")
		require.NoError(t, err)
		var out []tsLine
		select {
		case out = <-done:
		case <-ctxT(t).Done():
			t.Fatal("the client did not end")
		}
		require.Len(t, out, 2)
		r := tsCall(t, out[0])
		require.False(t, r.IsError, r.Content[0].Text)
		require.Equal(t, "ts not asked", r.Content[0].Text)
		require.JSONEq(t, "[]", string(out[1].Result), "not asked")
	})
}
