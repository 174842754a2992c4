package worker

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/capstanhq/capstan/worker/internal/health"
)

// Readiness is the body of /readyz: Status ("ready" or "not_ready"), every
// check's name with "ok" or its error message, and the details that
// SetReadyDetail set.
type Readiness = health.Readiness

// healthChecker is implemented by a secrets backend that can tell whether it
// is reachable. A backend without it counts as healthy.
type healthChecker interface {
	Health(ctx context.Context) error
}

// AddReadyCheck adds (or replaces) a named readiness check of /readyz. The
// worker is ready only while every check returns nil; an error's message is
// shown in the /readyz body, so it must not hold a secret. check must return
// within the context's deadline (a few seconds). Safe for concurrent use.
func (w *Worker) AddReadyCheck(name string, check func(ctx context.Context) error) {
	w.health.Add(name, check)
}

// SetReadyDetail sets a free-form entry of the "details" object of /readyz
// (for example a sandbox's status); nil removes it. value must encode as
// JSON. Details never make the worker unready. Safe for concurrent use.
func (w *Worker) SetReadyDetail(key string, value any) { w.health.SetDetail(key, value) }

// Readiness runs every readiness check: the built-in ones ("consuming": Run
// is pulling calls; "nats": the connection is up; "streams": the calls and
// results streams answer; "secrets": the secrets backend's Health, when it
// has one; "slots": no slot is held by a call that cannot finish: a result
// unpublishable for 5 seconds, or a lease not refreshed for longer than
// AckWait; "disk": the data directory's file system has at least
// Config.MinFreeDisk free) and those added with AddReadyCheck.
func (w *Worker) Readiness(ctx context.Context) Readiness {
	return w.health.Run(ctx, w.readyChecks())
}

// readyChecks are the built-in readiness checks (Readiness).
func (w *Worker) readyChecks() map[string]health.Check {
	running := func(check health.Check) health.Check {
		return func(ctx context.Context) error {
			select {
			case <-w.ready:
				return check(ctx)
			default:
				return health.ErrNotRunning
			}
		}
	}
	return map[string]health.Check{
		"consuming": running(func(context.Context) error { return nil }),
		"nats": running(func(context.Context) error {
			if !w.conn.Connected() {
				return errors.New("NATS connection is down (reconnecting)")
			}
			return nil
		}),
		"streams": running(func(ctx context.Context) error {
			for _, s := range []string{w.names.CallsStream(), w.names.ResultsStream()} {
				if _, err := w.conn.StreamMsgs(ctx, s); err != nil {
					return err
				}
			}
			return nil
		}),
		"slots": running(func(context.Context) error {
			return health.Slots(w.inflight.Stuck(time.Now(), w.timing.AckWait), w.cfg.Concurrency)
		}),
		"disk": func(context.Context) error { return w.disk.Check() },
		"secrets": func(ctx context.Context) error {
			if h, ok := w.secrets.(healthChecker); ok {
				return h.Health(ctx)
			}
			return nil
		},
	}
}

// Handler serves the worker's health endpoints (mount it on
// CAPSTAN_HTTP_ADDR; the worker binary adds /metrics beside it):
//
//   - GET /healthz: 200 "ok" while the process runs;
//   - GET /readyz: 200 when every readiness check passes, else 503, with
//     the Readiness as JSON.
func (w *Worker) Handler() http.Handler { return health.Handler(w.Readiness) }
