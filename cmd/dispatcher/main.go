// Command dispatcher submits tool calls to a Capstan worker fleet and prints
// their results. With no CAPSTAN_NATS_URL and no server on
// nats://127.0.0.1:4222 it runs in local mode: an embedded JetStream server
// and an in-process worker pool with the built-in tools.
//
// Run "dispatcher help" for the commands and environment variables.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/capstanhq/capstan/internal/telemetry/otelsetup"
)

// Exit codes.
const (
	exitOK     = 0 // every result ok
	exitFailed = 1 // at least one ok:false result
	exitUsage  = 2 // usage, configuration or infrastructure error
)

// defaultProbeURL is where local mode looks for a running server first.
const defaultProbeURL = "nats://127.0.0.1:4222"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command in args and returns the exit code. It reads the
// environment only through getenv.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	return newApp(getenv, stdin, stdout, stderr).main(ctx, args)
}

// app is one invocation: its I/O and the address local mode probes.
type app struct {
	getenv func(string) string
	stdin  io.Reader
	// stdout and stderr are safe for concurrent writes (progress tails and
	// the in-process pool's logger write from their own goroutines).
	stdout, stderr io.Writer
	// stderrTTY is true when stderr is a terminal: progress bar, text logs.
	stderrTTY bool
	probeURL  string
	// tel is the OTel set-up of the commands that connect (setup).
	tel *otelsetup.Telemetry
	// natsURL and natsCreds are what the client of setup connected with
	// (the console opens a second connection with them).
	natsURL, natsCreds string
	// local is the in-process worker pool of local mode, nil otherwise.
	local *localPool
	// poolLogs: local mode writes the pool's logs on stderr rather than to
	// its log file (--pool-logs).
	poolLogs bool
}

