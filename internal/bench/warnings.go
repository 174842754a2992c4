package bench

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// maxWarnings is how many distinct warnings a fairness run's worker keeps.
const maxWarnings = 5

// warnings is a slog handler that keeps the distinct warnings (message and
// error) a worker logs, at most maxWarnings, and passes every record on to
// next. A fairness run names them when it fails: a worker that cannot open
// a personality's consumer says why only in its log.
type warnings struct {
	next  slog.Handler
	state *warnState
}

type warnState struct {
	mu   sync.Mutex
	seen []string
}

func newWarnings(next slog.Handler) *warnings { return &warnings{next: next, state: &warnState{}} }

func (w *warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || w.next.Enabled(ctx, l)
}

func (w *warnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		msg := r.Message
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "error" {
				msg += ": " + a.Value.String()
				return false
			}
			return true
		})
		w.state.add(msg)
	}
	if !w.next.Enabled(ctx, r.Level) {
		return nil
	}
	return w.next.Handle(ctx, r)
}

func (w *warnings) WithAttrs(as []slog.Attr) slog.Handler {
	return &warnings{next: w.next.WithAttrs(as), state: w.state}
}

func (w *warnings) WithGroup(name string) slog.Handler {
	return &warnings{next: w.next.WithGroup(name), state: w.state}
}

func (s *warnState) add(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.seen {
		if m == msg {
			return
		}
	}
	if len(s.seen) < maxWarnings {
		s.seen = append(s.seen, msg)
	}
}

// String is the warnings kept, "; "-separated.
func (w *warnings) String() string {
	w.state.mu.Lock()
	defer w.state.mu.Unlock()
	return strings.Join(w.state.seen, "; ")
}
