package console

import (
	"cmp"
	"net/http"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/worker"
)

type poolView struct {
	poolSnapshot
	Pools []poolRow
	// Queues holds the queue of each pool of Pools, in that order.
	Queues []queueView
	Local  *localView
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
		v.Queues = append(v.Queues, c.queue(r.Context(), name))
	}
	if l := c.cfg.Local; l != nil {
		v.Local = &localView{ID: l.ID, Slots: l.Slots, Version: l.Version, Readiness: c.localReadiness(r.Context())}
	}
	return v
}

func (c *Console) poolPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "pool.html", c.poolData(r), identityOf(r.Context()))
}
