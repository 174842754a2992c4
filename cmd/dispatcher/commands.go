package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
)

// callWaitSlack is how much longer than --timeout `call` waits for the result.
const callWaitSlack = 5 * time.Second

// followQuiet and followMax bound how long `call --follow` keeps printing
// progress events after the result arrived (events are stored before the
// result, but travel on another stream).
const (
	followQuiet = 300 * time.Millisecond
	followMax   = 2 * time.Second
)

func (a *app) cmdCall(ctx context.Context, args []string) int {
	fs := a.flags("call")
	argsJSON := fs.String("args", "{}", "the tool's arguments, a JSON object")
	personality := personalityFlag(fs)
	session := fs.String("session", "cli", "session_id of the call")
	timeout := fs.Duration("timeout", 30*time.Second, "the call's timeout_ms; the dispatcher waits 5s longer for the result")
	batch := fs.String("batch", "", "batch_id of the call (default: its call_id)")
	dryRun := fs.Bool("dry-run", false, "ask for a synthetic result; nothing runs")
	follow := fs.Bool("follow", false, "print the call's progress events on stderr while waiting")
	asJSON := fs.Bool("json", false, "print the whole result as JSON on stdout")
	pos, code, done := a.parseCommand(fs, args, 1, "one tool name")
	if done {
		return code
	}
	if !isJSONObject(*argsJSON) {
		a.errorf("call: --args must be a JSON object, got %s", describeJSON(*argsJSON))
		return exitUsage
	}
	if *timeout < time.Millisecond {
		a.errorf("call: --timeout must be at least 1ms, got %s", *timeout)
		return exitUsage
	}
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()
	if c, ok = a.as(c, "call", *personality); !ok {
		return exitUsage
	}

	call := client.Call{
		CallID:        client.NewID(),
		BatchID:       *batch,
		Tool:          pos[0],
		Args:          json.RawMessage(*argsJSON),
		SessionID:     *session,
		Platform:      "cli",
		PersonalityID: c.PersonalityID(),
		DryRun:        *dryRun,
		TimeoutMS:     timeout.Milliseconds(),
	}
	var events chan struct{}
	if *follow {
		var stop func()
		var err error
		events, stop, err = a.follow(ctx, c, call.CallID, cmp.Or(call.BatchID, call.CallID))
		if err != nil {
			a.errorf("call: %v", err)
			return exitUsage
		}
		defer stop()
	}
	if !call.DryRun {
		// A call held for approval says so, and how to approve it
		// (docs/approvals.md); a user that may not read progress just waits.
		if stop, err := a.holdNotice(ctx, c, call.CallID, cmp.Or(call.BatchID, call.CallID)); err == nil {
			defer stop()
		}
	}
	if err := c.Submit(ctx, &call); err != nil {
		var re *client.RefusedError
		if errors.As(err, &re) {
			return a.printResult(re.Result, *asJSON)
		}
		a.errorf("call: %v", err)
		return exitUsage
	}
	wctx, cancel := context.WithTimeout(ctx, *timeout+callWaitSlack)
	defer cancel()
	r, err := c.Await(wctx, call.BatchID, call.CallID)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		a.errorf("call: interrupted while waiting for the result of %s", call.CallID)
		return exitUsage
	case wctx.Err() != nil:
		r = protocol.Failure(&call, protocol.CodeExecutionFailed, client.ResultMissing)
	default:
		a.errorf("call: %v", err)
		return exitUsage
	}
	if events != nil {
		drain(events)
	}
	return a.printResult(r, *asJSON)
}

// personalityFlag defines --personality: the personality token of the
// subjects a command publishes on or reads from (protocol version 2).
func personalityFlag(fs *flag.FlagSet) *string {
	return fs.String("personality", "", "the personality whose subjects the command uses (default: CAPSTAN_DEFAULT_PERSONALITY, \"default\")")
}

// as returns c acting under personality p (c itself when p is empty),
// reporting an invalid p as a usage error of command cmd.
func (a *app) as(c *client.Client, cmd, p string) (*client.Client, bool) {
	if p == "" {
		return c, true
	}
	v, err := c.WithPersonality(p)
	if err != nil {
		a.errorf("%s: --personality: %v", cmd, err)
		return nil, false
	}
	return v, true
}

