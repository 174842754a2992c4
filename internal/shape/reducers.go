package shape

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/capstanhq/capstan/tool"
)

// ErrReducerExists is returned by [Reducers.Register] when the tool already has
// a reducer.
var ErrReducerExists = errors.New("reducer already registered")

// Reducers is the registry of result reducers: at most one [tool.Reducer] per
// tool name. The zero value is not usable; call [NewReducers]. A *Reducers is
// safe for concurrent use; Apply on a nil *Reducers reduces nothing.
type Reducers struct {
	mu sync.RWMutex
	m  map[string]*registration
}

// registration is one Register call; its address identifies it, so an
// unregister func removes its own registration only.
type registration struct{ fn tool.Reducer }

// NewReducers returns an empty registry.
func NewReducers() *Reducers {
	return &Reducers{m: map[string]*registration{}}
}

// Register installs fn as the reducer of toolName. It returns an error
// matching [ErrReducerExists] when toolName already has one, and an error when
// toolName is empty or fn is nil. The returned unregister func removes this
// registration; it is idempotent, safe for concurrent use, and never removes a
// later registration of the same name.
func (r *Reducers) Register(toolName string, fn tool.Reducer) (unregister func(), err error) {
	if toolName == "" {
		return nil, errors.New("register reducer: tool name is empty")
	}
	if fn == nil {
		return nil, fmt.Errorf("register reducer for %s: reducer is nil", toolName)
	}
	reg := &registration{fn: fn}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, taken := r.m[toolName]; taken {
		return nil, fmt.Errorf("register reducer for %s: %w", toolName, ErrReducerExists)
	}
	r.m[toolName] = reg
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.m[toolName] == reg {
			delete(r.m, toolName)
		}
	}, nil
}

// Apply runs the reducer registered for toolName on res (ok and error results
// alike) with the call's args and context, and returns its result with
// reduced=true. With no reducer registered it returns res and false. When the
// reducer panics it returns res unchanged (the reducer is given a copy of
// res.Structured, so a reducer that changed it in place before panicking does
// not leak the change) and false.
func (r *Reducers) Apply(toolName string, res tool.Result, args json.RawMessage, c *tool.Context) (out tool.Result, reduced bool) {
	if r == nil {
		return res, false
	}
	r.mu.RLock()
	reg := r.m[toolName]
	r.mu.RUnlock()
	if reg == nil {
		return res, false
	}
	defer func() {
		if recover() != nil {
			out, reduced = res, false
		}
	}()
	in := res
	if res.Structured != nil {
		in.Structured = cloneJSON(res.Structured).(map[string]any)
	}
	if res.CostUSD != nil {
		cost := *res.CostUSD
		in.CostUSD = &cost
	}
	return reg.fn(in, args, c), true
}

// cloneJSON copies the maps and slices of a JSON-like value; other values are
// shared.
func cloneJSON(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = cloneJSON(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cloneJSON(e)
		}
		return out
	default:
		return v
	}
}
