package console

import (
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/protocol"
)

type tailFilter struct {
	Pool, Tool, Personality, Code, Batch string
}

func filterOf(r *http.Request) tailFilter {
	q := r.URL.Query()
	return tailFilter{Pool: q.Get("pool"), Tool: q.Get("tool"), Personality: q.Get("personality"), Code: q.Get("code"), Batch: q.Get("batch")}
}

func (f tailFilter) keep(r resultRow) bool {
	code := r.Code
	if r.OK {
		code = "ok"
	}
	return (f.Pool == "" || f.Pool == r.Pool) && (f.Tool == "" || f.Tool == r.Tool) &&
		(f.Personality == "" || f.Personality == r.Personality) && (f.Code == "" || f.Code == code) &&
		(f.Batch == "" || f.Batch == r.BatchID)
}

func (f tailFilter) Query() string {
	v := url.Values{}
	for k, s := range map[string]string{"pool": f.Pool, "tool": f.Tool, "personality": f.Personality, "code": f.Code, "batch": f.Batch} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v.Encode()
}

type callsView struct {
	Filter tailFilter
	Rows   []resultRow
	Codes  []string
}

func (c *Console) callsPage(w http.ResponseWriter, r *http.Request) {
	f := filterOf(r)
	codes := []string{"ok"}
	for _, code := range []protocol.Code{protocol.CodeInputInvalid, protocol.CodeNotAvailable, protocol.CodeExecutionFailed, protocol.CodeStaleWrite} {
		codes = append(codes, string(code))
	}
	c.render(w, r, "calls.html", callsView{Filter: f, Rows: c.feed.tail(f.keep, 100), Codes: codes}, identityOf(r.Context()))
}

type progressView struct {
	protocol.Progress
	Dashboard bool
}

type callView struct {
	CallID      string
	Found       bool
	Result      *protocol.Result
	Duplicates  int
	Personality string
	Batch       string
	Progress    []progressView
	Dashboard   []progressView
	Audit       *protocol.AuditRecord
	DeadLetters []client.DeadLetter
	Lease       string
	TraceID     string
	TraceURL    string
	Published   time.Time
	Finished    time.Time
	Errors      []string
	Flash       string
}

