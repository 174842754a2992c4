package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/protocol"
)

// cmdApprovals lists the calls held for approval and decides them
// (docs/approvals.md): exit 0 on success, 1 when the workers refuse a
// decision, 2 on usage or infrastructure errors.
func (a *app) cmdApprovals(ctx context.Context, args []string) int {
	fs := a.flags("approvals")
	asJSON := fs.Bool("json", false, "list: print a JSON array")
	personality := fs.String("personality", "", "list: only the holds of this personality")
	sum := fs.String("sha256", "", "approve: the args_sha256 of the held call (from approvals list), binding the approval to its arguments")
	reason := fs.String("reason", "", "approve: an optional note; deny: the reason (required, at most 500 characters), in the call's result")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) == 0 {
		a.errorf("approvals: expected list, approve <call_id> --sha256 <hash> or deny <call_id> --reason r")
		return exitUsage
	}
	verb := pos[0]
	if code, ok := a.checkApprovalArgs(verb, pos[1:], *personality, *sum, *reason); !ok {
		return code
	}
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()
	if verb == "list" {
		return a.approvalsList(ctx, c, *personality, *asJSON)
	}
	by := a.approverName()
	var d client.Decision
	if verb == "approve" {
		d, err = c.Approve(ctx, pos[1], *sum, *reason, by)
	} else {
		d, err = c.Deny(ctx, pos[1], *reason, by)
	}
	var refused *client.DecisionRefusedError
	switch {
	case errors.As(err, &refused):
		a.errorf("approvals %s: %s", verb, refused.Reason)
		return exitFailed
	case errors.Is(err, client.ErrNoWorker):
		a.errorf("approvals %s: no worker answers decision requests: start a worker (decisions are checked and stored by the workers)", verb)
		return exitUsage
	case err != nil:
		a.errorf("approvals %s: %v", verb, err)
		return exitUsage
	}
	fmt.Fprintf(a.stdout, "%s call %s by %s at %s\n", d.Decision, d.CallID, d.By, d.At.Format(time.RFC3339))
	return exitOK
}

// checkApprovalArgs checks the positional arguments and flags of a verb.
func (a *app) checkApprovalArgs(verb string, rest []string, personality, sum, reason string) (int, bool) {
	switch verb {
	case "list":
		if len(rest) != 0 {
			a.errorf("approvals list: expected no arguments")
			return exitUsage, false
		}
		if personality != "" {
			if err := protocol.CheckToken("--personality", personality); err != nil {
				a.errorf("approvals list: %v", err)
				return exitUsage, false
			}
		}
		return 0, true
	case "approve", "deny":
	default:
		a.errorf("approvals: unknown subcommand %q (expected list, approve or deny)", verb)
		return exitUsage, false
	}
	if len(rest) != 1 {
		a.errorf("approvals %s: expected one call_id", verb)
		return exitUsage, false
	}
	if err := protocol.CheckToken("call_id", rest[0]); err != nil {
		a.errorf("approvals %s: %v", verb, err)
		return exitUsage, false
	}
	req := approval.Request{Decision: protocol.ApprovalApproved, ArgsSHA256: sum, Reason: reason, By: "x"}
	if verb == "deny" {
		req.Decision, req.ArgsSHA256 = protocol.ApprovalDenied, ""
		if sum != "" {
			a.errorf("approvals deny: --sha256 is for approve only")
			return exitUsage, false
		}
	}
	if err := req.Check(); err != nil {
		msg := err.Error()
		msg = strings.Replace(msg, "args_sha256: is required to approve", "--sha256 <hash> is required (the args_sha256 of approvals list)", 1)
		msg = strings.Replace(msg, "reason: is required to deny", "--reason is required", 1)
		msg = strings.Replace(msg, "reason: ", "--reason ", 1)
		a.errorf("approvals %s: %s", verb, msg)
		return exitUsage, false
	}
	return 0, true
}

// approverName is the decider's name of this command: CAPSTAN_APPROVER_NAME,
// else the NATS user it connected as (the user of CAPSTAN_NATS_URL, or the
// name in its credentials file's JWT), else "local".
func (a *app) approverName() string {
	if n := strings.TrimSpace(a.getenv("CAPSTAN_APPROVER_NAME")); n != "" {
		return n
	}
	for _, u := range strings.Split(a.natsURL, ",") {
		if p, err := url.Parse(strings.TrimSpace(u)); err == nil && p.User != nil && p.User.Username() != "" {
			return p.User.Username()
		}
	}
	if n := jwtName(a.natsCreds); n != "" {
		return n
	}
	return "local"
}

// jwtName returns the name claim of the user JWT in a NATS credentials
// file, "" when there is none (an NKey seed file has no name).
func jwtName(path string) string {
	if path == "" {
		return ""
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	const begin = "-----BEGIN NATS USER JWT-----"
	_, rest, ok := strings.Cut(string(data), begin)
	if !ok {
		return ""
	}
	token, _, _ := strings.Cut(strings.TrimSpace(rest), "\n")
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	return claims.Name
}

// approvalsList prints the pending holds: a table, or with --json the
// array approvals.md fixes.
func (a *app) approvalsList(ctx context.Context, c *client.Client, personality string, asJSON bool) int {
	holds, err := c.Holds(ctx, personality)
	if err != nil {
		a.errorf("approvals list: %v", err)
		return exitUsage
	}
	if asJSON {
		if holds == nil {
			holds = []client.Hold{}
		}
		b, _ := marshalJSON(holds, true)
		_, _ = a.stdout.Write(b)
		return exitOK
	}
	if len(holds) == 0 {
		a.errorf("approvals list: no call is held for approval")
		return exitOK
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CALL ID\tPERSONALITY\tTOOL\tHELD AT\tEXPIRES AT\tARGS SHA256")
	for _, h := range holds {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", h.CallID, h.PersonalityID, h.Tool, h.HeldAt.Format(time.RFC3339),
			h.ExpiresAt.Format(time.RFC3339), h.ArgsSHA256)
	}
	_ = tw.Flush()
	for _, h := range holds {
		fmt.Fprintf(a.stdout, "\n%s %s(%s)\n  reach: %s\n", h.CallID, h.Tool, string(h.Summary.Args), reach(h.Summary.Grant))
	}
	return exitOK
}

// reach is a held call's grant in one line.
func reach(g protocol.ApprovalGrant) string {
	var parts []string
	for _, f := range []struct {
		label string
		list  []string
	}{{"hosts", g.Hosts}, {"read", g.ReadPaths}, {"write", g.WritePaths}, {"binaries", g.Binaries}, {"secrets", g.Secrets}, {"kv", g.KV}} {
		if len(f.list) > 0 {
			parts = append(parts, f.label+" "+strings.Join(f.list, ", "))
		}
	}
	return cmp.Or(strings.Join(parts, "; "), "nothing external")
}
