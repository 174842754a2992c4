package console

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/explain"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
)

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
