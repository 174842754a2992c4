package file

import (
	"context"
	"encoding/json"
	"errors"
	iofs "io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/tool"
)

const readFileSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "file to read; a relative path resolves against the working directory"},
    "start_line": {"type": "integer", "minimum": 1, "description": "first line to return (1-based, inclusive); default 1"},
    "end_line": {"type": "integer", "minimum": 1, "description": "last line to return (1-based, inclusive); default and cap: the last line"}
  },
  "required": ["path"],
  "additionalProperties": false
}`

type readArgs struct {
	Path      string `json:"path"`
	StartLine *int   `json:"start_line"`
	EndLine   *int   `json:"end_line"`
}

// ReadFile returns the read_file tool. Its value is
//
//	[<abs>] <N> lines\n\n<content>
//
// N being the number of "\n"-separated segments of the content ("a\nb\n"
// has 3, an empty file 1), always with the word "lines". With start_line or
// end_line (a range) it is
//
//	[<abs>] lines <from>–<to> of <N>\n\n<slice>
//
// (– is U+2013), from defaulting to 1 and to to N, to clamped to N, and
// slice the segments from..to joined by "\n". start_line past the last
// line is execution_failed "start_line <from> is past the end of <abs>
// (<N> lines)"; end_line before start_line is input_invalid. A missing file
// is execution_failed "Cannot read <abs>: file not found". After a
// successful read it records abs → the mtime seen just before reading in
// tc.Reads. Untrusted output, max_result_chars 40,000.
func ReadFile() tool.Tool {
	return tool.Tool{
		Name:        ReadFileName,
		SideEffects: tool.SideEffectsNone,
		Description: "Reads a text file. Returns a header \"[<absolute path>] <N> lines\" and the content; " +
			"give start_line/end_line (1-based, inclusive) to read part of a long file.",
		Schema:            json.RawMessage(readFileSchema),
		Toolset:           Toolset,
		MaxResultChars:    ReadFileMaxResultChars,
		Capabilities:      readReach(),
		OutputIsUntrusted: true,
		Execute:           tool.Typed(executeRead),
	}
}

func executeRead(ctx context.Context, a readArgs, tc *tool.Context) (tool.Result, error) {
	switch {
	case a.Path == "":
		return tool.InvalidArguments("args.path is required and must not be empty"), nil
	case a.StartLine != nil && *a.StartLine < 1:
		return tool.InvalidArguments("args.start_line must be at least 1 (minimum)"), nil
	case a.EndLine != nil && *a.EndLine < 1:
		return tool.InvalidArguments("args.end_line must be at least 1 (minimum)"), nil
	case a.StartLine != nil && a.EndLine != nil && *a.EndLine < *a.StartLine:
		return tool.InvalidArguments("args.end_line (" + strconv.Itoa(*a.EndLine) + ") must not be less than args.start_line (" +
			strconv.Itoa(*a.StartLine) + ")"), nil
	}
	if tc.FS == nil {
		return noFS(), nil
	}
	abs := absPath(tc, a.Path)
	// The mtime is taken before reading: a change racing the read makes a
	// later write fail STALE_WRITE rather than pass unchecked.
	info, _, err := tc.FS.Stat(ctx, abs)
	if errors.Is(err, iofs.ErrNotExist) && ctx.Err() == nil {
		// Seen missing: the re-read that STALE_WRITE asks for after a
		// deletion, so a later write of the path may go ahead.
		if rerr := record(ctx, tc, abs, time.Time{}); rerr != nil && ctx.Err() != nil {
			return tool.Result{}, context.Cause(ctx)
		}
	}
	if err != nil {
		return fsFailure(ctx, "read", "read", abs, err)
	}
	data, _, err := tc.FS.ReadFile(ctx, abs)
	if err != nil {
		return fsFailure(ctx, "read", "read", abs, err)
	}
	content := string(data)
	n := strings.Count(content, "\n") + 1
	value := "[" + abs + "] " + strconv.Itoa(n) + " lines\n\n" + content
	if a.StartLine != nil || a.EndLine != nil {
		from, to := 1, n
		if a.StartLine != nil {
			from = *a.StartLine
		}
		if a.EndLine != nil {
			to = min(*a.EndLine, n)
		}
		if from > n {
			return tool.Fail(tool.CodeExecutionFailed, "start_line "+strconv.Itoa(from)+" is past the end of "+abs+
				" ("+strconv.Itoa(n)+" lines)"), nil
		}
		lines := strings.Split(content, "\n")
		value = "[" + abs + "] lines " + strconv.Itoa(from) + "–" + strconv.Itoa(to) + " of " + strconv.Itoa(n) +
			"\n\n" + strings.Join(lines[from-1:to], "\n")
	}
	if err := record(ctx, tc, abs, info.ModTime()); err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, context.Cause(ctx)
		}
		return tool.Fail(tool.CodeExecutionFailed, "Cannot record the read of "+abs+" for STALE_WRITE checks: "+err.Error()), nil
	}
	return tool.OK(value), nil
}
