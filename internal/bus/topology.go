package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Delivery timing, visible in the consumer's configuration (docs/operations.md).
const (
	// DedupeWindow is the duplicate window of the calls and results streams.
	DedupeWindow = 15 * time.Minute
	// DefaultAckWait is how long a delivered call may go without an ack or a
	// heartbeat, unless configured otherwise (Timing).
	DefaultAckWait = 30 * time.Second
	// MinAckWait is the shortest AckWait accepted: a lease TTL below a
	// second cannot be expressed.
	MinAckWait = 3 * time.Second
	// WorkerTTL is how long a worker stays live in the workers bucket without a heartbeat.
	WorkerTTL = 60 * time.Second
	// RecordTTL is how long cancel requests, completion records and failure
	// reasons are kept (at least the dedupe window).
	RecordTTL = 24 * time.Hour
	// ProgressMaxAge bounds the progress stream.
	ProgressMaxAge = time.Hour
	// ProgressPerSubject bounds events kept per call.
	ProgressPerSubject = 1000
	// MaxAckPending bounds unacknowledged calls per pool consumer.
	MaxAckPending = 20000
)

// LeaseMarkerTTL is how long the leases bucket keeps the marker of an
// expired lease.
const LeaseMarkerTTL = time.Minute

// Timing is the delivery timing of one pool, derived from its consumer's
// AckWait: a running call is heart-beaten (InProgress and lease refresh)
// every third of AckWait, and its lease lives two thirds of AckWait without
// a refresh, so a lease of a lost worker has expired before its call is
// redelivered.
type Timing struct {
	AckWait time.Duration
}

// Heartbeat is how often a running call is heart-beaten.
func (t Timing) Heartbeat() time.Duration { return t.AckWait / 3 }

// LeaseTTL is how long a call lease lives without a refresh (whole seconds,
// at least one: the server's per-key TTL granularity).
func (t Timing) LeaseTTL() time.Duration {
	return max(time.Second, (2 * t.AckWait / 3).Truncate(time.Second))
}

// RetryBackoffText describes the nak delays after an infrastructure fault,
// by delivery count (worker.retryDelay computes them).
const RetryBackoffText = "1s,2s,4s,8s,15s (capped at 15s)"

// Bucket identifies one of Capstan's KV buckets.
type Bucket int

// The buckets. Personalities and Tools are public; the rest are internal.
const (
	Personalities Bucket = iota
	Tools
	Cancels
	Completions
	Leases
	Workers
	RateLimits
	Failures
	// Storage holds the scoped key-value stores of tools (see internal/scoped/kv).
	Storage
	// ReadRecords holds STALE_WRITE read records: (session, path) → mtime.
	ReadRecords
)

