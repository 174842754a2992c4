package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/protocol"
)

// batchSession is the session_id of batch lines that set none.
const batchSession = "batch"

// batchLine is one non-empty input line: a call, or the result that refuses it.
type batchLine struct {
	call    client.Call
	refused *client.Result
}

func (a *app) cmdBatch(ctx context.Context, args []string) int {
	fs := a.flags("batch")
	out := fs.String("o", "", "write the results to this file instead of stdout")
	wait := fs.Duration("wait", 0, "give up on results after this long (default: wait for every result)")
	pos, code, done := a.parseCommand(fs, args, 1, "one calls file (- for stdin)")
	if done {
		return code
	}
	if *wait < 0 {
		a.errorf("batch: --wait must not be negative, got %s", *wait)
		return exitUsage
	}
	lines, err := a.readBatch(pos[0])
	if err != nil {
		a.errorf("batch: %v", err)
		return exitUsage
	}
	w := a.stdout
	var outFile *os.File
	if *out != "" {
		if outFile, err = os.Create(*out); err != nil {
			a.errorf("batch: %v", err)
			return exitUsage
		}
		defer outFile.Close() // after the explicit Close below: a harmless no-op
		w = outFile
	}
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()

	results := a.runBatch(ctx, c, lines, *wait)
	bw := bufio.NewWriter(w)
	code = exitOK
	for _, r := range results {
		data, err := marshalJSON(r, false)
		if err != nil {
			a.errorf("batch: encode result: %v", err)
			return exitUsage
		}
		_, _ = bw.Write(data) // a write error surfaces in Flush
		if !r.OK {
			code = exitFailed
		}
	}
	if err := bw.Flush(); err != nil {
		a.errorf("batch: write results: %v", err)
		return exitUsage
	}
	if outFile != nil {
		if err := outFile.Close(); err != nil {
			a.errorf("batch: write results: %v", err)
			return exitUsage
		}
	}
	if ctx.Err() != nil {
		a.errorf("batch: interrupted; calls without a result are reported as %q", client.ResultMissing)
		return exitUsage
	}
	return code
}

// runBatch submits every valid line and returns one result per line, in
// input order, with a progress bar on stderr when it is a terminal.
func (a *app) runBatch(ctx context.Context, c *client.Client, lines []batchLine, wait time.Duration) []client.Result {
	results := make([]client.Result, len(lines))
	var calls []client.Call
	var index []int // calls[j] is line index[j]
	for i, l := range lines {
		if l.refused != nil {
			results[i] = *l.refused
			continue
		}
		calls = append(calls, l.call)
		index = append(index, i)
	}
	var bar *progressbar.ProgressBar
	if a.stderrTTY && len(lines) > 0 {
		bar = progressbar.NewOptions(len(lines),
			progressbar.OptionSetWriter(a.stderr),
			progressbar.OptionSetDescription("calls"),
			progressbar.OptionShowCount(),
			progressbar.OptionThrottle(65*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(a.stderr) }),
		)
		_ = bar.Add(len(lines) - len(calls))
	}
	if wait == 0 {
		wait = -1 // Collect: until every result arrives or ctx ends
	}
	got := c.Collect(ctx, calls, wait, func(int, client.Result) {
		if bar != nil {
			_ = bar.Add(1)
		}
	})
	for j, r := range got {
		results[index[j]] = r
	}
	if bar != nil {
		_ = bar.Finish()
	}
	return results
}

// readBatch reads a JSONL file of calls ("-" = stdin). Each non-empty line is
// one independent call; lines without call_id, session_id or batch_id get a
// new call_id, session_id "batch" and one batch_id shared by the run. A line
// that is not a valid call becomes its input_invalid result. Missing args
// mean {}, as in client.Submit.
func (a *app) readBatch(path string) ([]batchLine, error) {
	var r io.Reader = a.stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	br := bufio.NewReader(r)
	batchID := client.NewID()
	var lines []batchLine
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			lines = append(lines, parseBatchLine(n, line, batchID))
		}
		if err == io.EOF {
			return lines, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// parseBatchLine decodes line n strictly, as a worker would, after filling
// the defaults of a batch line.
func parseBatchLine(n int, line []byte, batchID string) batchLine {
	var fields map[string]json.RawMessage
	err := json.Unmarshal(line, &fields)
	if err == nil && fields == nil {
		err = fmt.Errorf("got null")
	}
	if err != nil {
		call := client.Call{CallID: client.NewID(), BatchID: batchID}
		return refusedLine(&call, fmt.Sprintf("line %d: not a JSON object: %v", n, err))
	}
	if isAbsent(fields["call_id"]) {
		fields["call_id"] = mustJSON(client.NewID())
	}
	if isAbsent(fields["session_id"]) {
		fields["session_id"] = mustJSON(batchSession)
	}
	if isAbsent(fields["batch_id"]) {
		fields["batch_id"] = mustJSON(batchID)
	}
	if a := string(bytes.TrimSpace(fields["args"])); a == "" || a == "null" {
		fields["args"] = json.RawMessage("{}")
	}
	data := mustJSON(fields)
	call, err := protocol.DecodeCall(data)
	if err != nil {
		// Keep whatever identifies the call for the result line.
		var id struct {
			CallID  any `json:"call_id"`
			BatchID any `json:"batch_id"`
			Tool    any `json:"tool"`
		}
		_ = json.Unmarshal(data, &id)
		bad := client.Call{CallID: asString(id.CallID), BatchID: asString(id.BatchID), Tool: asString(id.Tool)}
		return refusedLine(&bad, fmt.Sprintf("line %d: %v", n, err))
	}
	return batchLine{call: call}
}

func refusedLine(call *client.Call, msg string) batchLine {
	r := protocol.Failure(call, protocol.CodeInputInvalid, msg)
	return batchLine{refused: &r}
}

// isAbsent reports a missing, null or empty-string field.
func isAbsent(v json.RawMessage) bool {
	s := string(bytes.TrimSpace(v))
	return s == "" || s == "null" || s == `""`
}

func mustJSON(v any) json.RawMessage {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err) // strings and maps of raw JSON always encode
	}
	return data
}

func asString(v any) string {
	s, _ := v.(string)
	return s
}
