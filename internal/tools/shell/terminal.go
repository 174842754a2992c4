package shell

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/tool"
)

// TerminalName is the terminal tool's name.
const TerminalName = "terminal"

// TerminalMaxResultChars is terminal's max_result_chars.
const TerminalMaxResultChars = 20000

// TerminalDefaultTimeout is terminal's timeout when timeout_ms is absent.
const TerminalDefaultTimeout = 30 * time.Second

// progressInterval is how often terminal reports that its command is still
// running. Terminal reads it when it builds the tool; tests build tools with
// a shorter interval instead of changing it.
var progressInterval = 5 * time.Second

const terminalSchema = `{
  "type": "object",
  "properties": {
    "command": {"type": "string", "minLength": 1, "description": "the command line, run with bash -c"},
    "cwd": {"type": "string", "description": "directory to run in; relative paths are joined to the working dir (default: the working dir)"},
    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 600000, "default": 30000, "description": "kill the command after this many milliseconds"}
  },
  "required": ["command"],
  "additionalProperties": false
}`

type terminalArgs struct {
	Command   string   `json:"command"`
	Cwd       string   `json:"cwd"`
	TimeoutMS *float64 `json:"timeout_ms"`
}

// Terminal returns the terminal tool. It runs `bash -c <command>` through
// tc.Process (capabilities: process ["bash"], the personality's fs_reach and
// network; see the package comment) and answers with the command's
// output: its stdout followed by its stderr (the runner captures them
// separately, so they are not interleaved; a "\n" is put between them when
// both are non-empty and stdout does not end with one).
//
//   - exit 0 → ok, the output;
//   - another exit status (128+n when signal n killed the shell) →
//     execution_failed "Command exited with error (code N):\n<output>";
//   - timeout_ms (default 30,000) elapsed → execution_failed
//     "Command timed out after <d>" (see the package comment).
//
// While the command runs, terminal emits the user-audience progress event
// "still running: <n>s" every 5 seconds, n the whole seconds since it
// started; no event is emitted after Execute returns. Its output is
// untrusted and capped at TerminalMaxResultChars.
func Terminal() tool.Tool { return terminal(progressInterval) }

// terminal returns the terminal tool reporting progress every interval.
func terminal(interval time.Duration) tool.Tool {
	return tool.Tool{
		Name:        TerminalName,
		SideEffects: tool.SideEffectsExclusive,
		Description: "Runs a shell command line with bash -c and returns its output (stdout, then stderr). " +
			"A non-zero exit status is an error that includes the output. Use cwd to choose the directory and timeout_ms (default 30000) to bound long commands.",
		Schema:            json.RawMessage(terminalSchema),
		Toolset:           Toolset,
		MaxResultChars:    TerminalMaxResultChars,
		Capabilities:      capabilities("bash"),
		OutputIsUntrusted: true,
		Execute: tool.Typed(func(ctx context.Context, a terminalArgs, tc *tool.Context) (tool.Result, error) {
			return executeTerminal(ctx, a, tc, interval)
		}),
	}
}

func executeTerminal(ctx context.Context, a terminalArgs, tc *tool.Context, interval time.Duration) (tool.Result, error) {
	if tc.Process == nil {
		return noProcess(), nil
	}
	d, err := timeout(a.TimeoutMS, TerminalDefaultTimeout)
	if err != nil {
		return tool.InvalidArguments(err.Error()), nil
	}
	dir, ok := workDir(tc, a.Cwd)
	if !ok {
		return relativeCwd(a.Cwd), nil
	}
	stop := reportProgress(tc, interval)
	res, timedOut, err := run(ctx, tc.Process, tool.Command{Binary: "bash", Args: []string{"-c", a.Command}, Dir: dir}, d)
	stop()
	switch {
	case err != nil:
		return tool.Result{}, err
	case timedOut:
		return tool.Fail(tool.CodeExecutionFailed, timedOutMsg("Command", d, combined(res))), nil
	case res.ExitCode != 0:
		return tool.Fail(tool.CodeExecutionFailed,
			"Command exited with error (code "+strconv.Itoa(res.ExitCode)+"):\n"+combined(res)), nil
	}
	return tool.OK(combined(res)), nil
}

// combined is stdout followed by stderr, with a "\n" between them when both
// are non-empty and stdout does not end with one, then a line
// "[<limit> reached]" for each ceiling the command hit. A nil res is "".
func combined(res *tool.ProcessResult) string {
	if res == nil {
		return ""
	}
	var b strings.Builder
	b.Grow(len(res.Stdout) + len(res.Stderr) + 1)
	b.Write(res.Stdout)
	if len(res.Stdout) > 0 && len(res.Stderr) > 0 && res.Stdout[len(res.Stdout)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.Write(res.Stderr)
	for _, l := range res.LimitsHit {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
			b.WriteByte('\n')
		}
		b.WriteString("[" + l + "]")
	}
	return b.String()
}

// reportProgress emits "still running: <n>s" to the user every interval
// until the returned stop function is called; stop waits for the reporting
// goroutine to end, so nothing is emitted after it returns. Emit errors are
// ignored: progress is best effort.
func reportProgress(tc *tool.Context, interval time.Duration) (stop func()) {
	if tc.EmitFunc == nil || interval <= 0 {
		return func() {}
	}
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := int64(time.Since(start) / time.Second)
				_ = tc.Emit(tool.Progress{Audience: tool.AudienceUser, Message: "still running: " + strconv.FormatInt(n, 10) + "s"})
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