func (c *Conn) bucketConfig(b Bucket) jetstream.KeyValueConfig {
	n := c.names
	r := c.cfg.Replicas
	switch b {
	case Personalities:
		return jetstream.KeyValueConfig{Bucket: n.PersonalitiesBucket(), Description: "Capstan personality documents", History: 5, Storage: jetstream.FileStorage, Replicas: r}
	case Tools:
		return jetstream.KeyValueConfig{Bucket: n.ToolsBucket(), Description: "Capstan tool catalog", History: 1, Storage: jetstream.FileStorage, Replicas: r}
	case Cancels:
		return jetstream.KeyValueConfig{Bucket: n.CancelsBucket(), Description: "Capstan cancel requests", History: 1, TTL: RecordTTL, Storage: jetstream.FileStorage, Replicas: r}
	case Completions:
		return jetstream.KeyValueConfig{Bucket: n.CompletionsBucket(), Description: "Capstan completion records", History: 1, TTL: RecordTTL, Storage: jetstream.FileStorage, Replicas: r}
	case Leases:
		// Each lease carries its own TTL (Timing.LeaseTTL), so pools with
		// different AckWaits can share the bucket.
		return jetstream.KeyValueConfig{Bucket: n.LeasesBucket(), Description: "Capstan call leases", History: 1, LimitMarkerTTL: LeaseMarkerTTL, Storage: jetstream.FileStorage, Replicas: r}
	case Workers:
		return jetstream.KeyValueConfig{Bucket: n.WorkersBucket(), Description: "Capstan live workers", History: 1, TTL: WorkerTTL, Storage: jetstream.FileStorage, Replicas: r}
	case RateLimits:
		return jetstream.KeyValueConfig{Bucket: n.RateLimitsBucket(), Description: "Capstan fleet-wide rate-limit counters", History: 1, LimitMarkerTTL: time.Minute, Storage: jetstream.FileStorage, Replicas: r}
	case Failures:
		return jetstream.KeyValueConfig{Bucket: n.FailuresBucket(), Description: "Capstan last infrastructure failure per call", History: 1, TTL: RecordTTL, Storage: jetstream.FileStorage, Replicas: r}
	case Storage:
		return jetstream.KeyValueConfig{Bucket: n.Prefix() + "_storage", Description: "Capstan scoped tool storage", History: 1, LimitMarkerTTL: StorageMarkerTTL, Storage: jetstream.FileStorage, Replicas: r}
	case ReadRecords:
		return jetstream.KeyValueConfig{Bucket: n.Prefix() + "_reads", Description: "Capstan STALE_WRITE read records", History: 1, TTL: RecordTTL, Storage: jetstream.FileStorage, Replicas: r}
	}
	panic(fmt.Sprintf("bus: unknown bucket %d", b))
}

// advisoriesStream captures the server's max-deliveries advisories for the
// calls stream, so an abandoned call is handled even when no worker of its
// pool is connected at the moment the advisory is sent.
func (c *Conn) advisoriesStream() string { return strings.ToUpper(c.names.Prefix()) + "_ADVISORIES" }

func maxDeliveriesSubject(stream, consumer string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + "." + consumer
}

var allBuckets = []Bucket{Personalities, Tools, Cancels, Completions, Leases, Workers, RateLimits, Failures, Storage, ReadRecords}

func (c *Conn) streamConfigs() []jetstream.StreamConfig {
	n := c.names
	r := c.cfg.Replicas
	return []jetstream.StreamConfig{
		{Name: n.CallsStream(), Description: "Capstan tool calls", Subjects: []string{n.CallsFilter()}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: DedupeWindow, Replicas: r},
		{Name: n.ResultsStream(), Description: "Capstan results", Subjects: []string{n.ResultsFilter()}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: c.cfg.ResultsMaxAge, Duplicates: DedupeWindow, Replicas: r},
		{Name: n.ProgressStream(), Description: "Capstan progress events", Subjects: []string{n.ProgressFilter()}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: ProgressMaxAge, MaxMsgsPerSubject: ProgressPerSubject, Replicas: r},
		{Name: n.DLQStream(), Description: "Capstan dead letters", Subjects: []string{n.DLQFilter()}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: 7 * 24 * time.Hour, Replicas: r},
		{Name: n.AuditStream(), Description: "Capstan audit records", Subjects: []string{n.AuditFilter()}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: 30 * 24 * time.Hour, Replicas: r},
		{Name: c.advisoriesStream(), Description: "Capstan: calls that reached MaxDeliver, kept until a worker of their pool dead-letters them", Subjects: []string{maxDeliveriesSubject(n.CallsStream(), "*")}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, MaxAge: 7 * 24 * time.Hour, Replicas: r},
	}
}

// IncompatibleError reports an existing stream or bucket whose configuration
// differs from what Capstan needs. Capstan never changes it silently.
type IncompatibleError struct {
	Kind    string // "stream" or "bucket"
	Name    string
	Reasons []string
}

// Error names the stream or bucket and every difference.
func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("%s %s exists with an incompatible configuration: %s (Capstan does not change existing %ss; fix or delete it, or use another CAPSTAN_SUBJECT_PREFIX)",
		e.Kind, e.Name, strings.Join(e.Reasons, "; "), e.Kind)
}

