package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/explain"
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
		"share":       FormatShare,
		"maxConc":     FormatMaxConcurrency,
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
	c.renderStatus(w, r, 0, name, data, id)
}

// renderStatus is render answering with status (0: as the response has it,
// 200 unless written already), headers included.
func (c *Console) renderStatus(w http.ResponseWriter, r *http.Request, status int, name string, data any, id identity) {
	c.renderTemplate(w, r, status, name, "layout", page{Title: titles[name], Nav: name, Who: id, Open: c.auth.open(), Data: data})
}

var titles = map[string]string{
	"pool.html": "Pool", "calls.html": "Calls", "call.html": "Call", "explain.html": "Explain",
	"dlq.html": "Dead letters", "deadletter.html": "Dead letter", "login.html": "Sign in", "batch.html": "Batch",
	"personality.html": "Personality", "approvals.html": "Approvals",
}

func (c *Console) renderTemplate(w http.ResponseWriter, r *http.Request, status int, name, tmpl string, data any) {
	var b bytes.Buffer
	if err := c.pages[name].ExecuteTemplate(&b, tmpl, data); err != nil {
		c.log.ErrorContext(r.Context(), "console: render", "page", name, "error", err)
		http.Error(w, "cannot render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if status != 0 {
		w.WriteHeader(status)
	}
	_, _ = w.Write(b.Bytes())
}

// fragment executes one named template of page name.
func (c *Console) fragment(name, tmpl string, data any) (string, error) {
	var b bytes.Buffer
	err := c.pages[name].ExecuteTemplate(&b, tmpl, data)
	return b.String(), err
}

// slicesSortedKeys returns the keys of m, sorted.
func slicesSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