// follow prints the progress events of one call on stderr. Each event is
// also signalled on events (without blocking) so the caller can drain.
func (a *app) follow(ctx context.Context, c *client.Client, callID, batchID string) (events chan struct{}, stop func(), err error) {
	events = make(chan struct{}, 1)
	stop, err = c.Progress(ctx, "", batchID, true, func(p client.Progress) {
		if p.CallID != callID {
			return
		}
		msg := p.Message
		if p.Percent != nil {
			msg = fmt.Sprintf("%g%% %s", *p.Percent, msg)
		}
		fmt.Fprintf(a.stderr, "progress [%s]: %s\n", p.Audience, msg)
		select {
		case events <- struct{}{}:
		default:
		}
	})
	return events, stop, err
}

// holdNotice prints on stderr, when the call is held for approval, its
// hash and the command that approves it.
func (a *app) holdNotice(ctx context.Context, c *client.Client, callID, batchID string) (stop func(), err error) {
	return c.Progress(ctx, protocol.AudienceUser, batchID, false, func(p client.Progress) {
		if p.CallID != callID || p.Kind != protocol.ProgressKindApprovalRequired || p.Approval == nil {
			return
		}
		fmt.Fprintf(a.stderr, "call %s is held for approval until %s (args_sha256 %s); to approve it:\n  dispatcher approvals approve %s --sha256 %s\n",
			callID, p.Approval.ExpiresAt.Format(time.RFC3339), p.Approval.ArgsSHA256, callID, p.Approval.ArgsSHA256)
	})
}

// drain waits until no event arrived for followQuiet, at most followMax.
func drain(events <-chan struct{}) {
	quiet := time.NewTimer(followQuiet)
	defer quiet.Stop()
	limit := time.NewTimer(followMax)
	defer limit.Stop()
	for {
		select {
		case <-events:
			quiet.Reset(followQuiet)
		case <-quiet.C:
			return
		case <-limit.C:
			return
		}
	}
}

// printResult prints r (the value on stdout, or "<code>: <error>" on stderr;
// with asJSON the whole result on stdout) and returns 0 for ok, 1 otherwise.
func (a *app) printResult(r client.Result, asJSON bool) int {
	switch {
	case asJSON:
		data, err := marshalJSON(r, false)
		if err != nil {
			a.errorf("encode result: %v", err)
			return exitUsage
		}
		_, _ = a.stdout.Write(data)
	case r.OK:
		v := r.Value
		if !strings.HasSuffix(v, "\n") {
			v += "\n"
		}
		fmt.Fprint(a.stdout, v)
	default:
		fmt.Fprintf(a.stderr, "%s: %s\n", r.Code, r.Error)
	}
	if r.OK {
		return exitOK
	}
	return exitFailed
}

func (a *app) cmdTools(ctx context.Context, args []string) int {
	fs := a.flags("tools")
	asJSON := fs.Bool("json", false, "print an array of catalog entries")
	personality := fs.String("personality", "", "only the tools this personality's LLM may call")
	if _, code, done := a.parseCommand(fs, args, 0, ""); done {
		return code
	}
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()
	var tools []client.CatalogEntry
	var err error
	if *personality != "" {
		tools, err = c.ToolsFor(ctx, *personality)
	} else {
		tools, err = c.Tools(ctx)
	}
	if errors.Is(err, client.ErrUnknownPersonality) {
		a.errorf("tools: %v", err)
		return exitFailed
	}
	if err != nil {
		a.errorf("tools: %v", err)
		return exitUsage
	}
	if *asJSON {
		data, err := marshalJSON(tools, true)
		if err != nil {
			a.errorf("tools: %v", err)
			return exitUsage
		}
		_, _ = a.stdout.Write(data)
		return exitOK
	}
	if len(tools) == 0 {
		a.errorf("tools: the catalog is empty: no worker has registered its tools yet")
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPOOL\tTOOLSET\tSIDE EFFECTS\tDESCRIPTION")
	for _, t := range tools {
		desc, _, _ := strings.Cut(t.Description, "\n")
		// An entry without the field (a worker of an earlier release) is
		// exclusive, the default.
		effects := string(tool.SideEffects(t.SideEffects).Effective())
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, cmp.Or(t.Pool, protocol.DefaultPool), t.Toolset, effects, desc)
	}
	if err := tw.Flush(); err != nil {
		a.errorf("tools: %v", err)
		return exitUsage
	}
	return exitOK
}

