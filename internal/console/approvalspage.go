package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// historyShown is how many decisions of the history the page lists, newest
// first.
const historyShown = 100

// approvalsView is the Approvals page: the calls held for a decision and
// the decisions made (docs/console.md, "Approvals").
type approvalsView struct {
	// Personality filters both lists; "" shows every personality.
	Personality string
	// Approver: the reader may decide (buttons are shown).
	Approver bool
	// Open: the console has no tokens, hence no approver.
	Open    bool
	Pending []holdView
	History []client.DecidedCall
	// Older is how many decisions the history leaves out.
	Older int
	// Errors are what could not be read.
	Errors []string
	// Refusal is a refused decision of a plain form post, shown on the page.
	Refusal string
}

// holdView is one held call as the page shows it.
type holdView struct {
	client.Hold
	// Args is the summary's arguments as indented JSON.
	Args string
	// Grant lists the reach the call gets once approved, in a fixed order.
	Grant []grantList
}

// grantList is one list of a held call's grant.
type grantList struct {
	Name  string
	Items []string
}

func newHoldView(h client.Hold) holdView {
	v := holdView{Hold: h, Args: string(h.Summary.Args)}
	var b bytes.Buffer
	if json.Indent(&b, h.Summary.Args, "", "  ") == nil {
		v.Args = b.String()
	}
	if v.Args == "" {
		v.Args = "null"
	}
	g := h.Summary.Grant
	v.Grant = []grantList{{"Hosts", g.Hosts}, {"Paths read", g.ReadPaths}, {"Paths written", g.WritePaths},
		{"Binaries", g.Binaries}, {"Secret refs", g.Secrets}, {"Key-value scope", g.KV}}
	return v
}

// approvalsData reads the pending holds and the decision history. A hold
// whose decision is stored already (the worker deletes the hold once it has
// re-published the call) is left out of the pending list.
func (c *Console) approvalsData(r *http.Request, personality string) approvalsView {
	id := identityOf(r.Context())
	v := approvalsView{Personality: personality, Approver: id.approver(), Open: c.auth.open()}
	ctx, cancel := readCtx(r)
	defer cancel()
	decided := map[string]bool{}
	history, err := c.cfg.Client.Decisions(ctx, personality)
	if err != nil {
		v.Errors = append(v.Errors, "decisions: "+err.Error())
	}
	for _, d := range history {
		decided[d.Hold.CallID] = true
	}
	if len(history) > historyShown {
		v.Older = len(history) - historyShown
		history = history[:historyShown]
	}
	v.History = history
	holds, err := c.cfg.Client.Holds(ctx, personality)
	if err != nil {
		v.Errors = append(v.Errors, "held calls: "+err.Error())
	}
	for _, h := range holds {
		if !decided[h.CallID] {
			v.Pending = append(v.Pending, newHoldView(h))
		}
	}
	return v
}

// approvalsFilter returns the request's personality filter, or answers 400
// naming what is wrong with it.
func approvalsFilter(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := strings.TrimSpace(r.URL.Query().Get("personality"))
	if p == "" {
		return "", true
	}
	if err := protocol.CheckToken("personality", p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return "", false
	}
	return p, true
}

func (c *Console) approvalsPage(w http.ResponseWriter, r *http.Request) {
	p, ok := approvalsFilter(w, r)
	if !ok {
		return
	}
	c.render(w, r, "approvals.html", c.approvalsData(r, p), identityOf(r.Context()))
}