// EnsureTopology creates every stream and bucket that does not exist, and
// reports an existing one whose essential configuration differs.
func (c *Conn) EnsureTopology(ctx context.Context) error {
	for _, want := range c.streamConfigs() {
		if err := c.ensureStream(ctx, want); err != nil {
			return err
		}
	}
	for _, b := range allBuckets {
		if err := c.ensureBucket(ctx, c.bucketConfig(b)); err != nil {
			return err
		}
	}
	return nil
}

func (c *Conn) ensureStream(ctx context.Context, want jetstream.StreamConfig) error {
	var have *jetstream.StreamConfig // set when the stream exists already
	err := c.den.guard(ctx, []string{apiStreamCreate(want.Name), apiStreamInfo(want.Name)}, func(ctx context.Context) error {
		_, err := c.js.CreateStream(ctx, want)
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		}
		s, err := c.js.Stream(ctx, want.Name)
		if err != nil {
			return fmt.Errorf("read the existing stream: %w", err)
		}
		cfg := s.CachedInfo().Config
		have = &cfg
		return nil
	})
	if err != nil {
		return fmt.Errorf("bus: create stream %s: %w", want.Name, err)
	}
	if have == nil {
		return nil
	}
	if reasons := streamDiff(*have, want); len(reasons) > 0 {
		return &IncompatibleError{Kind: "stream", Name: want.Name, Reasons: reasons}
	}
	return nil
}

// streamDiff lists the differences that break Capstan's semantics; tuning
// such as MaxAge or replicas is the operator's to change.
func streamDiff(have, want jetstream.StreamConfig) []string {
	var r []string
	hs, ws := slices.Clone(have.Subjects), slices.Clone(want.Subjects)
	slices.Sort(hs)
	slices.Sort(ws)
	if !slices.Equal(hs, ws) {
		r = append(r, fmt.Sprintf("subjects are %v, want %v", have.Subjects, want.Subjects))
	}
	if have.Retention != want.Retention {
		r = append(r, fmt.Sprintf("retention is %s, want %s", have.Retention, want.Retention))
	}
	if want.Duplicates > 0 && have.Duplicates < 10*time.Minute {
		r = append(r, fmt.Sprintf("duplicate window is %s, want at least 10m", have.Duplicates))
	}
	if have.Discard != want.Discard {
		r = append(r, fmt.Sprintf("discard policy is %s, want %s", have.Discard, want.Discard))
	}
	return r
}

func (c *Conn) ensureBucket(ctx context.Context, want jetstream.KeyValueConfig) error {
	var st jetstream.KeyValueStatus // set when the bucket exists already
	stream := kvStream(want.Bucket)
	err := c.den.guard(ctx, []string{apiStreamCreate(stream), apiStreamInfo(stream)}, func(ctx context.Context) error {
		_, err := c.js.CreateKeyValue(ctx, want)
		if !errors.Is(err, jetstream.ErrBucketExists) && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		}
		kv, err := c.js.KeyValue(ctx, want.Bucket)
		if err != nil {
			return fmt.Errorf("read the existing bucket: %w", err)
		}
		if st, err = kv.Status(ctx); err != nil {
			return fmt.Errorf("read the existing bucket: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("bus: create bucket %s: %w", want.Bucket, err)
	}
	if st == nil {
		return nil
	}
	var reasons []string
	if st.TTL() != want.TTL {
		reasons = append(reasons, fmt.Sprintf("ttl is %s, want %s", st.TTL(), want.TTL))
	}
	if want.LimitMarkerTTL > 0 && st.LimitMarkerTTL() == 0 {
		reasons = append(reasons, "per-key TTLs are not enabled (limit marker TTL unset)")
	}
	if len(reasons) > 0 {
		return &IncompatibleError{Kind: "bucket", Name: want.Bucket, Reasons: reasons}
	}
	return nil
}
