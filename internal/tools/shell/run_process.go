package shell

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/capstanhq/capstan/tool"
)

// RunProcessName is the run_process tool's name.
const RunProcessName = "run_process"

// RunProcessDefaultTimeout is run_process's timeout when timeout_ms is absent.
const RunProcessDefaultTimeout = 60 * time.Second

const runProcessSchema = `{
  "type": "object",
  "properties": {
    "binary": {"type": "string", "minLength": 1, "description": "the program: a bare name looked up on the worker's trusted PATH, or a path"},
    "args": {"type": "array", "items": {"type": "string"}, "description": "arguments, passed as they are (no shell)"},
    "cwd": {"type": "string", "description": "directory to run in; relative paths are joined to the working dir (default: the working dir)"},
    "env": {
      "type": "object",
      "patternProperties": {"^[^=\\x00]+$": {"type": "string"}},
      "additionalProperties": false,
      "description": "extra environment variables; the child otherwise gets only PATH, HOME, LANG, TZ and TMPDIR"
    },
    "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 600000, "default": 60000, "description": "kill the process after this many milliseconds"}
  },
  "required": ["binary"],
  "additionalProperties": false
}`

type runProcessArgs struct {
	Binary    string            `json:"binary"`
	Args      []string          `json:"args"`
	Cwd       string            `json:"cwd"`
	Env       map[string]string `json:"env"`
	TimeoutMS *float64          `json:"timeout_ms"`
}

// RunProcess returns the run_process tool. It runs binary with args, without
// a shell, through tc.Process (capability process: ["*"]: the personality's
// process.allow is the real ceiling). Any exit status is an ok result (the
// caller judges it):
//
//	exit code <n>
//	--- stdout ---
//	<stdout>
//	--- stderr ---
//	<stderr>
//
// with the streams exactly as captured (a trailing newline of stdout is
// followed by the "\n" before "--- stderr ---"), and Structured
// {"exit_code": n (int), "stdout": string, "stderr": string}, each stream
// there cut to its first StructuredStreamBytes, with "stdout_truncated":
// true and "stdout_bytes": <captured size> (the same for stderr) when cut. timeout_ms
// (default 60,000) elapsed → execution_failed "Process timed out after <d>"
// followed by ":\n" and the sections above without the exit code line when
// anything was captured.
func RunProcess() tool.Tool {
	return tool.Tool{
		Name:        RunProcessName,
		SideEffects: tool.SideEffectsExclusive,
		Description: "Runs one program with an argument list (no shell) and returns its exit code, stdout and stderr. " +
			"A non-zero exit code is reported, not treated as an error. Use env for extra environment variables and timeout_ms (default 60000) to bound it.",
		Schema:       json.RawMessage(runProcessSchema),
		Toolset:      Toolset,
		Capabilities: capabilities("*"),
		Execute:      tool.Typed(executeRunProcess),
	}
}

func executeRunProcess(ctx context.Context, a runProcessArgs, tc *tool.Context) (tool.Result, error) {
	if tc.Process == nil {
		return noProcess(), nil
	}
	d, err := timeout(a.TimeoutMS, RunProcessDefaultTimeout)
	if err != nil {
		return tool.InvalidArguments(err.Error()), nil
	}
	dir, ok := workDir(tc, a.Cwd)
	if !ok {
		return relativeCwd(a.Cwd), nil
	}
	res, timedOut, err := run(ctx, tc.Process, tool.Command{Binary: a.Binary, Args: a.Args, Dir: dir, Env: a.Env}, d)
	switch {
	case err != nil:
		return tool.Result{}, err
	case timedOut:
		out := ""
		if res != nil && (len(res.Stdout) > 0 || len(res.Stderr) > 0) {
			out = streams(res)
		}
		return tool.Fail(tool.CodeExecutionFailed, timedOutMsg("Process", d, out)), nil
	}
	value := "exit code " + strconv.Itoa(res.ExitCode) + "\n" + streams(res)
	structured := map[string]any{"exit_code": res.ExitCode}
	structuredStream(structured, "stdout", res.Stdout)
	structuredStream(structured, "stderr", res.Stderr)
	if len(res.LimitsHit) > 0 {
		value += "\n--- limits ---\n" + strings.Join(res.LimitsHit, "\n")
		structured["limits_hit"] = slices.Clone(res.LimitsHit)
	}
	r := tool.OK(value)
	r.Structured = structured
	return r, nil
}

// StructuredStreamBytes is the most of each stream that run_process's
// structured payload carries: the value already holds both streams in full
// (as the budget trim and the result size allow), so the payload keeps only
// their start rather than a second copy of up to twice the output limit.
const StructuredStreamBytes = 32 << 10

// structuredStream sets structured[name] to the stream, cut to its first
// StructuredStreamBytes (never inside a UTF-8 sequence) with
// <name>_truncated true and <name>_bytes its full size when longer.
func structuredStream(structured map[string]any, name string, b []byte) {
	if len(b) <= StructuredStreamBytes {
		structured[name] = string(b)
		return
	}
	end := StructuredStreamBytes
	for end > 0 && !utf8.RuneStart(b[end]) {
		end--
	}
	structured[name] = string(b[:end])
	structured[name+"_truncated"] = true
	structured[name+"_bytes"] = len(b)
}

// streams is "--- stdout ---\n<stdout>\n--- stderr ---\n<stderr>".
func streams(res *tool.ProcessResult) string {
	return "--- stdout ---\n" + string(res.Stdout) + "\n--- stderr ---\n" + string(res.Stderr)
}