// approvalEvents sends the Approvals page's lists (event "approvals") when
// the stream opens and again whenever a key of the approvals bucket changes
// (a call held, decided, expired, cancelled), at most once per second,
// until the client leaves. It watches the bucket for as long as the page is
// open.
func (c *Console) approvalEvents(w http.ResponseWriter, r *http.Request) {
	p, ok := approvalsFilter(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	kctx, cancel := readCtx(r)
	kv, err := c.cfg.Conn.KV(kctx, bus.Approvals)
	cancel()
	if err != nil {
		http.Error(w, "approvals: "+err.Error(), http.StatusBadGateway)
		return
	}
	patterns := []string{">"}
	if p != "" {
		patterns = []string{protocol.HoldKey(p, "*"), protocol.DecisionKey(p, "*")}
	}
	changed := make(chan struct{}, 1)
	stop, err := kv.WatchKeys(ctx, patterns, func(bus.Entry) { notify(changed) })
	if err != nil {
		http.Error(w, "approvals: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer stop()
	fl, ok := sse(w)
	if !ok {
		return
	}
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		// The keys the watch delivered first are in this render already.
		select {
		case <-changed:
		default:
		}
		html, err := c.fragment("approvals.html", "approvals", c.approvalsData(r, p))
		if err != nil {
			c.log.ErrorContext(ctx, "console: render approvals", "error", err)
			return
		}
		if writeEvent(w, "approvals", html) != nil {
			return
		}
		fl.Flush()
		if !waitChange(ctx, changed, ping.C, w, fl) {
			return
		}
	}
}

// waitChange paces a live view: it waits minInterval (pause), then until
// changed fires (awaitChange); false when the client has gone.
func waitChange(ctx context.Context, changed <-chan struct{}, ping <-chan time.Time, w http.ResponseWriter, fl http.Flusher) bool {
	return pause(ctx) && awaitChange(ctx, changed, ping, w, fl)
}

// pause waits minInterval between two renders of a live view; false when
// the client has gone.
func pause(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(minInterval):
		return true
	}
}

// awaitChange waits until changed fires, writing an SSE comment at every
// ping; false when the client has gone.
func awaitChange(ctx context.Context, changed <-chan struct{}, ping <-chan time.Time, w http.ResponseWriter, fl http.Flusher) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-changed:
			return true
		case <-ping:
			if _, err := w.Write([]byte(": ping\n\n")); err != nil {
				return false
			}
			fl.Flush()
		}
	}
}

// notify signals changed without waiting: one pending signal is enough.
func notify(changed chan<- struct{}) {
	select {
	case changed <- struct{}{}:
	default:
	}
}

// decide answers an approver's approve or deny form: the decision is sent
// as client.Approve or client.Deny does, with the token's name as the
// decider's, approving the args_sha256 the page showed. A refusal of the
// workers (already decided, another hash, not one of the personality's
// approvers) is answered 409 with their message.
func (c *Console) decide(decision string) func(http.ResponseWriter, *http.Request) {
	action := "approve"
	if decision == protocol.ApprovalDenied {
		action = "deny"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := callID(w, r)
		if !ok {
			return
		}
		who := identityOf(r.Context())
		req := approval.Request{Decision: decision, Reason: strings.TrimSpace(r.PostFormValue("reason")), By: who.Name}
		if decision == protocol.ApprovalApproved {
			req.ArgsSHA256 = strings.TrimSpace(r.PostFormValue("args_sha256"))
		}
		if err := req.Check(); err != nil {
			c.audit(r.Context(), action, id, who, "refused: "+err.Error())
			c.refuse(w, r, http.StatusBadRequest, action+" "+id+": "+err.Error())
			return
		}
		ctx, cancel := readCtx(r)
		defer cancel()
		var d client.Decision
		var err error
		if decision == protocol.ApprovalApproved {
			d, err = c.cfg.Client.Approve(ctx, id, req.ArgsSHA256, req.Reason, who.Name)
		} else {
			d, err = c.cfg.Client.Deny(ctx, id, req.Reason, who.Name)
		}
		var refused *client.DecisionRefusedError
		switch {
		case errors.As(err, &refused):
			c.audit(r.Context(), action, id, who, "refused: "+refused.Reason)
			c.refuse(w, r, http.StatusConflict, "Refused: "+refused.Error())
			return
		case errors.Is(err, client.ErrNoWorker):
			c.audit(r.Context(), action, id, who, "failed: "+err.Error())
			c.refuse(w, r, http.StatusServiceUnavailable, action+" "+id+": no worker answers decision requests")
			return
		case err != nil:
			c.audit(r.Context(), action, id, who, "failed: "+err.Error())
			c.refuse(w, r, http.StatusBadGateway, action+" "+id+": "+err.Error())
			return
		}
		c.audit(r.Context(), action, id, who, d.Decision)
		msg := fmt.Sprintf("Denied call %s as %s.", id, d.By)
		if d.Decision == protocol.ApprovalApproved {
			msg = fmt.Sprintf("Approved call %s as %s (arguments %s): it runs once, with exactly those arguments.", id, d.By, req.ArgsSHA256)
		}
		c.actionDone(w, r, msg)
	}
}

// refuse answers a decision that was not made: an alert fragment for htmx
// (the page's status area shows it), else the Approvals page with the
// message on it.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if r.Header.Get("HX-Request") != "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, `<p class="error" role="alert">%s</p>`, template.HTMLEscapeString(msg))
		return
	}
	v := c.approvalsData(r, "")
	v.Refusal = msg
	c.renderStatus(w, r, status, "approvals.html", v, identityOf(r.Context()))
}
