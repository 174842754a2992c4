package console

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/explain"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
)

// parsePages parses every page template with the layout and the shared
// fragments.
func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"sparkline":   sparkline,
		"latency":     latencyLines,
		"failureBars": failureBars,
		"ms":          func(v int64) string { return fmt.Sprintf("%d ms", v) },
		"rate":        func(v float64) string { return fmt.Sprintf("%.1f/s", v) },
		"clock":       func(t time.Time) string { return t.UTC().Format("15:04:05.000") },
		"stamp":       func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"ago":         func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
		"json":        func(v any) (string, error) { b, err := json.Marshal(v); return string(b), err },
		"grantRows":   explain.Rows,
		"join":        strings.Join,
		"pathEscape":  url.PathEscape,
		"sub":         func(a, b int) int { return a - b },
	}
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		base := path.Base(n)
		if base == "layout.html" || base == "parts.html" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/parts.html", n)
		if err != nil {
			return nil, err
		}
		pages[base] = t
	}
	return pages, nil
}

// page is what the layout needs besides the page's own data.
type page struct {
	Title string
	Nav   string
	Who   identity
	Open  bool
	Data  any
	Flash string
}

// render executes page name's layout into a buffer first, so a template
// error becomes a 500 rather than half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, name string, data any, id identity) {
	c.renderTemplate(w, r, name, "layout", page{Title: titles[name], Nav: name, Who: id, Open: c.auth.open(), Data: data})
}

var titles = map[string]string{
	"pool.html": "Pool", "calls.html": "Calls", "call.html": "Call", "explain.html": "Explain",
	"dlq.html": "Dead letters", "deadletter.html": "Dead letter", "login.html": "Sign in", "batch.html": "Batch",
	"personality.html": "Personality",
}

func (c *Console) renderTemplate(w http.ResponseWriter, r *http.Request, name, tmpl string, data any) {
	var b bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&b, tmpl, data); err != nil {
		c.log.ErrorContext(r.Context(), "console: render", "page", name, "error", err)
		http.Error(w, "cannot render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b.Bytes())
}

// fragment executes one named template of page name.
func (c *Console) fragment(name, tmpl string, data any) (string, error) {
	var b bytes.Buffer
	err := c.pages[name].ExecuteTemplate(&b, tmpl, data)
	return b.String(), err
}

// ---- pool view

type poolView struct {
	poolSnapshot
	Pools []poolRow
	Local *localView
}

type poolRow struct {
	Name    string
	Tools   []string
	Workers int
}

type localView struct {
	ID        string
	Slots     int
	Version   string
	Readiness *worker.Readiness
}

func (c *Console) poolData(r *http.Request) poolView {
	v := poolView{poolSnapshot: c.feed.snapshot()}
	entries, _ := c.cfg.Client.Tools(r.Context())
	byPool := map[string]*poolRow{}
	for _, e := range entries {
		name := cmp.Or(e.Pool, protocol.DefaultPool)
		p := byPool[name]
		if p == nil {
			p = &poolRow{Name: name}
			byPool[name] = p
		}
		p.Tools = append(p.Tools, e.Name)
	}
	for _, w := range v.Workers {
		if p := byPool[w.Pool]; p != nil {
			p.Workers++
		}
	}
	for _, name := range slicesSortedKeys(byPool) {
		v.Pools = append(v.Pools, *byPool[name])
	}
	if l := c.cfg.Local; l != nil {
		v.Local = &localView{ID: l.ID, Slots: l.Slots, Version: l.Version, Readiness: c.localReadiness(r.Context())}
	}
	return v
}

func (c *Console) poolPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "pool.html", c.poolData(r), identityOf(r.Context()))
}

// ---- calls tail

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

