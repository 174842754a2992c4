// Package health is a worker's /healthz and /readyz: the readiness checks
// and details, run together under one deadline, and the HTTP handler. The
// worker adds its built-in checks; it imports nothing of the worker.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Timeout bounds all readiness checks of one /readyz request.
const Timeout = 3 * time.Second

// Check is a readiness check: nil when ready, else why not (a message
// shown in /readyz, which must not hold a secret).
type Check func(ctx context.Context) error

// Readiness is the body of /readyz.
type Readiness struct {
	// Status is "ready" or "not_ready".
	Status string `json:"status"`
	// Checks maps every check's name to "ok" or its error message.
	Checks map[string]string `json:"checks"`
	// Details holds what SetReadyDetail set.
	Details map[string]any `json:"details"`
}

// Registry holds the readiness checks and details added at run time. The
// zero value is not ready: use New. Safe for concurrent use.
type Registry struct {
	mu      sync.Mutex
	checks  map[string]Check
	details map[string]any
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{checks: make(map[string]Check), details: make(map[string]any)}
}

// Add adds (or replaces) the check called name.
func (r *Registry) Add(name string, check Check) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks[name] = check
}

// SetDetail sets the detail key to value, which must encode as JSON; nil
// removes it.
func (r *Registry) SetDetail(key string, value any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if value == nil {
		delete(r.details, key)
		return
	}
	r.details[key] = value
}

// Run runs builtin and the added checks (an added check replaces a builtin
// one of its name) at once, all within Timeout, and returns the readiness:
// ready only when every check returned nil.
func (r *Registry) Run(ctx context.Context, builtin map[string]Check) Readiness {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	checks := maps.Clone(builtin)
	if checks == nil {
		checks = make(map[string]Check)
	}
	r.mu.Lock()
	maps.Copy(checks, r.checks)
	details := maps.Clone(r.details)
	r.mu.Unlock()

	out := Readiness{Status: "ready", Checks: make(map[string]string, len(checks)), Details: details}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range slices.Sorted(maps.Keys(checks)) {
		wg.Go(func() {
			msg := "ok"
			if err := run(ctx, checks[name]); err != nil {
				msg = err.Error()
			}
			mu.Lock()
			defer mu.Unlock()
			out.Checks[name] = msg
			if msg != "ok" {
				out.Status = "not_ready"
			}
		})
	}
	wg.Wait()
	return out
}

// run runs one check, treating a panic as a failure.
func run(ctx context.Context, check Check) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = errors.New("check panicked")
		}
	}()
	return check(ctx)
}

// ErrNotRunning is the failure of a check that needs a running worker.
var ErrNotRunning = errors.New("not consuming calls yet")

// Slots is the "slots" check's verdict on stuck, the calls that cannot
// finish (cancelbook.Book.Stuck) of a worker of concurrency slots: nil for
// none, else an error that counts them and names the first three.
func Slots(stuck []string, concurrency int) error {
	if len(stuck) == 0 {
		return nil
	}
	shown := stuck[:min(len(stuck), 3)]
	msg := fmt.Sprintf("%d of %d slots held by calls that cannot finish: %s", len(stuck), concurrency, strings.Join(shown, "; "))
	if more := len(stuck) - len(shown); more > 0 {
		msg += fmt.Sprintf("; and %d more", more)
	}
	return errors.New(msg)
}

// Handler serves GET /healthz (200 "ok" while the process runs) and GET
// /readyz (200 when readiness says ready, else 503, with the Readiness as
// JSON).
func Handler(readiness func(context.Context) Readiness) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(rw, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, r *http.Request) {
		rd := readiness(r.Context())
		body, err := json.MarshalIndent(rd, "", "  ")
		if err != nil {
			http.Error(rw, "cannot encode readiness: "+err.Error(), http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		if rd.Status != "ready" {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = rw.Write(append(body, '\n'))
	})
	return mux
}
