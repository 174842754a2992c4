package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
)

// Dispatching a batch of calls and following their progress. The example
// starts its own worker with an embedded NATS server; against a running
// pool, only the client part is needed.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "capstan-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	// A pool: one worker, the built-in tools, a personality "default" that
	// may call echo.
	personalities := filepath.Join(dir, "personalities")
	_ = os.Mkdir(personalities, 0o700)
	_ = os.WriteFile(filepath.Join(personalities, "default.yaml"), []byte("id: default\ntoolset: [echo]\n"), 0o600)
	w, err := worker.New(worker.Config{DataDir: filepath.Join(dir, "data"), EmbeddedPort: -1, PersonalitiesDir: personalities,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, builtin.All()...)
	if err != nil {
		panic(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	defer func() { cancel(); <-stopped }()
	<-w.Ready()
	srv, _ := w.Embedded()

	// The dispatcher side.
	c, err := client.New(ctx, client.Config{NATSURL: srv.URL, NATSCreds: srv.CredsFile})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	progress := make(chan client.Progress, 8)
	stop, err := c.Progress(ctx, tool.AudienceUser, "turn-1", true, func(p client.Progress) { progress <- p })
	if err != nil {
		panic(err)
	}
	defer stop()

	results := c.ExecuteParallel(ctx, client.Turn{BatchID: "turn-1"}, []client.Call{
		{Tool: "echo", SessionID: "s-1", Args: json.RawMessage(`{"text":"hello","progress":[{"message":"half way","percent":50,"audience":"user"}]}`)},
		{Tool: "echo", SessionID: "s-1", Args: json.RawMessage(`{"txt":"typo"}`)},
		{Tool: "read_file", SessionID: "s-1", Args: json.RawMessage(`{"path":"notes.txt"}`)},
	})
	for _, r := range results {
		switch {
		case r.OK:
			fmt.Printf("%s: %s\n", r.Tool, r.Value)
		case r.Code == tool.CodeInputInvalid:
			fmt.Printf("%s: fix the arguments: %s\n", r.Tool, r.Error)
		default:
			fmt.Printf("%s: %s: %s\n", r.Tool, r.Code, r.Error)
		}
	}
	p := <-progress
	fmt.Printf("progress of %s: %s (%.0f%%)\n", p.ToolName, p.Message, *p.Percent)
	// Output:
	// echo: hello
	// echo: fix the arguments: invalid arguments: args.text is required (required); args.txt is not allowed (additionalProperties)
	// read_file: not_available: Tool read_file is not permitted for this personality
	// progress of echo: half way (50%)
}
