package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
)

func catalogEntry(t tool.Tool, pool string) (protocol.CatalogEntry, error) {
	caps, err := json.Marshal(t.Capabilities)
	if err != nil {
		return protocol.CatalogEntry{}, fmt.Errorf("tool %s: encode capabilities: %w", t.Name, err)
	}
	schema := t.Schema
	if len(schema) == 0 {
		schema = json.RawMessage(`{"type":"object"}`)
	}
	perms := t.Permissions
	if perms == nil {
		perms = []string{}
	}
	return protocol.CatalogEntry{
		Name: t.Name, Description: t.Description, Schema: schema, Toolset: t.Toolset, Capabilities: caps,
		Permissions: perms, OutputIsUntrusted: t.OutputIsUntrusted, AlwaysInclude: t.AlwaysInclude,
		MaxResultChars: t.MaxResultChars, Plugin: t.Plugin, SideEffects: string(t.SideEffects.Effective()), Pool: pool,
	}, nil
}

type workerRecord struct {
	ID      string    `json:"id"`
	Pool    string    `json:"pool"`
	Tools   []string  `json:"tools"`
	Started time.Time `json:"started"`
	// Protocol is the wire protocol version the worker speaks; a component
	// migrating streams of version 1 waits for workers without it to go.
	Protocol string `json:"protocol"`
	// Concurrency is the worker's slots, and InFlight the calls it ran
	// when the record was written (at start and every WorkerTTL/3).
	Concurrency int `json:"concurrency"`
	InFlight    int `json:"in_flight"`
}

// register announces the worker and publishes every hosted tool to the
// catalog. A tool already registered by a live worker of another pool stops
// the worker: a tool name belongs to one pool.
func (w *Worker) register(ctx context.Context) error {
	all := w.hostedTools()
	names := make([]string, len(all))
	for i, h := range all {
		names[i] = h.Name
	}
	rec, _ := json.Marshal(workerRecord{ID: w.cfg.WorkerID, Pool: w.cfg.Pool, Tools: names, Started: time.Now().UTC(), Protocol: protocol.Version,
		Concurrency: w.cfg.Concurrency, InFlight: w.inflight.Count()})
	for _, h := range all {
		if err := w.checkPool(ctx, h.Name); err != nil {
			return err
		}
	}
	if _, err := w.kv.workers.Put(ctx, w.cfg.WorkerID, rec); err != nil {
		return fmt.Errorf("announce worker: %w", err)
	}
	for _, h := range all {
		if err := w.updateCatalog(ctx, h, true); err != nil {
			return err
		}
	}
	return nil
}

func (w *Worker) checkPool(ctx context.Context, name string) error {
	e, found, err := w.kv.tools.Get(ctx, name)
	if err != nil || !found {
		return err
	}
	var cur protocol.CatalogEntry
	if json.Unmarshal(e.Value, &cur) != nil || cur.Pool == w.cfg.Pool {
		return nil
	}
	if live := w.liveWorkers(ctx, cur.Workers); len(live) > 0 {
		return fmt.Errorf("tool %s is already registered by live worker %s of pool %s; a tool name belongs to one pool (this worker serves pool %s)", name, live[0], cur.Pool, w.cfg.Pool)
	}
	return nil
}

// updateCatalog writes a tool's entry with this worker added (or removed),
// keeping only live workers of this pool. It retries on concurrent updates.
func (w *Worker) updateCatalog(ctx context.Context, h *hosted, add bool) error {
	for range 20 {
		e, found, err := w.kv.tools.Get(ctx, h.Name)
		if err != nil {
			return fmt.Errorf("catalog %s: %w", h.Name, err)
		}
		workers := []string{}
		if found {
			var cur protocol.CatalogEntry
			if json.Unmarshal(e.Value, &cur) == nil && cur.Pool == w.cfg.Pool {
				workers = w.liveWorkers(ctx, cur.Workers)
			}
		}
		if add {
			workers = append(workers, w.cfg.WorkerID)
		}
		slices.Sort(workers)
		entry := h.entry
		entry.Workers = slices.Compact(workers)
		entry.Updated = time.Now().UTC()
		data, err := json.Marshal(entry)
		if err != nil {
			return err
		}
		if found {
			_, err = w.kv.tools.Update(ctx, h.Name, data, e.Revision)
		} else {
			_, err = w.kv.tools.Create(ctx, h.Name, data, 0)
		}
		if errors.Is(err, bus.ErrConflict) || errors.Is(err, bus.ErrKeyExists) {
			continue
		}
		if err != nil {
			return fmt.Errorf("catalog %s: %w", h.Name, err)
		}
		return nil
	}
	return fmt.Errorf("catalog %s: too many concurrent updates", h.Name)
}

// liveWorkers returns the ids other than this worker's that have a live
// record in the workers bucket.
func (w *Worker) liveWorkers(ctx context.Context, ids []string) []string {
	var live []string
	for _, id := range ids {
		if id == w.cfg.WorkerID {
			continue
		}
		if _, found, err := w.kv.workers.Get(ctx, id); err == nil && found {
			live = append(live, id)
		}
	}
	return live
}

// heartbeatRegistration keeps the worker record alive and the catalog fresh.
func (w *Worker) heartbeatRegistration(ctx context.Context) {
	t := time.NewTicker(bus.WorkerTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := w.register(ctx); err != nil && ctx.Err() == nil {
				w.log.WarnContext(ctx, "cannot refresh registration", "error", err)
			}
		}
	}
}

// deregister removes the worker from the catalog and the workers bucket.
func (w *Worker) deregister() {
	ctx, cancel := w.opCtx()
	defer cancel()
	if err := w.kv.workers.Delete(ctx, w.cfg.WorkerID); err != nil {
		w.log.Warn("cannot remove worker record", "error", err)
	}
	for _, h := range w.hostedTools() {
		if err := w.updateCatalog(ctx, h, false); err != nil {
			w.log.Warn("cannot update catalog on exit", "tool", h.Name, "error", err)
		}
	}
}
