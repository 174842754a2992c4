package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/console"
	"github.com/capstanhq/capstan/internal/protocol"
)

// cmdQueue prints a pool's queue per personality: calls waiting and
// running, the personality's scheduling section and its share of the
// starts of the last minute (scheduling.md).
func (a *app) cmdQueue(ctx context.Context, args []string) int {
	fs := a.flags("queue")
	pool := fs.String("pool", protocol.DefaultPool, "the pool whose queue to print")
	asJSON := fs.Bool("json", false, "print an array of {personality, waiting, running, priority, weight, max_concurrency, share_last_minute}")
	if _, code, done := a.parseCommand(fs, args, 0, ""); done {
		return code
	}
	if err := protocol.CheckToken("--pool", *pool); err != nil {
		a.errorf("queue: %v", err)
		return exitUsage
	}
	c, closeFn, ok := a.setup(ctx)
	if !ok {
		return exitUsage
	}
	defer closeFn()
	cfg, _ := loadConfig(a.getenv) // checked by setup
	conn, err := bus.Connect(ctx, bus.Config{URL: a.natsURL, Creds: a.natsCreds, Prefix: cfg.Prefix, Name: "capstan-dispatcher-queue",
		Replicas: cfg.StreamReplicas, InboxPrefix: cfg.InboxPrefix})
	if err != nil {
		a.errorf("queue: %v", err)
		return exitUsage
	}
	defer conn.Close()
	rows, notes, err := console.Queue(ctx, conn, c, *pool)
	if err != nil {
		a.errorf("queue: %v", err)
		return exitUsage
	}
	for _, n := range notes {
		a.errorf("queue: %s", n)
	}
	if *asJSON {
		data, err := marshalJSON(rows, true)
		if err != nil {
			a.errorf("queue: %v", err)
			return exitUsage
		}
		_, _ = a.stdout.Write(data)
		return exitOK
	}
	if len(rows) == 0 {
		a.errorf("queue: pool %s has no personality with a consumer or calls waiting", *pool)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PERSONALITY\tWAITING\tRUNNING\tPRIORITY\tWEIGHT\tMAX_CONCURRENCY\tSHARE_1M")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", r.Personality, r.Waiting, r.Running, r.Priority, r.Weight,
			console.FormatMaxConcurrency(r.MaxConcurrency), console.FormatShare(r.ShareLastMinute))
	}
	if err := tw.Flush(); err != nil {
		a.errorf("queue: %v", err)
		return exitUsage
	}
	return exitOK
}
