package console

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
)

// Pacing of the live views: a view is sent again at most once per
// minInterval, and at least every refresh so the sparklines move on.
const (
	minInterval = time.Second
	refresh     = 5 * time.Second
)

// sse starts a server-sent events response.
func sse(w http.ResponseWriter) (http.Flusher, bool) {
	f, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return nil, false
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	f.Flush()
	return f, true
}

// writeEvent writes one event whose data may span lines.
func writeEvent(w http.ResponseWriter, name, data string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "event: %s\n", name)
	for line := range strings.SplitSeq(data, "\n") {
		fmt.Fprintf(&b, "data: %s\n", line)
	}
	b.WriteString("\n")
	_, err := w.Write([]byte(b.String()))
	return err
}

// poolEvents sends the pool view (event "pool") when the feed changes, at
// most once per second, and every few seconds regardless.
func (c *Console) poolEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := sse(w)
	if !ok {
		return
	}
	ctx := r.Context()
	last := uint64(0)
	tick := time.NewTicker(refresh)
	defer tick.Stop()
	for {
		version, changed := c.feed.wait()
		if version != last || last == 0 {
			html, err := c.fragment("pool.html", "pool", c.poolData(r))
			if err != nil {
				c.log.ErrorContext(ctx, "console: render pool", "error", err)
				return
			}
			if writeEvent(w, "pool", html) != nil {
				return
			}
			fl.Flush()
			last = max(version, 1)
			select {
			case <-ctx.Done():
				return
			case <-time.After(minInterval):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
			last = 0
		}
	}
}

// callEvents sends each new result that passes the request's filters as a
// table row (event "result").
func (c *Console) callEvents(w http.ResponseWriter, r *http.Request) {
	// Counted before the response starts: a result stored once the client
	// sees the stream open is sent.
	seen := c.feed.count()
	f := filterOf(r)
	fl, ok := sse(w)
	if !ok {
		return
	}
	ctx := r.Context()
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		_, changed := c.feed.wait()
		rows, n := c.feed.since(seen)
		seen = n
		sent := false
		for _, row := range rows {
			if !f.keep(row) {
				continue
			}
			html, err := c.fragment("calls.html", "row", row)
			if err != nil {
				c.log.ErrorContext(ctx, "console: render row", "error", err)
				return
			}
			if writeEvent(w, "result", html) != nil {
				return
			}
			sent = true
		}
		if sent {
			fl.Flush()
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-ping.C:
			if _, err := w.Write([]byte(": ping\n\n")); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// oneCallEvents sends the body of a call's page (event "call") again
// whenever a progress event or a result of the call is stored, at most once
// per second, until the client leaves.
func (c *Console) oneCallEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := protocol.CheckToken("call_id", id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	n := c.cfg.Conn.Names()
	changed := make(chan struct{}, 1)
	poke := func(*bus.Msg) { notify(changed) }
	stopProgress, err := c.cfg.Conn.Tail(ctx, n.ProgressStream(), []string{n.Prefix() + ".progress.*.*.*." + id}, bus.FromNew, poke)
	if err != nil {
		http.Error(w, "progress: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer stopProgress()
	// From the start: a result stored before the page connected counts.
	stopResults, err := c.cfg.Conn.Tail(ctx, n.ResultsStream(), []string{n.Prefix() + ".result.*.*." + id}, bus.FromStart, poke)
	if err != nil {
		http.Error(w, "results: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer stopResults()
	fl, ok := sse(w)
	if !ok {
		return
	}
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		if !awaitChange(ctx, changed, ping.C, w, fl) {
			return
		}
		html, err := c.fragment("call.html", "callbody", c.loadCall(r, id))
		if err != nil {
			c.log.ErrorContext(ctx, "console: render call", "error", err)
			return
		}
		if writeEvent(w, "call", html) != nil {
			return
		}
		fl.Flush()
		if !pause(ctx) {
			return
		}
	}
}