func (a *app) cmdResult(ctx context.Context, args []string) int {
	fs := a.flags("result")
	asJSON := fs.Bool("json", false, "print the whole result as JSON on stdout")
	blobFile := fs.String("blob", "", "also write the call's full output (the blob its result refers to) to this file, its SHA-256 checked")
	personality := personalityFlag(fs)
	pos, code, done := a.parseCommand(fs, args, 1, "one call_id")
	if done {
		return code
	}
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()
	if c, ok = a.as(c, "result", *personality); !ok {
		return exitUsage
	}
	r, found, err := c.Result(ctx, pos[0])
	if err != nil {
		a.errorf("result: %v", err)
		return exitUsage
	}
	if !found {
		a.errorf("result: no result for call %s (still running, never submitted, or expired)", pos[0])
		return exitFailed
	}
	code = a.printResult(r, *asJSON)
	if *blobFile != "" {
		if bcode := a.writeBlob(ctx, c, r, *blobFile); bcode != exitOK {
			return bcode
		}
	}
	return code
}

// writeBlob writes the blob r refers to into file (mode 0600: an output may
// be sensitive), checking its size and SHA-256; a blob that fails the
// check leaves no file. It returns exitFailed when r has no blob, exitUsage
// when it cannot be read or written.
func (a *app) writeBlob(ctx context.Context, c *client.Client, r client.Result, file string) int {
	if r.Blob == nil {
		a.errorf("result: call %s has no blob: its result carries its whole output, or blobs were off or forbidden for it", r.CallID)
		return exitFailed
	}
	rd, err := c.Blob(ctx, r)
	if err != nil {
		a.errorf("result: %v", err)
		return exitUsage
	}
	defer rd.Close()
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		a.errorf("result: %v", err)
		return exitUsage
	}
	if _, err := io.Copy(f, rd); err != nil {
		_ = f.Close()
		_ = os.Remove(file)
		a.errorf("result: %v", err)
		return exitUsage
	}
	if err := f.Close(); err != nil {
		a.errorf("result: %v", err)
		return exitUsage
	}
	a.errorf("result: wrote %s of %s (%s, SHA-256 %s) to %s", r.Blob.Part, bus.FormatBytes(r.Blob.Size), r.Blob.ContentType, r.Blob.SHA256, file)
	return exitOK
}

func (a *app) cmdCancel(ctx context.Context, args []string) int {
	fs := a.flags("cancel")
	reason := fs.String("reason", "", "the reason given in the call's result (default: by request)")
	personality := personalityFlag(fs)
	pos, code, done := a.parseCommand(fs, args, 1, "one call_id")
	if done {
		return code
	}
	if err := protocol.CheckToken("call_id", pos[0]); err != nil {
		a.errorf("cancel: %v", err)
		return exitUsage
	}
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()
	if c, ok = a.as(c, "cancel", *personality); !ok {
		return exitUsage
	}
	if err := c.Cancel(ctx, pos[0], *reason); err != nil {
		a.errorf("cancel: %v", err)
		return exitUsage
	}
	a.errorf("cancel requested for call %s", pos[0])
	return exitOK
}

func (a *app) cmdProgress(ctx context.Context, args []string) int {
	fs := a.flags("progress")
	audience := fs.String("audience", "", "only this audience: internal, user or dashboard (default all)")
	batch := fs.String("batch", "", "only this batch_id (default all)")
	fromStart := fs.Bool("from-start", false, "print the stored events (kept 1h) first")
	personality := personalityFlag(fs)
	if _, code, done := a.parseCommand(fs, args, 0, ""); done {
		return code
	}
	if *audience != "" && !protocol.Audience(*audience).Valid() {
		a.errorf("progress: --audience must be internal, user or dashboard, got %q", *audience)
		return exitUsage
	}
	if *batch != "" {
		if err := protocol.CheckToken("--batch", *batch); err != nil {
			a.errorf("progress: %v", err)
			return exitUsage
		}
	}
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()
	if c, ok = a.as(c, "progress", *personality); !ok {
		return exitUsage
	}
	var mu sync.Mutex
	stopped := false
	stop, err := c.Progress(ctx, protocol.Audience(*audience), *batch, *fromStart, func(p client.Progress) {
		data, err := marshalJSON(p, false)
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			_, _ = a.stdout.Write(data)
		}
	})
	if err != nil {
		a.errorf("progress: %v", err)
		return exitUsage
	}
	<-ctx.Done()
	stop()
	mu.Lock()
	stopped = true
	mu.Unlock()
	return exitOK
}

// isJSONObject reports whether s is one JSON object.
func isJSONObject(s string) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal([]byte(s), &m) == nil && m != nil
}

// describeJSON says what s is, for an error message.
func describeJSON(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return "invalid JSON (" + err.Error() + ")"
	}
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "something else"
}
