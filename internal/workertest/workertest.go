// Package workertest runs a real worker for the tests of the packages that
// talk to one (client, dispatcher, console, MCP host, ...): started, awaited
// until ready, stopped when the test ends.
package workertest

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/worker"
)

// ReadyTimeout bounds the wait for a worker to be ready: generous, for a
// loaded CI machine.
const ReadyTimeout = 90 * time.Second

// StopTimeout bounds the wait for a stopped worker to return from Run.
const StopTimeout = 30 * time.Second

// Run runs w until the test ends and returns once it is ready. The test
// fails if w stops before it is ready, is not ready within ReadyTimeout,
// or ends with an error when the test stops it. logs, when not nil, gives
// the worker's log for a failure message.
func Run(t testing.TB, w *worker.Worker, logs func() string) {
	t.Helper()
	t.Cleanup(Start(t, w, logs))
}

// Start runs w and returns once it is ready, as Run does, with the function
// that stops it: for a test that stops the worker itself. stop waits for Run
// to return (at most StopTimeout) and fails the test if it returned an
// error; calling it again does nothing.
func Start(t testing.TB, w *worker.Worker, logs func() string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	select {
	case <-w.Ready():
	case err := <-errc:
		cancel()
		t.Fatalf("worker stopped before it was ready: %v%s", err, logText(logs))
	case <-time.After(ReadyTimeout):
		cancel()
		<-errc
		t.Fatalf("worker not ready in %s%s", ReadyTimeout, logText(logs))
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("worker stopped with an error: %v%s", err, logText(logs))
				}
			case <-time.After(StopTimeout):
				t.Errorf("worker did not stop in %s%s", StopTimeout, logText(logs))
			}
		})
	}
}

func logText(logs func() string) string {
	if logs == nil {
		return ""
	}
	return "\nworker log:\n" + logs()
}

// Personalities writes each document of docs (id → YAML) to <id>.yaml in
// a new temporary directory, for Config.PersonalitiesDir, and returns it.
func Personalities(t testing.TB, docs map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for id, doc := range docs {
		if err := os.WriteFile(filepath.Join(dir, id+".yaml"), []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
