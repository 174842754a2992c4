package file

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/capstanhq/capstan/tool"
)

const writeFileSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "file to write; a relative path resolves against the working directory"},
    "content": {"type": "string", "description": "the whole new content of the file"}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`

type writeArgs struct {
	Path    string  `json:"path"`
	Content *string `json:"content"`
}

// WriteFile returns the write_file tool: it replaces the whole content of a
// file (creating it and its missing parent directories inside the write
// reach) and answers "Written <n> bytes to <abs>", n being the content's
// length in bytes. Before writing it runs the STALE_WRITE check (see the
// package doc); after writing it reads the file back, answering
// execution_failed "Write verification failed for <abs>: <why>" when the
// bytes differ, and records the new mtime in tc.Reads.
func WriteFile() tool.Tool {
	return tool.Tool{
		Name:        WriteFileName,
		SideEffects: tool.SideEffectsExclusive,
		Description: "Writes a file, replacing its whole content and creating missing parent directories. " +
			"Fails with STALE_WRITE when the file changed since you last read it: re-read it first.",
		Schema:       json.RawMessage(writeFileSchema),
		Toolset:      Toolset,
		Capabilities: readWriteReach(),
		Execute:      tool.Typed(executeWrite),
	}
}

func executeWrite(ctx context.Context, a writeArgs, tc *tool.Context) (tool.Result, error) {
	switch {
	case a.Path == "":
		return tool.InvalidArguments("args.path is required and must not be empty"), nil
	case a.Content == nil:
		return tool.InvalidArguments("args.content is required"), nil
	}
	if tc.FS == nil {
		return noFS(), nil
	}
	abs := absPath(tc, a.Path)
	if res, err := checkStale(ctx, tc, abs); res != nil || err != nil {
		return deref(res), err
	}
	data := []byte(*a.Content)
	return writeVerified(ctx, tc, abs, data, "Written "+strconv.Itoa(len(data))+" bytes to "+abs)
}

// deref returns *res, or the zero Result for nil.
func deref(res *tool.Result) tool.Result {
	if res == nil {
		return tool.Result{}
	}
	return *res
}