// ---- call page

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
		var a protocol.AuditRecord
		if json.Unmarshal(m.Data, &a) == nil && a.CallID == callID {
			return &a
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
	id := r.PathValue("id")
	if err := protocol.CheckToken("call_id", id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	v := c.loadCall(r, id)
	if !v.Found {
		w.WriteHeader(http.StatusNotFound)
	}
	c.render(w, r, "call.html", v, identityOf(r.Context()))
}

func (c *Console) cancelCall(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	who := identityOf(r.Context())
	if err := protocol.CheckToken("call_id", id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
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

// ---- search and batches

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

// ---- explain

type explainColumn struct {
	ID           string
	Error        string
	Explanations map[string]explain.Explanation
	Allowed      int
}

type explainView struct {
	Personalities []string
	A, B          string
	Tools         []string
	Columns       []explainColumn
	Error         string
}

func (c *Console) explainPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := readCtx(r)
	defer cancel()
	v := explainView{A: r.URL.Query().Get("a"), B: r.URL.Query().Get("b")}
	ids, err := c.cfg.Client.Personalities(ctx)
	if err != nil {
		v.Error = "personalities: " + err.Error()
	}
	v.Personalities = ids
	if v.A == "" {
		v.A = c.cfg.Client.PersonalityID()
	}
	tools, terr := c.catalogTools(r)
	if terr != nil {
		v.Error = "catalog: " + terr.Error()
	}
	for _, t := range tools {
		v.Tools = append(v.Tools, t.Name)
	}
	for _, id := range []string{v.A, v.B} {
		if id == "" {
			continue
		}
		col := explainColumn{ID: id}
		if err := protocol.CheckToken("personality", id); err != nil {
			col.Error = err.Error()
			v.Columns = append(v.Columns, col)
			continue
		}
		doc, err := c.cfg.Client.Personality(ctx, id)
		if err == nil {
			pers, perr := explain.Parse(doc, id)
			if perr != nil {
				err = fmt.Errorf("personality %s is invalid: %w", id, perr)
			} else {
				col.Explanations = map[string]explain.Explanation{}
				for _, e := range explain.Tools(tools, pers) {
					col.Explanations[e.Tool] = e
					if e.Allowed {
						col.Allowed++
					}
				}
			}
		}
		if err != nil {
			col.Error = err.Error()
		}
		v.Columns = append(v.Columns, col)
	}
	c.render(w, r, "explain.html", v, identityOf(r.Context()))
}

// catalogTools returns the catalog's tools as declarations, by name; an
// entry that does not decode is left out, as "dispatcher explain" does.
func (c *Console) catalogTools(r *http.Request) ([]*tool.Tool, error) {
	entries, err := c.cfg.Client.Tools(r.Context())
	if err != nil {
		return nil, err
	}
	var out []*tool.Tool
	for _, e := range entries {
		t, err := client.CatalogTool(e)
		if err != nil {
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// ---- dead letters

type dlqView struct {
	Letters []client.DeadLetter
	Error   string
}

func (c *Console) dlqPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := readCtx(r)
	defer cancel()
	letters, err := c.cfg.Client.DeadLetters(ctx)
	v := dlqView{Letters: letters}
	if err != nil {
		v.Error = err.Error()
	}
	c.render(w, r, "dlq.html", v, identityOf(r.Context()))
}

type deadLetterView struct {
	CallID  string
	Letters []deadLetterBody
}

type deadLetterBody struct {
	client.DeadLetter
	Headers [][2]string
	Body    string
}

func (c *Console) dlqShow(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := protocol.CheckToken("call_id", id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	letters, err := c.cfg.Client.DeadLettersOf(ctx, id)
	if err != nil {
		http.Error(w, "dead letters: "+err.Error(), http.StatusBadGateway)
		return
	}
	v := deadLetterView{CallID: id}
	for _, d := range letters {
		b := deadLetterBody{DeadLetter: d, Body: string(d.Body)}
		if json.Valid(d.Body) {
			var pretty bytes.Buffer
			if json.Indent(&pretty, d.Body, "", "  ") == nil {
				b.Body = pretty.String()
			}
		}
		for _, k := range slicesSortedKeys(d.Header) {
			for _, val := range d.Header[k] {
				b.Headers = append(b.Headers, [2]string{k, val})
			}
		}
		v.Letters = append(v.Letters, b)
	}
	if len(v.Letters) == 0 {
		w.WriteHeader(http.StatusNotFound)
	}
	c.render(w, r, "deadletter.html", v, identityOf(r.Context()))
}

// redrive re-publishes the call's latest dead letter with client.Redrive,
// as "dispatcher dlq redrive" does: the worker runs every gate again
// against the policy of today.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	who := identityOf(r.Context())
	if err := protocol.CheckToken("call_id", id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	subject, err := c.cfg.Client.Redrive(ctx, id)
	if errors.Is(err, client.ErrNoDeadLetter) {
		c.audit(r.Context(), "redrive", id, who, "refused: no dead letter")
		http.Error(w, "no dead letter for call "+id, http.StatusNotFound)
		return
	}
	if err != nil {
		c.audit(r.Context(), "redrive", id, who, "failed: "+err.Error())
		http.Error(w, "redrive "+id+": "+err.Error(), http.StatusBadGateway)
		return
	}
	c.audit(r.Context(), "redrive", id, who, "redriven to "+subject)
	c.actionDone(w, r, "Redriven call "+id+" to "+subject+".")
}

// purge removes every dead letter of the call from the DLQ.
func (c *Console) purge(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	who := identityOf(r.Context())
	if err := protocol.CheckToken("call_id", id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := readCtx(r)
	defer cancel()
	letters, err := c.cfg.Client.DeadLettersOf(ctx, id)
	if err == nil && len(letters) == 0 {
		c.audit(r.Context(), "purge", id, who, "refused: no dead letter")
		http.Error(w, "no dead letter for call "+id, http.StatusNotFound)
		return
	}
	for _, d := range letters {
		if err == nil {
			err = c.cfg.Conn.DeleteMsg(ctx, c.cfg.Conn.Names().DLQStream(), d.Seq)
		}
	}
	if err != nil {
		c.audit(r.Context(), "purge", id, who, "failed: "+err.Error())
		http.Error(w, "purge "+id+": "+err.Error(), http.StatusBadGateway)
		return
	}
	c.audit(r.Context(), "purge", id, who, fmt.Sprintf("purged %d dead letters", len(letters)))
	c.actionDone(w, r, fmt.Sprintf("Purged %d dead letter(s) of call %s.", len(letters), id))
}

func slicesSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ---- personalities

type personalityView struct {
	ID       string
	Document string
	Operator bool
	Error    string
}

func (c *Console) personalityPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	v := personalityView{ID: id, Operator: identityOf(r.Context()).operator()}
	ctx, cancel := readCtx(r)
	defer cancel()
	doc, err := c.cfg.Client.Personality(ctx, id)
	switch {
	case errors.Is(err, client.ErrUnknownPersonality):
		v.Error = err.Error()
		w.WriteHeader(http.StatusNotFound)
	case err != nil:
		v.Error = err.Error()
		w.WriteHeader(http.StatusBadGateway)
	default:
		v.Document = string(doc)
	}
	c.render(w, r, "personality.html", v, identityOf(r.Context()))
}

// putPersonality validates the posted document against the catalog and
// stores it, as "dispatcher personality put" does (client.PutPersonality);
// a document with problems is refused with all of them (422).
func (c *Console) putPersonality(w http.ResponseWriter, r *http.Request) {
	who := identityOf(r.Context())
	doc := r.PostFormValue("document")
	ctx, cancel := readCtx(r)
	defer cancel()
	id, problems, err := c.cfg.Client.PutPersonality(ctx, []byte(doc))
	if errors.Is(err, client.ErrInvalidPersonality) || (err == nil && id == "") {
		c.audit(r.Context(), "put personality", id, who, fmt.Sprintf("refused: %d problems", len(problems)))
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusUnprocessableEntity)
		var b strings.Builder
		b.WriteString(`<div class="error" role="alert"><p>Not stored:</p><ul>`)
		for _, p := range problems {
			b.WriteString("<li>" + template.HTMLEscapeString(p.String()) + "</li>")
		}
		b.WriteString("</ul></div>")
		_, _ = w.Write([]byte(b.String()))
		return
	}
	if err != nil {
		c.audit(r.Context(), "put personality", id, who, "failed: "+err.Error())
		http.Error(w, "put personality: "+err.Error(), http.StatusBadGateway)
		return
	}
	c.audit(r.Context(), "put personality", id, who, "stored")
	c.actionDone(w, r, "Stored personality "+id+".")
}
