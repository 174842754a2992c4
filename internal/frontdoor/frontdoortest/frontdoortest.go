// Package frontdoortest starts a real worker pool for the tests of the MCP
// front door: an embedded JetStream server, two personalities that may call
// different tools, and a worker hosting those tools.
package frontdoortest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/worker"
)

// The personalities of a Pool and the tools each may call.
const (
	// Alpha may call echo and whoami.
	Alpha = "alpha"
	// Beta may call echo and beta_only.
	Beta = "beta"
)

// Tool names hosted by a Pool besides echo.
const (
	// WhoAmI returns the call as the tool saw it: the value "whoami" and a
	// structured payload with session_id, session_key, platform, agent_id
	// and personality_id.
	WhoAmI = "whoami"
	// BetaOnly is a tool only Beta may call; it returns BetaSecret.
	BetaOnly = "beta_only"
	// BetaSecret is BetaOnly's value.
	BetaSecret = "a value only personality beta may see"
)

// Personality documents of Alpha and Beta.
const (
	AlphaDoc = "id: alpha\ntoolset: [echo, whoami]\n"
	BetaDoc  = "id: beta\ntoolset: [echo, beta_only]\n"
)

// Pool is a running embedded server with a worker pool.
type Pool struct {
	// URL is the server's client URL; connect with Creds.
	URL string
	// Creds is the server's credentials file.
	Creds string
	// Conn is a connection of the test (prefix "capstan").
	Conn *bus.Conn
}

// Start starts the server, stores AlphaDoc and BetaDoc, and runs a worker
// hosting echo, whoami and beta_only until the test ends.
func Start(t testing.TB) *Pool {
	t.Helper()
	url := bustest.Server(t)
	p := &Pool{URL: url, Creds: bustest.Creds(url), Conn: bustest.Conn(t, url, "")}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := p.Conn.KV(ctx, bus.Personalities)
	if err != nil {
		t.Fatalf("personalities bucket: %v", err)
	}
	for id, doc := range map[string]string{Alpha: AlphaDoc, Beta: BetaDoc} {
		if _, err := kv.Put(ctx, id, []byte(doc)); err != nil {
			t.Fatalf("store personality %s: %v", id, err)
		}
	}
	w, err := worker.New(worker.Config{NATSURL: url, NATSCreds: p.Creds, WorkerID: "frontdoortest",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ShutdownGrace: time.Second},
		echo.Tool(), whoAmI(), betaOnly())
	if err != nil {
		t.Fatalf("worker: %v", err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	select {
	case <-w.Ready():
	case err := <-done:
		stop()
		t.Fatalf("worker stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		stop()
		t.Fatal("worker not ready in 30s")
	}
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	return p
}

func whoAmI() tool.Tool {
	return tool.Tool{
		Name:        WhoAmI,
		Description: "Returns the call as the tool sees it.",
		Schema:      []byte(`{"type":"object","properties":{},"additionalProperties":false}`),
		Toolset:     "test",
		Execute: func(_ context.Context, _ json.RawMessage, tc *tool.Context) (tool.Result, error) {
			r := tool.OK(WhoAmI)
			r.Structured = map[string]any{"session_id": tc.SessionID, "session_key": tc.SessionKey, "platform": tc.Platform,
				"agent_id": tc.AgentID, "personality_id": tc.PersonalityID}
			return r, nil
		},
	}
}

func betaOnly() tool.Tool {
	return tool.Tool{
		Name:        BetaOnly,
		Description: "A tool only personality beta may call.",
		Schema:      []byte(`{"type":"object","properties":{}}`),
		Toolset:     "test",
		Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
			return tool.OK(BetaSecret), nil
		},
	}
}