func (c *Console) loadCall(r *http.Request, callID string) callView {
	ctx, cancel := readCtx(r)
	defer cancel()
	v := callView{CallID: callID, Lease: c.feed.leaseHolder(callID)}
	n := c.cfg.Conn.Names()
	p := n.Prefix()
	results, err := c.cfg.Conn.Messages(ctx, n.ResultsStream(), p+".result.*.*."+callID)
	if err != nil {
		v.Errors = append(v.Errors, "results: "+err.Error())
	}
	if len(results) > 0 {
		m := results[0]
		var res protocol.Result
		if err := json.Unmarshal(m.Data, &res); err == nil {
			v.Result, v.Found = &res, true
			v.Duplicates = len(results) - 1
			v.Finished = m.Time
			if parts := strings.Split(m.Subject, "."); len(parts) == 5 {
				v.Personality, v.Batch = parts[2], parts[3]
			}
			v.TraceID = traceID(m.Header.Get(protocol.HeaderTraceparent))
		}
	}
	events, err := c.cfg.Conn.Messages(ctx, n.ProgressStream(), p+".progress.*.*.*."+callID)
	if err != nil {
		v.Errors = append(v.Errors, "progress: "+err.Error())
	}
	for _, m := range events {
		var e protocol.Progress
		if json.Unmarshal(m.Data, &e) != nil {
			continue
		}
		pv := progressView{Progress: e, Dashboard: e.Audience == protocol.AudienceDashboard}
		v.Progress = append(v.Progress, pv)
		if pv.Dashboard {
			v.Dashboard = append(v.Dashboard, pv)
		}
		if v.Personality == "" {
			if parts := strings.Split(m.Subject, "."); len(parts) == 6 {
				v.Personality, v.Batch = parts[3], parts[4]
			}
		}
		v.Found = true
	}
	slices.SortStableFunc(v.Progress, func(a, b progressView) int { return a.Time.Compare(b.Time) })
	if a, ok := c.feed.audit(callID); ok {
		v.Audit = &a
	} else if v.Result != nil {
		v.Audit = c.scanAudit(r, v.Result.Tool, callID)
	}
	if v.Audit != nil {
		v.Found = true
		v.Personality = cmp.Or(v.Personality, v.Audit.PersonalityID)
	}
	if dls, err := c.cfg.Client.DeadLettersOf(ctx, callID); err == nil {
		v.DeadLetters = dls
		if len(dls) > 0 {
			v.Found = true
			if v.TraceID == "" {
				v.TraceID = traceID(first(dls[len(dls)-1].Header[protocol.HeaderTraceparent]))
			}
		}
	} else {
		v.Errors = append(v.Errors, "dead letters: "+err.Error())
	}
	if v.Lease != "" {
		v.Found = true
	}
	if v.TraceID != "" && c.cfg.TraceURL != "" {
		v.TraceURL = strings.ReplaceAll(c.cfg.TraceURL, "{trace_id}", v.TraceID)
	}
	return v
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// scanAudit reads the audit records of tool for callID's (the feed only
// holds those written since the console started), newest first, within
// a few seconds.
func (c *Console) scanAudit(r *http.Request, toolName, callID string) *protocol.AuditRecord {
	subject, err := c.cfg.Conn.Names().AuditSubject(toolName)
	if err != nil {
		return nil
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	msgs, err := c.cfg.Conn.Messages(ctx, c.cfg.Conn.Names().AuditStream(), subject)
	if err != nil {
		return nil
	}
	for _, m := range slices.Backward(msgs) {
		// A message holds a batch of records, one per line.
		recs, _ := protocol.DecodeAuditRecords(m.Data)
		for _, a := range slices.Backward(recs) {
			if a.CallID == callID {
				return &a
			}
		}
	}
	return nil
}

// traceID is the trace id of a W3C traceparent header, "" when malformed.
func traceID(traceparent string) string {
	parts := strings.Split(traceparent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

func (c *Console) callPage(w http.ResponseWriter, r *http.Request) {
	id, ok := callID(w, r)
	if !ok {
		return
	}
	v := c.loadCall(r, id)
	if !v.Found {
		w.WriteHeader(http.StatusNotFound)
	}
	c.render(w, r, "call.html", v, identityOf(r.Context()))
}

func (c *Console) cancelCall(w http.ResponseWriter, r *http.Request) {
	id, ok := callID(w, r)
	if !ok {
		return
	}
	who := identityOf(r.Context())
	personality := cmp.Or(r.PostFormValue("personality"), c.cfg.Client.PersonalityID())
	cl, err := c.cfg.Client.WithPersonality(personality)
	if err != nil {
		c.audit(r.Context(), "cancel", id, who, "refused: "+err.Error())
		http.Error(w, "cancel "+id+": personality: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	if err := cl.Cancel(ctx, id, "cancelled from the console by "+who.Name); err != nil {
		c.audit(r.Context(), "cancel", id, who, "failed: "+err.Error())
		http.Error(w, "cancel "+id+": "+err.Error(), http.StatusBadGateway)
		return
	}
	c.audit(r.Context(), "cancel", id, who, "requested")
	c.actionDone(w, r, "Cancel requested for call "+id+".")
}

// actionDone answers an operator action: a status fragment for htmx, a
// redirect back for a plain form.
func (c *Console) actionDone(w http.ResponseWriter, r *http.Request, msg string) {
	if r.Header.Get("HX-Request") != "" {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = fmt.Fprintf(w, `<p class="flash" role="status">%s</p>`, template.HTMLEscapeString(msg))
		return
	}
	http.Redirect(w, r, cmp.Or(r.Referer(), "/"), http.StatusSeeOther)
}

func (c *Console) search(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if err := protocol.CheckToken("call or batch id", q); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		c.render(w, r, "batch.html", batchView{ID: q, Error: err.Error()}, identityOf(r.Context()))
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	n := c.cfg.Conn.Names()
	if msgs, err := c.cfg.Conn.Messages(ctx, n.ResultsStream(), n.Prefix()+".result.*.*."+q); err == nil && len(msgs) > 0 {
		http.Redirect(w, r, "/calls/"+url.PathEscape(q), http.StatusSeeOther)
		return
	}
	if c.feed.leaseHolder(q) != "" {
		http.Redirect(w, r, "/calls/"+url.PathEscape(q), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/batches/"+url.PathEscape(q), http.StatusSeeOther)
}

type batchView struct {
	ID    string
	Rows  []resultRow
	Error string
}

func (c *Console) batchPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	v := batchView{ID: id}
	if err := protocol.CheckToken("batch_id", id); err != nil {
		v.Error = err.Error()
		w.WriteHeader(http.StatusBadRequest)
		c.render(w, r, "batch.html", v, identityOf(r.Context()))
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	n := c.cfg.Conn.Names()
	msgs, err := c.cfg.Conn.Messages(ctx, n.ResultsStream(), n.Prefix()+".result.*."+id+".*")
	if err != nil {
		v.Error = err.Error()
	}
	pools := c.toolPools()
	for _, m := range msgs {
		var res protocol.Result
		if json.Unmarshal(m.Data, &res) != nil {
			continue
		}
		parts := strings.Split(m.Subject, ".")
		row := resultRow{Time: m.Time, CallID: res.CallID, BatchID: res.BatchID, Tool: res.Tool, Pool: pools[res.Tool], OK: res.OK,
			Code: string(res.Code), DurationMS: res.DurationMS, WorkerID: res.WorkerID, Deliveries: res.Deliveries, Error: res.Error}
		if len(parts) == 5 {
			row.Personality = parts[2]
		}
		v.Rows = append(v.Rows, row)
	}
	if len(v.Rows) == 0 && v.Error == "" {
		v.Error = "no call or batch " + id + " in the results stream (results are kept 24 h)"
		w.WriteHeader(http.StatusNotFound)
	}
	c.render(w, r, "batch.html", v, identityOf(r.Context()))
}

// callID returns the call id of the request's path, or answers 400 naming
// what is wrong with it.
func callID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if err := protocol.CheckToken("call_id", id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return "", false
	}
	return id, true
}
