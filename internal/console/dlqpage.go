package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/capstanhq/capstan/client"
)

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
	id, ok := callID(w, r)
	if !ok {
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
	id, ok := callID(w, r)
	if !ok {
		return
	}
	who := identityOf(r.Context())
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
	id, ok := callID(w, r)
	if !ok {
		return
	}
	who := identityOf(r.Context())
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
