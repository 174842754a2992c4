// Command audit-shipper copies Capstan's audit records out of the audit
// stream before the stream's retention (30 days) drops them: it reads
// CAPSTAN_AUDIT through a durable pull consumer and appends every record, one
// JSON object a line exactly as the worker wrote it, to a file (or stdout),
// and acknowledges a message only once its records are written and synced.
// Delivery is at least once: after a crash between the write and the
// acknowledgement, the records of the unacknowledged messages are written
// again (identical lines; call_id and time tell them apart downstream).
//
// Usage:
//
//	audit-shipper -url nats://audit:secret@nats:4222 -out /var/log/capstan/audit.jsonl
//	audit-shipper -url nats://127.0.0.1:4222 -nkey data/embedded.creds -drain -out audit.jsonl
//
// The NATS user needs, on the stream CAPSTAN_AUDIT and the consumer name
// given by -durable (default audit_shipper): $JS.API.CONSUMER.CREATE,
// CONSUMER.INFO and CONSUMER.MSG.NEXT, the acks $JS.ACK.CAPSTAN_AUDIT.<durable>.>
// and $JS.ACK.*.*.CAPSTAN_AUDIT.<durable>.>, and subscribe on _INBOX.>
// (docs/operations.md, "Retention").
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "audit-shipper:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	url, creds, nkey      string
	stream, subject, name string
	out                   string
	batch                 int
	drain                 bool
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("audit-shipper", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.StringVar(&cfg.url, "url", nats.DefaultURL, "NATS server URL (a user and password may be given in it)")
	fs.StringVar(&cfg.creds, "creds", "", "NATS credentials file (a user JWT and its seed)")
	fs.StringVar(&cfg.nkey, "nkey", "", "NKey user seed file (such as an embedded server's embedded.creds)")
	fs.StringVar(&cfg.stream, "stream", "CAPSTAN_AUDIT", "the audit stream")
	fs.StringVar(&cfg.subject, "subject", "capstan.audit.>", "the audit records' subjects")
	fs.StringVar(&cfg.name, "durable", "audit_shipper", "the durable consumer's name: where the shipper resumes")
	fs.StringVar(&cfg.out, "out", "-", "file the records are appended to (- for stdout)")
	fs.IntVar(&cfg.batch, "batch", 100, "messages fetched, written and synced at a time")
	fs.BoolVar(&cfg.drain, "drain", false, "stop once every stored record is shipped, instead of following the stream")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (audit-shipper takes only flags)", fs.Arg(0))
	}
	if cfg.batch < 1 {
		return fmt.Errorf("-batch must be at least 1, got %d", cfg.batch)
	}
	opts := []nats.Option{nats.Name("capstan audit-shipper")}
	switch {
	case cfg.creds != "" && cfg.nkey != "":
		return errors.New("give -creds or -nkey, not both")
	case cfg.creds != "":
		opts = append(opts, nats.UserCredentials(cfg.creds))
	case cfg.nkey != "":
		opt, err := nats.NkeyOptionFromSeed(cfg.nkey)
		if err != nil {
			return fmt.Errorf("-nkey %s: %w", cfg.nkey, err)
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(cfg.url, opts...)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer nc.Close()

	var w io.Writer = stdout
	var sync func() error
	if cfg.out != "-" {
		f, err := os.OpenFile(cfg.out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("-out: %w", err)
		}
		defer f.Close()
		w, sync = f, f.Sync
	}
	n, err := ship(ctx, nc, cfg, w, stderr, sync)
	fmt.Fprintf(stderr, "audit-shipper: records shipped: %d\n", n)
	return err
}

// ship reads the audit stream through the durable consumer cfg.name and
// writes every record to w (warnings to warn), calling sync (when set) before it acknowledges
// the messages written. It returns the number of records written, when ctx
// ends or, with cfg.drain, when nothing is left to ship.
func ship(ctx context.Context, nc *nats.Conn, cfg config, w, warn io.Writer, sync func() error) (int, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, cfg.stream, jetstream.ConsumerConfig{
		Durable:       cfg.name,
		Description:   "ships audit records out before the stream's retention drops them",
		FilterSubject: cfg.subject,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxAckPending: 10 * cfg.batch,
	})
	if err != nil {
		return 0, fmt.Errorf("consumer %s on %s: %w", cfg.name, cfg.stream, err)
	}
	shipped := 0
	for ctx.Err() == nil {
		if cfg.drain {
			info, err := cons.Info(ctx)
			if err != nil {
				return shipped, fmt.Errorf("consumer %s: %w", cfg.name, err)
			}
			if info.NumPending == 0 && info.NumAckPending == 0 {
				return shipped, nil
			}
		}
		batch, err := cons.Fetch(cfg.batch, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return shipped, fmt.Errorf("fetch: %w", err)
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			n, err := writeRecords(w, warn, m.Data())
			if err != nil {
				return shipped, err
			}
			shipped += n
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return shipped, fmt.Errorf("fetch: %w", err)
		}
		if len(msgs) == 0 {
			continue
		}
		if sync != nil {
			if err := sync(); err != nil {
				return shipped, fmt.Errorf("sync %s: %w", cfg.out, err)
			}
		}
		for _, m := range msgs {
			// Written and synced: only now may the server forget it. A
			// lost acknowledgement means the message is shipped again.
			if err := m.DoubleAck(ctx); err != nil {
				return shipped, fmt.Errorf("ack: %w", err)
			}
		}
	}
	return shipped, nil
}

// writeRecords writes the records of one audit message (one JSON object a
// line, wire.HeaderAuditRecords of them) to w in one write, each line as it
// is stored, and returns how many lines it wrote. A line that is not a
// record is written as well (the audit trail is never edited) and reported
// to warn.
func writeRecords(w, warn io.Writer, data []byte) (int, error) {
	out := make([]byte, 0, len(data)+1)
	n := 0
	for line := range bytes.Lines(data) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		out = append(out, line...)
		if !bytes.HasSuffix(line, []byte("\n")) {
			out = append(out, '\n')
		}
		n++
	}
	if _, err := w.Write(out); err != nil {
		return 0, fmt.Errorf("write: %w", err)
	}
	if recs, err := wire.DecodeAuditRecords(data); err != nil {
		fmt.Fprintf(warn, "audit-shipper: shipped as stored, but %v (%d records decoded)\n", err, len(recs))
	}
	return n, nil
}
