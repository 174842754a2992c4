package worker

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

// readyTimeout bounds all readiness checks of one /readyz request.
const readyTimeout = 3 * time.Second

// healthChecker is implemented by a secrets backend that can tell whether it
// is reachable. A backend without it counts as healthy.
type healthChecker interface {
	Health(ctx context.Context) error
}

// health holds the readiness checks and details of /readyz.
type health struct {
	mu      sync.Mutex
	checks  map[string]func(context.Context) error
	details map[string]any
}

func (h *health) init() {
	h.checks = make(map[string]func(context.Context) error)
	h.details = make(map[string]any)
}

// AddReadyCheck adds (or replaces) a named readiness check of /readyz. The
// worker is ready only while every check returns nil; an error's message is
// shown in the /readyz body, so it must not hold a secret. check must return
// within the context's deadline (a few seconds). Safe for concurrent use.
func (w *Worker) AddReadyCheck(name string, check func(ctx context.Context) error) {
	w.health.mu.Lock()
	defer w.health.mu.Unlock()
	w.health.checks[name] = check
}

// SetReadyDetail sets a free-form entry of the "details" object of /readyz
// (for example a sandbox's status); nil removes it. value must encode as
// JSON. Details never make the worker unready. Safe for concurrent use.
func (w *Worker) SetReadyDetail(key string, value any) {
	w.health.mu.Lock()
	defer w.health.mu.Unlock()
	if value == nil {
		delete(w.health.details, key)
		return
	}
	w.health.details[key] = value
}

// Readiness is the body of /readyz.
type Readiness struct {
	// Status is "ready" or "not_ready".
	Status string `json:"status"`
	// Checks maps every check's name to "ok" or its error message.
	Checks map[string]string `json:"checks"`
	// Details holds what SetReadyDetail set.
	Details map[string]any `json:"details"`
}

// Readiness runs every readiness check: the built-in ones ("consuming": Run
// is pulling calls; "nats": the connection is up; "streams": the calls and
// results streams answer; "secrets": the secrets backend's Health, when it
// has one; "slots": no slot is held by a call that cannot finish, see
// checkSlots) and those added with AddReadyCheck.
func (w *Worker) Readiness(ctx context.Context) Readiness {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	checks := map[string]func(context.Context) error{
		"consuming": w.checkConsuming,
		"nats":      w.checkNATS,
		"streams":   w.checkStreams,
		"secrets":   w.checkSecrets,
		"slots":     w.checkSlots,
	}
	w.health.mu.Lock()
	maps.Copy(checks, w.health.checks)
	details := maps.Clone(w.health.details)
	w.health.mu.Unlock()

	out := Readiness{Status: "ready", Checks: make(map[string]string, len(checks)), Details: details}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range slices.Sorted(maps.Keys(checks)) {
		wg.Go(func() {
			msg := "ok"
			if err := runCheck(ctx, checks[name]); err != nil {
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

// runCheck runs one check, treating a panic as a failure.
func runCheck(ctx context.Context, check func(context.Context) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = errors.New("check panicked")
		}
	}()
	return check(ctx)
}

var errNotRunning = errors.New("not consuming calls yet")

func (w *Worker) checkConsuming(context.Context) error {
	if !w.consuming() {
		return errNotRunning
	}
	return nil
}

func (w *Worker) consuming() bool {
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

func (w *Worker) checkNATS(context.Context) error {
	if !w.consuming() {
		return errNotRunning
	}
	if !w.conn.Connected() {
		return errors.New("NATS connection is down (reconnecting)")
	}
	return nil
}

func (w *Worker) checkStreams(ctx context.Context) error {
	if !w.consuming() {
		return errNotRunning
	}
	for _, s := range []string{w.names.CallsStream(), w.names.ResultsStream()} {
		if _, err := w.conn.StreamMsgs(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// checkSlots fails while slots are held by calls that cannot finish: a
// result unpublishable for 5 seconds, or a lease not refreshed for longer
// than AckWait. Its message counts them and names the first three.
func (w *Worker) checkSlots(context.Context) error {
	if !w.consuming() {
		return errNotRunning
	}
	stuck := w.inflight.Stuck(time.Now(), w.timing.AckWait)
	if len(stuck) == 0 {
		return nil
	}
	shown := stuck[:min(len(stuck), 3)]
	msg := fmt.Sprintf("%d of %d slots held by calls that cannot finish: %s", len(stuck), w.cfg.Concurrency, strings.Join(shown, "; "))
	if more := len(stuck) - len(shown); more > 0 {
		msg += fmt.Sprintf("; and %d more", more)
	}
	return errors.New(msg)
}

func (w *Worker) checkSecrets(ctx context.Context) error {
	if h, ok := w.secrets.(healthChecker); ok {
		return h.Health(ctx)
	}
	return nil
}

// Handler serves the worker's health endpoints (mount it on
// CAPSTAN_HTTP_ADDR; the worker binary adds /metrics beside it):
//
//   - GET /healthz: 200 "ok" while the process runs;
//   - GET /readyz: 200 when every readiness check passes, else 503, with
//     the Readiness as JSON.
func (w *Worker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(rw, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, r *http.Request) {
		rd := w.Readiness(r.Context())
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