func newApp(getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) *app {
	return &app{
		getenv:    getenv,
		stdin:     stdin,
		stdout:    &lockedWriter{w: stdout},
		stderr:    &lockedWriter{w: stderr},
		stderrTTY: isTerminal(stderr),
		probeURL:  defaultProbeURL,
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// command is one sub-command of the dispatcher.
type command struct {
	name    string
	args    string
	summary string
	run     func(a *app, ctx context.Context, args []string) int
}

func commands() []command {
	return []command{
		{"call", "<tool> --args '<json>' [--personality id] [--session s] [--timeout 30s] [--batch b] [--dry-run] [--follow] [--json]",
			"run one call; print its value (stdout) or '<code>: <error>' (stderr)", (*app).cmdCall},
		{"batch", "<calls.jsonl|-> [-o results.jsonl] [--wait d]",
			"run every line of a JSONL file as a call; results as JSONL in input order", (*app).cmdBatch},
		{"tools", "[--personality id] [--json]", "list the tool catalog (as the LLM of a personality sees it)", (*app).cmdTools},
		{"queue", "[--pool p] [--json]",
			"per personality of a pool: calls waiting and running, priority, weight, max concurrency, share of the starts of the last minute", (*app).cmdQueue},
		{"explain", "[--personality id] [tool] [--json]",
			"for each tool (or the one named): may the personality call it, the gate that refuses it, the grant a call gets", (*app).cmdExplain},
		{"mcp", "[--personality id] | --http <addr> --tokens <file> [--timeout d]",
			"serve the pool as an MCP server (stdio, or streamable HTTP at http://<addr>/mcp); a session sees only its personality's tools", (*app).cmdMCP},
		{"personality", "put <file|dir>... | get <id> | list | validate <file> | delete <id>",
			"manage personalities (policies); put and validate print every problem", (*app).cmdPersonality},
		{"result", "<call_id> [--json] [--blob file]", "print the stored result of a call; --blob writes its full output", (*app).cmdResult},
		{"cancel", "<call_id> [--reason r]", "cancel a call", (*app).cmdCancel},
		{"progress", "[--audience internal|user|dashboard] [--batch b] [--from-start]",
			"print progress events as JSON lines until interrupted", (*app).cmdProgress},
		{"dlq", "list | show <call_id> | redrive <call_id> [--json]",
			"inspect dead letters; redrive re-publishes a call so every gate runs again", (*app).cmdDLQ},
		{"approvals", "list [--personality id] [--json] | approve <call_id> --sha256 <hash> [--reason r] | deny <call_id> --reason r",
			"calls held for a person's approval: list the pending ones, approve one (bound to its arguments' hash) or deny it (docs/approvals.md)", (*app).cmdApprovals},
		{"console", "[--addr 127.0.0.1:8480] [--tokens file] [--trace-url url]",
			"serve the operator console: live pool, calls, explain, dead letters (docs/console.md)", (*app).cmdConsole},
		{"help", "", "print this help", nil},
	}
}

func (a *app) main(ctx context.Context, args []string) int {
	if len(args) > 0 && args[0] == "--pool-logs" {
		a.poolLogs = true
		args = args[1:]
	}
	if len(args) == 0 {
		a.usage(a.stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		a.usage(a.stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] && c.run != nil {
			return c.run(a, ctx, args[1:])
		}
	}
	fmt.Fprintf(a.stderr, "capstan: unknown command %q\n\n", args[0])
	a.usage(a.stderr)
	return exitUsage
}

// usage prints every command and every environment variable.
func (a *app) usage(w io.Writer) {
	var b strings.Builder
	b.WriteString("Usage: dispatcher <command> [arguments]\n       dispatcher --pool-logs <command> [arguments]\n\n")
	b.WriteString("--pool-logs: in local mode, print the in-process pool's logs on stderr (default: to <data dir>/" + poolLogFile + ")\n\nCommands:\n")
	for _, c := range commands() {
		b.WriteString(strings.TrimRight(fmt.Sprintf("  %-9s %s", c.name, c.args), " ") + "\n")
		fmt.Fprintf(&b, "  %-9s   %s\n", "", c.summary)
	}
	b.WriteString("\nExit status: 0 every result ok, 1 any ok:false result, 2 usage, configuration or infrastructure error.\n")
	b.WriteString("Durations use Go format (30s, 1m30s).\n\nEnvironment:\n")
	for _, v := range configVars() {
		help := v.help
		if v.def != "" {
			help += " (default " + v.def + ")"
		}
		fmt.Fprintf(&b, "  %-28s %s\n", v.name, help)
	}
	for _, v := range consoleVars {
		fmt.Fprintf(&b, "  %-28s %s\n", v[0], v[1])
	}
	fmt.Fprintf(&b, "  %-28s %s\n", "OTEL_*", "OpenTelemetry: OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp) exports a producer")
	fmt.Fprintf(&b, "  %-28s %s\n", "", "span per call over OTLP; unset = no tracing (docs/operations.md)")
	fmt.Fprintf(&b, "\nLocal mode: when CAPSTAN_NATS_URL is unset and no server answers on %s, the dispatcher\n"+
		"starts an embedded JetStream server (store: CAPSTAN_DATA_DIR) and an in-process worker pool.\n", defaultProbeURL)
	_, _ = io.WriteString(w, b.String())
}

// flags returns a flag set for a command whose errors and -h go to stderr.
func (a *app) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {
		for _, c := range commands() {
			if c.name == name {
				fmt.Fprintf(a.stderr, "Usage: dispatcher %s %s\n  %s\n\nFlags:\n", c.name, c.args, c.summary)
			}
		}
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args allowing flags before, between and after the
// positional arguments (the flag package alone stops at the first positional
// one); everything after "--" is positional.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseCommand parses a command's flags and checks it got want positional
// arguments (what names them in the error). done is true when the caller
// must return code at once (help or a usage error).
func (a *app) parseCommand(fs *flag.FlagSet, args []string, want int, what string) (pos []string, code int, done bool) {
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, exitOK, true
	}
	if err != nil {
		return nil, exitUsage, true // the flag package has printed the error and the usage
	}
	if len(pos) != want {
		if want == 0 {
			a.errorf("%s: unexpected argument %q", fs.Name(), pos[0])
		} else {
			a.errorf("%s: expected %s, got %d arguments", fs.Name(), what, len(pos))
		}
		fs.Usage()
		return nil, exitUsage, true
	}
	return pos, exitOK, false
}

// errorf prints one "capstan: ..." line on stderr.
func (a *app) errorf(format string, args ...any) {
	fmt.Fprintf(a.stderr, "capstan: "+format+"\n", args...)
}
