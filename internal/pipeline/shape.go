package pipeline

import (
	"encoding/json"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/wire"
)

// BuiltinReducers are the reducers of the built-in tools, registered for
// those a worker hosts.
var BuiltinReducers = map[string]tool.Reducer{
	"read_file": shape.ReadFileReducer,
	"terminal":  shape.TerminalReducer,
}

// Limits are the sizes a shaped result is held to.
type Limits struct {
	// Bytes caps the encoded result message body.
	Bytes int
	// StructuredBytes caps the structured payload's JSON; a larger one is
	// left out (StructuredOmitted).
	StructuredBytes int
}

// Shape applies steps 12 to 15 of docs/tools.md to res, the result of
// tool t for call: the reducer registered for t (reducers may be nil),
// secret redaction of the values tc's secrets accessor resolved, the
// budget trim, untrusted wrapping or template-token stripping, with the
// message held to limits (the structured payload left out first, then the
// text cut further). body is the text before the untrusted wrap or
// stripping. fits is false when not even an empty text fits: out then
// holds the untrimmed text, and the caller publishes a failure instead.
func Shape(t *tool.Tool, reducers *shape.Reducers, call *wire.Call, tc *tool.Context, res tool.Result, workerID string, limits Limits) (out wire.Result, body string, fits bool) {
	if reducers != nil {
		res, _ = reducers.Apply(t.Name, res, call.Args, tc)
	}
	res = shape.RedactResult(res, SecretValues(tc))
	out = wire.Result{CallID: call.CallID, BatchID: call.EffectiveBatchID(), Tool: call.Tool, OK: res.OK, CostUSD: res.CostUSD,
		Untrusted: t.OutputIsUntrusted, WorkerID: workerID}
	budget := shape.Budget(tc.ResultBudgetChars, t.MaxResultChars)
	text := res.Value
	var finish func(string) string
	if !res.OK {
		out.Code = res.Code
		text = res.Error
		if t.OutputIsUntrusted {
			finish = shape.StripTemplateTokens
		}
	} else {
		if t.OutputIsUntrusted {
			src := shape.Source(t.Name, call.Args, ResolvedPath(call, tc.WorkingDir))
			finish = func(v string) string { return shape.WrapUntrusted(v, src, t.Name) }
		}
		if res.Structured != nil {
			if b, err := json.Marshal(res.Structured); err == nil {
				out.Structured = b
			}
		}
	}
	recordBody := func(s string) string {
		body = s
		if finish != nil {
			return finish(s)
		}
		return s
	}
	if !FitText(&out, text, budget, recordBody, limits.Bytes, limits.StructuredBytes) {
		return out, "", false
	}
	return out, body, true
}

// ResolvedPath is the absolute path a `path` argument resolves to, joined
// to the call's working dir (docs/tools.md step 15: "paths in the source are
// the resolved absolute paths"). The working dir is the tool context's: the
// fs grant's when the tool declares fs_reach, else the call's working_dir or
// the personality's workdir.
func ResolvedPath(call *wire.Call, workingDir string) string {
	var a struct {
		Path string `json:"path"`
	}
	if json.Unmarshal(call.Args, &a) != nil || a.Path == "" {
		return ""
	}
	return capability.JoinPath(workingDir, a.Path)
}

// SecretValues returns the secret values the call's secrets accessor
// resolved, for redaction.
func SecretValues(tc *tool.Context) []string {
	if v, ok := tc.Secrets.(interface{ Resolved() []string }); ok {
		return v.Resolved()
	}
	return nil
}
