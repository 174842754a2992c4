package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/explain"
	"github.com/capstanhq/capstan/tool"
)

// cmdExplain prints, for every tool of the catalog (or the one named),
// whether a personality may call it, the gate that refuses it, and the
// grant a call gets, computed with the worker's own gate and resolution
// functions (explainTool).
func (a *app) cmdExplain(ctx context.Context, args []string) int {
	fs := a.flags("explain")
	personality := fs.String("personality", "", "the personality to explain (default: CAPSTAN_DEFAULT_PERSONALITY, \"default\")")
	asJSON := fs.Bool("json", false, "print a JSON array of {tool, allowed, gate, message, problems, grant}")
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	if len(pos) > 1 {
		a.errorf("explain: expected at most one tool name, got %d arguments", len(pos))
		fs.Usage()
		return exitUsage
	}
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()
	id := cmp.Or(*personality, c.PersonalityID())
	p, code, ok := a.explainPersonality(ctx, c, id)
	if !ok {
		return code
	}
	tools, err := a.catalogTools(ctx, c)
	if err != nil {
		a.errorf("explain: %v", err)
		return exitUsage
	}
	if len(pos) == 1 {
		i := slices.IndexFunc(tools, func(t *tool.Tool) bool { return t.Name == pos[0] })
		if i < 0 {
			a.errorf("explain: Unknown tool: %s (no worker has registered it in the catalog)", pos[0])
			return exitFailed
		}
		tools = tools[i : i+1]
	} else if len(tools) == 0 {
		a.errorf("explain: the catalog is empty: no worker has registered its tools yet")
	}
	out := explain.Tools(tools, p)
	if *asJSON {
		return a.printJSON("explain", out)
	}
	if err := printExplanations(a.stdout, p.ID, out, len(pos) == 0); err != nil {
		a.errorf("explain: %v", err)
		return exitUsage
	}
	return exitOK
}

// explainPersonality reads and parses personality id as a worker does:
// unknown, invalid, or stored under another id's key is exit 1 with the
// worker's refusal; a read that fails is exit 2.
func (a *app) explainPersonality(ctx context.Context, c *client.Client, id string) (*capability.Personality, int, bool) {
	doc, err := c.Personality(ctx, id)
	if err != nil {
		hint := ""
		if errors.Is(err, bus.ErrPermissionDenied) {
			hint = " (this NATS user may not read personality " + id + "; a tenant's user reads only its own: docs/operations.md, \"NATS users\")"
		}
		a.errorf("explain: %v%s", err, hint)
		return nil, exitCode(err), false
	}
	// ${HOME} is this process's, as for personality validate and tools --personality.
	p, err := explain.Parse(doc, id)
	if err != nil {
		a.errorf("explain: Personality %s is invalid: %v", id, err)
		return nil, exitFailed, false
	}
	return p, exitOK, true
}

// catalogTools returns the declarations of the catalog's tools, by name;
// an entry whose declaration does not decode is left out with a warning.
func (a *app) catalogTools(ctx context.Context, c *client.Client) ([]*tool.Tool, error) {
	entries, err := c.Tools(ctx)
	if err != nil {
		return nil, err
	}
	tools := make([]*tool.Tool, 0, len(entries))
	for _, e := range entries {
		t, err := client.CatalogTool(e)
		if err != nil {
			a.errorf("explain: warning: %v; tool left out", err)
			continue
		}
		tools = append(tools, t)
	}
	return tools, nil
}

// printJSON prints v as indented JSON on stdout, with <, > and & as they
// are (marshalJSON).
func (a *app) printJSON(cmd string, v any) int {
	b, err := marshalJSON(v, true)
	if err != nil {
		a.errorf("%s: %v", cmd, err)
		return exitUsage
	}
	_, _ = a.stdout.Write(b)
	return exitOK
}

// marshalJSON encodes v as JSON for people, ending with a newline: <, >
// and & are printed as they are rather than as \u003c etc. (untrusted
// output is wrapped in <untrusted ...> tags, and capability values such as
// scope ids hold them); indented when indent is true.
func marshalJSON(v any, indent bool) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	// A MarshalJSON method (protocol.Result's) escapes with json.Marshal,
	// which SetEscapeHTML cannot undo.
	return unescapeHTML(b.Bytes()), nil
}

// unescapeHTML turns the escapes \u003c, \u003e and \u0026 of encoded JSON
// back into <, > and &. A backslash only occurs inside strings and always
// starts an escape, so escapes are read pairwise: "\\u003c" (an escaped
// backslash, then the text u003c) stays as it is.
func unescapeHTML(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u00`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) {
			switch string(b[i : i+6]) {
			case `\u003c`:
				out, i = append(out, '<'), i+5
				continue
			case `\u003e`:
				out, i = append(out, '>'), i+5
				continue
			case `\u0026`:
				out, i = append(out, '&'), i+5
				continue
			}
		}
		out, i = append(out, b[i], b[i+1]), i+1
	}
	return out
}

// printExplanations writes the human form: a summary line when the whole
// catalog was explained, then one section per tool, its verdict first and
// its grant (or refusal) below.
func printExplanations(w io.Writer, personality string, out []explain.Explanation, summary bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if summary {
		n := 0
		for _, e := range out {
			if e.Allowed {
				n++
			}
		}
		fmt.Fprintf(tw, "personality %s may call %d of %d tools\n", personality, n, len(out))
	}
	for i, e := range out {
		if summary || i > 0 {
			fmt.Fprintln(tw)
		}
		if !e.Allowed {
			fmt.Fprintf(tw, "%s: refused by gate %s\n", e.Tool, e.Gate)
			if len(e.Problems) == 0 {
				fmt.Fprintf(tw, "  %s\n", e.Message)
			}
			for _, p := range e.Problems {
				fmt.Fprintf(tw, "  %s: %s\n", p.Capability, p.Message)
			}
			continue
		}
		fmt.Fprintf(tw, "%s: allowed\n", e.Tool)
		for _, r := range explain.Rows(e.Grant) {
			fmt.Fprintf(tw, "  %s\t%s\n", r[0], r[1])
		}
	}
	return tw.Flush()
}
