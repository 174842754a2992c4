package console

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/explain"
)

// QueueRow is one personality's row of a pool's queue, as the pool page
// shows it and "dispatcher queue --json" prints it (scheduling.md, "What a
// user must be able to see").
type QueueRow struct {
	Personality string `json:"personality"`
	// Waiting and Running are the personality's calls waiting for a slot
	// and running in the pool (bus.QueueEntry).
	Waiting uint64 `json:"waiting"`
	Running int    `json:"running"`
	// Priority, Weight and MaxConcurrency are the personality's scheduling
	// section, capability.DefaultScheduling() for a personality without the
	// section, not stored, or with an invalid document.
	Priority       int `json:"priority"`
	Weight         int `json:"weight"`
	MaxConcurrency int `json:"max_concurrency"`
	// ShareLastMinute is the personality's fraction (0 to 1) of the starts
	// of the last minute among the pool's personalities
	// (bus.QueueEntry.ShareLastMinute).
	ShareLastMinute float64 `json:"share_last_minute"`
}

// Queue returns the rows of pool's queue, sorted by personality: what
// conn.PoolQueue counts, with each personality's scheduling read from the
// personalities bucket through docs and parsed as a worker parses it. A
// document that does not parse gets the defaults and a note naming it and
// its problem; a personality not stored gets the defaults. err is a
// failure to read the queue or a document.
func Queue(ctx context.Context, conn *bus.Conn, docs *client.Client, pool string) (rows []QueueRow, notes []string, err error) {
	entries, err := conn.PoolQueue(ctx, pool)
	if err != nil {
		return nil, nil, err
	}
	rows = make([]QueueRow, 0, len(entries))
	for _, e := range entries {
		s := capability.DefaultScheduling()
		doc, err := docs.Personality(ctx, e.Personality)
		switch {
		case errors.Is(err, client.ErrUnknownPersonality):
		case err != nil:
			return nil, nil, fmt.Errorf("read personality %s: %w", e.Personality, err)
		default:
			p, perr := explain.Parse(doc, e.Personality)
			if perr != nil {
				notes = append(notes, fmt.Sprintf("personality %s: %v; its scheduling shows the defaults", e.Personality, perr))
			} else {
				s = p.Scheduling
			}
		}
		rows = append(rows, QueueRow{Personality: e.Personality, Waiting: e.Waiting, Running: e.Running,
			Priority: s.Priority, Weight: s.Weight, MaxConcurrency: s.MaxConcurrency, ShareLastMinute: e.ShareLastMinute})
	}
	return rows, notes, nil
}

// queueTTL is how long the pool page reuses a pool's queue: reading it
// reads the audit records of the last minute, which every open pool page
// would otherwise do at each refresh.
const queueTTL = 2 * time.Second

// queueView is a pool's queue on the pool page.
type queueView struct {
	Pool  string
	Rows  []QueueRow
	Notes []string
	// Err says why the queue could not be read ("" when it could).
	Err string
	at  time.Time
}

// queueCache keeps the last queue of each pool for queueTTL.
type queueCache struct {
	mu    sync.Mutex
	pools map[string]queueView
}

// queue returns pool's queue, read again when the last read is older than
// queueTTL. Concurrent pages wait for one read.
func (c *Console) queue(ctx context.Context, pool string) queueView {
	q := &c.queues
	q.mu.Lock()
	defer q.mu.Unlock()
	if v, ok := q.pools[pool]; ok && time.Since(v.at) < queueTTL {
		return v
	}
	// The read serves every page of the next queueTTL: one page that goes
	// away does not cut it short.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
	defer cancel()
	v := queueView{Pool: pool, at: time.Now()}
	rows, notes, err := Queue(rctx, c.cfg.Conn, c.cfg.Client, pool)
	if err != nil {
		v.Err = err.Error()
		c.log.WarnContext(ctx, "console: read the queue", "pool", pool, "error", err)
	}
	v.Rows, v.Notes = rows, notes
	if q.pools == nil {
		q.pools = map[string]queueView{}
	}
	q.pools[pool] = v
	return v
}

// FormatShare writes a share of starts (0 to 1) as a percentage with one
// decimal: 0.25 is "25.0%".
func FormatShare(share float64) string { return fmt.Sprintf("%.1f%%", share*100) }

// FormatMaxConcurrency writes a max_concurrency for people: "none" for 0
// (no cap), else the number.
func FormatMaxConcurrency(n int) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}
