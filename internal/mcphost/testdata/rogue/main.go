// Command rogue is a stdio MCP server for the mcphost tests that ignores any
// roots or arguments and tries whatever a call asks of it: read any path,
// dial any address, print its environment, crash. What stops it is the
// worker's confinement, never the server itself. The tests build it with
// "go build" (testdata is not part of the module's packages).
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type pathIn struct {
	Path string `json:"path" jsonschema:"file to read"`
}

type dialIn struct {
	Addr string `json:"addr" jsonschema:"host:port to connect to over TCP"`
}

type envIn struct {
	Name string `json:"name" jsonschema:"environment variable to print"`
}

type sleepIn struct {
	MS int `json:"ms" jsonschema:"milliseconds to sleep, or until cancelled"`
}

type stderrIn struct {
	Bytes int `json:"bytes" jsonschema:"bytes to write to stderr, in lines of 100"`
}

type empty struct{}

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "rogue", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "read_path", Description: "Reads any file."},
		func(_ context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, any, error) {
			b, err := os.ReadFile(in.Path)
			if err != nil {
				return nil, nil, err
			}
			return text(string(b)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "dial", Description: "Opens a TCP connection to any address."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in dialIn) (*mcp.CallToolResult, any, error) {
			d := net.Dialer{Timeout: 3 * time.Second}
			c, err := d.DialContext(ctx, "tcp", in.Addr)
			if err != nil {
				return nil, nil, err
			}
			_ = c.Close()
			return text("connected to " + in.Addr), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "env", Description: "Prints an environment variable."},
		func(_ context.Context, _ *mcp.CallToolRequest, in envIn) (*mcp.CallToolResult, any, error) {
			v, ok := os.LookupEnv(in.Name)
			if !ok {
				return text(in.Name + " is not set"), nil, nil
			}
			log.Printf("env %s=%s", in.Name, v) // stderr: the worker's log must redact it
			return text(in.Name + "=" + v), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "Sleeps, honouring cancellation."},
		func(ctx context.Context, req *mcp.CallToolRequest, in sleepIn) (*mcp.CallToolResult, any, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: "sleeping", Progress: 1, Total: 2})
			}
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
				return text(fmt.Sprintf("slept %dms", in.MS)), nil, nil
			case <-ctx.Done():
				log.Printf("sleep cancelled: %v", ctx.Err())
				return nil, nil, ctx.Err()
			}
		})
	mcp.AddTool(s, &mcp.Tool{Name: "hang", Description: "Blocks the whole server for good, like a single-threaded server stuck in a call."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, any, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: "hanging"})
			}
			log.Print("hanging on request")
			freeze.Do(func() { close(frozen) })
			hold()
			return nil, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "Exits at once with status 3."},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			log.Print("crashing on request")
			os.Exit(3)
			return nil, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "stderr", Description: "Writes to stderr, as much as asked."},
		func(_ context.Context, _ *mcp.CallToolRequest, in stderrIn) (*mcp.CallToolResult, any, error) {
			line := strings.Repeat("x", 99) + "\n"
			for n := 0; n < in.Bytes; n += len(line) {
				if _, err := os.Stderr.WriteString(line); err != nil {
					return nil, nil, err
				}
			}
			return text(fmt.Sprintf("wrote %d bytes to stderr", in.Bytes)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Answers with a tool error."},
		func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "failing on request"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add_tool", Description: "Adds a tool extra_<name> (the client is told its list changed)."},
		func(_ context.Context, _ *mcp.CallToolRequest, in envIn) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(s, &mcp.Tool{Name: "extra_" + in.Name, Description: "Added at run time."},
				func(context.Context, *mcp.CallToolRequest, empty) (*mcp.CallToolResult, any, error) {
					return text("extra " + in.Name), nil, nil
				})
			return text("added extra_" + in.Name), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "remove_tool", Description: "Removes a tool."},
		func(_ context.Context, _ *mcp.CallToolRequest, in envIn) (*mcp.CallToolResult, any, error) {
			s.RemoveTools(in.Name)
			return text("removed " + in.Name), nil, nil
		})
	// The server's own reads and writes stop once it hangs: the Go SDK
	// serves calls concurrently, so without this it would still answer.
	t := &mcp.IOTransport{Reader: gated{os.Stdin}, Writer: gatedWriter{os.Stdout}}
	if err := s.Run(context.Background(), t); err != nil {
		log.Fatal(err)
	}
}

// frozen is closed by the hang tool: from then on the server reads no
// request and writes no answer.
var (
	frozen = make(chan struct{})
	freeze sync.Once
)

// hold blocks for good once the server hangs (sleeping, so that the
// runtime never sees a deadlock and exits).
func hold() {
	select {
	case <-frozen:
		for {
			time.Sleep(time.Hour)
		}
	default:
	}
}

// gated is the server's input: what arrives after the server hangs is
// never handed on.
type gated struct{ io.ReadCloser }

func (g gated) Read(p []byte) (int, error) {
	n, err := g.ReadCloser.Read(p)
	hold()
	return n, err
}

// gatedWriter is the server's output: nothing is written once it hangs.
type gatedWriter struct{ io.WriteCloser }

func (g gatedWriter) Write(p []byte) (int, error) {
	hold()
	return g.WriteCloser.Write(p)
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}
