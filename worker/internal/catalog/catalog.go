// Package catalog announces a worker in the workers bucket and its tools in
// the tools bucket (the catalog), keeps both fresh, and takes them back when
// the worker leaves. A tool name belongs to one pool.
package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/worker/internal/toolset"
)

// Tools is the tools bucket.
type Tools interface {
	Get(ctx context.Context, key string) (bus.Entry, bool, error)
	Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error)
	Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error)
}

// Workers is the workers bucket.
type Workers interface {
	Get(ctx context.Context, key string) (bus.Entry, bool, error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Delete(ctx context.Context, key string) error
}

// Registry registers one worker and its tools. Set every field before the
// first Register.
type Registry struct {
	Tools    Tools
	Workers  Workers
	WorkerID string
	Pool     string
	// Concurrency is the worker's slots; InFlight counts its running calls.
	Concurrency int
	InFlight    func() int
	// Hosted returns every tool the worker hosts now.
	Hosted func() []*toolset.Hosted
	Log    *slog.Logger
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

// Register announces the worker and publishes every hosted tool to the
// catalog. A tool already registered by a live worker of another pool stops
// the worker: a tool name belongs to one pool.
func (r *Registry) Register(ctx context.Context) error {
	all := r.Hosted()
	names := make([]string, len(all))
	for i, h := range all {
		names[i] = h.Name
	}
	rec, _ := json.Marshal(workerRecord{ID: r.WorkerID, Pool: r.Pool, Tools: names, Started: time.Now().UTC(), Protocol: protocol.Version,
		Concurrency: r.Concurrency, InFlight: r.InFlight()})
	for _, h := range all {
		if err := r.CheckPool(ctx, h.Name); err != nil {
			return err
		}
	}
	if _, err := r.Workers.Put(ctx, r.WorkerID, rec); err != nil {
		return fmt.Errorf("announce worker: %w", err)
	}
	for _, h := range all {
		if err := r.Update(ctx, h, true); err != nil {
			return err
		}
	}
	return nil
}

// CheckPool fails when tool name is registered by a live worker of
// another pool.
func (r *Registry) CheckPool(ctx context.Context, name string) error {
	e, found, err := r.Tools.Get(ctx, name)
	if err != nil || !found {
		return err
	}
	var cur protocol.CatalogEntry
	if json.Unmarshal(e.Value, &cur) != nil || cur.Pool == r.Pool {
		return nil
	}
	if live := r.liveWorkers(ctx, cur.Workers); len(live) > 0 {
		return fmt.Errorf("tool %s is already registered by live worker %s of pool %s; a tool name belongs to one pool (this worker serves pool %s)", name, live[0], cur.Pool, r.Pool)
	}
	return nil
}

// Update writes a tool's entry with this worker added (or removed),
// keeping only live workers of this pool. It retries on concurrent updates.
func (r *Registry) Update(ctx context.Context, h *toolset.Hosted, add bool) error {
	for range 20 {
		e, found, err := r.Tools.Get(ctx, h.Name)
		if err != nil {
			return fmt.Errorf("catalog %s: %w", h.Name, err)
		}
		workers := []string{}
		if found {
			var cur protocol.CatalogEntry
			if json.Unmarshal(e.Value, &cur) == nil && cur.Pool == r.Pool {
				workers = r.liveWorkers(ctx, cur.Workers)
			}
		}
		if add {
			workers = append(workers, r.WorkerID)
		}
		slices.Sort(workers)
		entry := h.Entry
		entry.Workers = slices.Compact(workers)
		entry.Updated = time.Now().UTC()
		data, err := json.Marshal(entry)
		if err != nil {
			return err
		}
		if found {
			_, err = r.Tools.Update(ctx, h.Name, data, e.Revision)
		} else {
			_, err = r.Tools.Create(ctx, h.Name, data, 0)
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
func (r *Registry) liveWorkers(ctx context.Context, ids []string) []string {
	var live []string
	for _, id := range ids {
		if id == r.WorkerID {
			continue
		}
		if _, found, err := r.Workers.Get(ctx, id); err == nil && found {
			live = append(live, id)
		}
	}
	return live
}

// Heartbeat keeps the worker record alive and the catalog fresh.
func (r *Registry) Heartbeat(ctx context.Context) {
	t := time.NewTicker(bus.WorkerTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.Register(ctx); err != nil && ctx.Err() == nil {
				r.Log.WarnContext(ctx, "cannot refresh registration", "error", err)
			}
		}
	}
}

// Deregister removes the worker from the catalog and the workers bucket,
// within ctx.
func (r *Registry) Deregister(ctx context.Context) {
	if err := r.Workers.Delete(ctx, r.WorkerID); err != nil {
		r.Log.Warn("cannot remove worker record", "error", err)
	}
	for _, h := range r.Hosted() {
		if err := r.Update(ctx, h, false); err != nil {
			r.Log.Warn("cannot update catalog on exit", "tool", h.Name, "error", err)
		}
	}
}
