package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/protocol"
)

// cmdDLQ inspects and redrives dead letters.
func (a *app) cmdDLQ(ctx context.Context, args []string) int {
	fs := a.flags("dlq")
	asJSON := fs.Bool("json", false, "list and show: print JSON on stdout")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) == 0 {
		a.errorf("dlq: expected list, show <call_id> or redrive <call_id>")
		return exitUsage
	}
	verb := pos[0]
	switch verb {
	case "list":
		if len(pos) != 1 {
			a.errorf("dlq list: expected no arguments")
			return exitUsage
		}
	case "show", "redrive":
		if len(pos) != 2 {
			a.errorf("dlq %s: expected one call_id", verb)
			return exitUsage
		}
		if err := protocol.CheckToken("call_id", pos[1]); err != nil {
			a.errorf("dlq %s: %v", verb, err)
			return exitUsage
		}
	default:
		a.errorf("dlq: unknown subcommand %q (expected list, show or redrive)", verb)
		return exitUsage
	}
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()
	switch verb {
	case "list":
		return a.dlqList(ctx, c, *asJSON)
	case "show":
		return a.dlqShow(ctx, c, pos[1], *asJSON)
	}
	subject, err := c.Redrive(ctx, pos[1])
	if errors.Is(err, client.ErrNoDeadLetter) {
		a.errorf("dlq redrive: no dead letter for call %s", pos[1])
		return exitFailed
	}
	if err != nil {
		a.errorf("dlq redrive: %v", err)
		return exitUsage
	}
	fmt.Fprintf(a.stdout, "redriven call %s to %s\n", pos[1], subject)
	return exitOK
}

func (a *app) dlqList(ctx context.Context, c *client.Client, asJSON bool) int {
	letters, err := c.DeadLetters(ctx)
	if err != nil {
		a.errorf("dlq list: %v", err)
		return exitUsage
	}
	if asJSON {
		out := make([]dlqJSON, len(letters))
		for i, d := range letters {
			out[i] = toJSON(d)
		}
		b, _ := marshalJSON(out, true)
		_, _ = a.stdout.Write(b)
		return exitOK
	}
	if len(letters) == 0 {
		a.errorf("dlq list: the DLQ is empty")
		return exitOK
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tDEAD AT\tTOOL\tCALL ID\tDELIVERIES\tREASON")
	for _, d := range letters {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", d.Seq, d.DeadAt.Format(time.RFC3339), d.Tool, orDash(d.CallID), d.Deliveries, d.Reason)
	}
	_ = tw.Flush()
	return exitOK
}

func (a *app) dlqShow(ctx context.Context, c *client.Client, callID string, asJSON bool) int {
	letters, err := c.DeadLettersOf(ctx, callID)
	if err != nil {
		a.errorf("dlq show: %v", err)
		return exitUsage
	}
	if len(letters) == 0 {
		a.errorf("dlq show: no dead letter for call %s", callID)
		return exitFailed
	}
	if asJSON {
		out := make([]dlqJSON, len(letters))
		for i, d := range letters {
			out[i] = toJSON(d)
		}
		b, _ := marshalJSON(out, true)
		_, _ = a.stdout.Write(b)
		return exitOK
	}
	var b strings.Builder
	for i, d := range letters {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "dead letter %d (subject %s.dlq.%s)\n", d.Seq, c.Prefix(), d.Tool)
		for _, k := range slices.Sorted(maps.Keys(d.Header)) {
			for _, v := range d.Header[k] {
				fmt.Fprintf(&b, "%s: %s\n", k, v)
			}
		}
		fmt.Fprintf(&b, "\n%s\n", d.Body)
	}
	fmt.Fprint(a.stdout, b.String())
	return exitOK
}

// dlqJSON is a dead letter as "dlq list --json" and "dlq show --json" print
// it: the body as JSON when it is JSON, else as a string.
type dlqJSON struct {
	client.DeadLetter
	Body json.RawMessage `json:"body"`
}

func toJSON(d client.DeadLetter) dlqJSON {
	body := json.RawMessage(d.Body)
	if !json.Valid(d.Body) {
		body, _ = json.Marshal(string(d.Body))
	}
	return dlqJSON{DeadLetter: d, Body: body}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
