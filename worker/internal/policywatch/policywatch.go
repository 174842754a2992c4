// Package policywatch is a worker's live view of the personalities bucket
// (Watch), and the loading of personality files into it at start (Loader).
package policywatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
)

// Watch is the worker's live view of the personalities bucket. A change
// in the bucket applies to the next call; an invalid document is kept as an
// error so its calls are refused (fail closed), never run under no policy.
type Watch struct {
	mu   sync.RWMutex
	docs map[string]policyEntry
	stop func()
}

// Stop ends the watch.
func (ps *Watch) Stop() { ps.stop() }

type policyEntry struct {
	p   *capability.Personality
	err error
}

// Watcher is the personalities bucket, watched.
type Watcher interface {
	Watch(ctx context.Context, fn func(bus.Entry)) (stop func(), err error)
}

// Start keeps every stored personality parsed (home is the value of ${HOME}
// in them) until Stop; onPolicy, when not nil, sees each valid document as
// it arrives (outside the lock).
func Start(ctx context.Context, kv Watcher, home string, onPolicy func(*capability.Personality)) (*Watch, error) {
	ps := &Watch{docs: make(map[string]policyEntry)}
	stop, err := kv.Watch(ctx, func(e bus.Entry) {
		if e.Deleted {
			ps.mu.Lock()
			delete(ps.docs, e.Key)
			ps.mu.Unlock()
			return
		}
		p, err := capability.Parse(e.Value, capability.Env{Home: home})
		if err == nil && p.ID != e.Key {
			err = fmt.Errorf("document id %q does not match its key %q", p.ID, e.Key)
		}
		ps.mu.Lock()
		ps.docs[e.Key] = policyEntry{p: p, err: err}
		ps.mu.Unlock()
		if err == nil && onPolicy != nil {
			onPolicy(p)
		}
	})
	if err != nil {
		return nil, err
	}
	ps.stop = stop
	return ps, nil
}

// Get returns personality id, or the refusal message of an unknown or
// invalid one.
func (ps *Watch) Get(id string) (*capability.Personality, error) {
	ps.mu.RLock()
	e, ok := ps.docs[id]
	ps.mu.RUnlock()
	if !ok {
		return nil, errors.New("Unknown personality: " + id)
	}
	if e.err != nil {
		//lint:ignore ST1005 shown as is in results, like the spec's refusals
		return nil, fmt.Errorf("Personality %s is invalid: %v", id, e.err)
	}
	return e.p, nil
}

// Store is the personalities bucket, as the loader reads and writes it.
type Store interface {
	Get(ctx context.Context, key string) (bus.Entry, bool, error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
}

// Loader stores the personality files of a directory in the personalities
// bucket at start, each validated against the hosted tools.
type Loader struct {
	// Dir is Config.PersonalitiesDir; empty loads nothing.
	Dir string
	// Home is the value of ${HOME} in personalities.
	Home string
	// Default is the default personality, whose absence is warned of.
	Default string
	// Tools are the tools given to the worker, which every file is
	// validated against (registration-time validation).
	Tools []*tool.Tool
	// ValidateMCP, when set, validates a personality against the hosted MCP
	// servers it lists.
	ValidateMCP func(*capability.Personality) []capability.ValidationError
	KV          Store
	Names       protocol.Names
	Log         *slog.Logger
}

func (l *Loader) validateMCP(p *capability.Personality) []capability.ValidationError {
	if l.ValidateMCP == nil {
		return nil
	}
	return l.ValidateMCP(p)
}

// Load stores the personality files of Dir (loadFiles), then warns when the default personality does not
// exist: every call that names no personality would be refused.
func (l *Loader) Load(ctx context.Context) error {
	if err := l.loadFiles(ctx); err != nil {
		return err
	}
	l.warnNoDefault(ctx)
	return nil
}

// warnNoDefault logs a warning saying how to add the default
// personality when the bucket holds none under that id. A failed look-up is
// logged at debug level only: the calls themselves report what is wrong.
func (l *Loader) warnNoDefault(ctx context.Context) {
	id := l.Default
	_, found, err := l.KV.Get(ctx, id)
	if err != nil {
		l.Log.DebugContext(ctx, "could not check for the default personality", "personality", id, "error", err)
		return
	}
	if found {
		return
	}
	l.Log.WarnContext(ctx, fmt.Sprintf("no personality %q exists: calls that name no personality will be refused with \"Unknown personality: %s\"; "+
		"add one: put a file with \"id: %s\" in the personalities directory (Config.PersonalitiesDir, CAPSTAN_PERSONALITIES_DIR; "+
		"examples/personalities has some), or store it with \"dispatcher personality put <file>\" (docs/capabilities.md)", id, id, id),
		"personality", id, "bucket", l.Names.PersonalitiesBucket())
}

// loadFiles validates every *.yaml, *.yml and *.json file of
// Dir against the hosted tools and stores them in the bucket.
// Any invalid file stops the worker, naming the file and all its errors; so
// does a NATS user that may not write the bucket, saying how to load them.
func (l *Loader) loadFiles(ctx context.Context) error {
	dir := l.Dir
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("CAPSTAN_PERSONALITIES_DIR: %w", err)
	}
	tools := l.Tools
	type doc struct {
		file string
		id   string
		data []byte
	}
	var docs []doc
	var problems []string
	seen := map[string]string{}
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || !slices.Contains([]string{".yaml", ".yml", ".json"}, ext) {
			continue
		}
		file := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(file)
		if err != nil {
			problems = append(problems, fmt.Sprintf("personality file %s: %v", file, err))
			continue
		}
		p, err := capability.Parse(data, capability.Env{Home: l.Home})
		if err != nil {
			problems = append(problems, fmt.Sprintf("personality file %s is invalid: %v", file, err))
			continue
		}
		if other, dup := seen[p.ID]; dup {
			problems = append(problems, fmt.Sprintf("personality file %s: id %q is also defined in %s", file, p.ID, other))
			continue
		}
		seen[p.ID] = file
		if errs := append(capability.Validate(tools, p), l.validateMCP(p)...); len(errs) > 0 {
			lines := make([]string, len(errs))
			for i, ve := range errs {
				lines[i] = fmt.Sprintf("tool %s, %s: %s", ve.Tool, ve.Capability, ve.Message)
			}
			problems = append(problems, fmt.Sprintf("personality file %s (id %s) fails validation:\n  %s", file, p.ID, strings.Join(lines, "\n  ")))
			continue
		}
		docs = append(docs, doc{file: file, id: p.ID, data: data})
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	for _, d := range docs {
		if _, err := l.KV.Put(ctx, d.id, d.data); err != nil {
			if errors.Is(err, bus.ErrPermissionDenied) {
				// A deployment with least-privilege NATS users (deploy/nats):
				// only the operator user writes personalities.
				return fmt.Errorf("CAPSTAN_PERSONALITIES_DIR is set (%s), but this worker's NATS user may not write the %s bucket "+
					"(storing personality %s: %w): load the personalities as the operator user with "+
					"\"dispatcher personality put <file or directory>\" and unset CAPSTAN_PERSONALITIES_DIR on the worker",
					dir, l.Names.PersonalitiesBucket(), d.id, err)
			}
			return fmt.Errorf("store personality %s from %s: %w", d.id, d.file, err)
		}
	}
	if len(docs) > 0 {
		l.Log.InfoContext(ctx, "personalities loaded", "count", len(docs), "dir", dir)
	}
	return nil
}
