package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
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
	// CallsMaxConsumers is the calls stream's limit of consumers (one per
	// pool and personality), set when Capstan creates the stream; a
	// stream created before keeps the server's default (1,000):
	// "nats stream edit CAPSTAN_CALLS --max-consumers 100000" lifts it.
	CallsMaxConsumers = 100000
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
	// Approvals holds the calls held for approval and their decisions
	// (docs/approvals.md).
	Approvals
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
	case Approvals:
		return jetstream.KeyValueConfig{Bucket: n.ApprovalsBucket(), Description: "Capstan calls held for approval and their decisions", History: 1, TTL: ApprovalTTL, Storage: jetstream.FileStorage, Replicas: r}
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

var allBuckets = []Bucket{Personalities, Tools, Cancels, Completions, Leases, Workers, RateLimits, Failures, Storage, ReadRecords, Approvals}

// versionMetadata is the metadata that marks a stream or consumer as created
// (or migrated) for this protocol version.
func versionMetadata() map[string]string {
	return map[string]string{protocol.MetadataProtocol: protocol.Version}
}

func (c *Conn) streamConfigs() []jetstream.StreamConfig {
	n := c.names
	r := c.cfg.Replicas
	return []jetstream.StreamConfig{
		// One consumer per pool and personality (scheduling): the
		// server's default of 1,000 consumers a stream would leave the
		// calls of personality 1,001 unconsumed.
		{Name: n.CallsStream(), Description: "Capstan tool calls", Subjects: []string{n.CallsFilter()}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: DedupeWindow, Replicas: r, MaxConsumers: CallsMaxConsumers, Metadata: versionMetadata()},
		// Direct gets let a reader fetch one stored result by subject
		// ($JS.API.DIRECT.GET.<stream>.<subject>), which server permissions
		// can bind to a tenant's own results.
		{Name: n.ResultsStream(), Description: "Capstan results", Subjects: []string{n.ResultsFilter()}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: c.cfg.ResultsMaxAge, Duplicates: DedupeWindow, Replicas: r, AllowDirect: true, Metadata: versionMetadata()},
		{Name: n.ProgressStream(), Description: "Capstan progress events", Subjects: []string{n.ProgressFilter()}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: ProgressMaxAge, MaxMsgsPerSubject: ProgressPerSubject, Replicas: r, Metadata: versionMetadata()},
		{Name: n.DLQStream(), Description: "Capstan dead letters", Subjects: []string{n.DLQFilter()}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: 7 * 24 * time.Hour, Replicas: r, Metadata: versionMetadata()},
		{Name: n.AuditStream(), Description: "Capstan audit records", Subjects: []string{n.AuditFilter()}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: 30 * 24 * time.Hour, Replicas: r, Metadata: versionMetadata()},
		{Name: c.advisoriesStream(), Description: "Capstan: calls that reached MaxDeliver, kept until a worker of their pool dead-letters them", Subjects: []string{maxDeliveriesSubject(n.CallsStream(), "*")}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, MaxAge: 7 * 24 * time.Hour, Replicas: r, Metadata: versionMetadata()},
	}
}

// IncompatibleError reports an existing stream or bucket whose configuration
// differs from what Capstan needs. Capstan never changes it silently.
type IncompatibleError struct {
	Kind    string // "stream", "bucket" or "consumer"
	Name    string
	Reasons []string
}

// Error names the stream or bucket and every difference.
func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("%s %s exists with an incompatible configuration: %s (Capstan does not change existing %ss; fix or delete it, or use another CAPSTAN_SUBJECT_PREFIX)",
		e.Kind, e.Name, strings.Join(e.Reasons, "; "), e.Kind)
}

// MissingError reports a stream or bucket that does not exist and that this
// connection's NATS user may not create. Cause wraps the server's refusal
// (a *PermissionError, so errors.Is(err, ErrPermissionDenied) holds).
type MissingError struct {
	Kind  string // "stream" or "bucket"
	Name  string
	Cause error
}

// Error names the stream or bucket and says who creates the topology.
func (e *MissingError) Error() string {
	return fmt.Sprintf("%s %s does not exist, and this NATS user may not create it (%v): Capstan's streams and buckets are created "+
		"by a user that may, for example the operator of deploy/nats/auth.conf; connect once as that user first "+
		"(e.g. \"dispatcher personality put <dir>\" or \"dispatcher tools\"; docs/operations.md, \"NATS users\")", e.Kind, e.Name, e.Cause)
}

// Unwrap returns the server's refusal.
func (e *MissingError) Unwrap() error { return e.Cause }

// VersionError reports a stream or consumer created for a protocol version
// newer than this component's.
type VersionError struct {
	Kind, Name, Version string
}

// Error names the stream or consumer and both versions.
func (e *VersionError) Error() string {
	return fmt.Sprintf("%s %s was created for Capstan protocol version %s; this component speaks version %s: upgrade it",
		e.Kind, e.Name, e.Version, protocol.Version)
}

// EnsureTopology makes sure every stream and bucket exists with a compatible
// configuration. For each one it reads the existing configuration first and
// creates it only when it does not exist, so a user that may read but not
// create streams works once the topology exists:
//
//   - an existing stream or bucket whose essential configuration differs is
//     reported (*IncompatibleError), and so is a stream created for a newer
//     protocol version (*VersionError); it is never changed;
//   - streams created by protocol version 1 (no capstan_protocol metadata)
//     are migrated when that is safe, or reported (*MigrationError; see
//     migrate);
//   - a missing one is created; if the server refuses the creation for lack
//     of permission, the error is a *MissingError; if another component
//     created it meanwhile, that one is checked instead;
//   - one this user may not even read is left alone: the users that may
//     read it check it (a tenant's user reads only what it needs);
//   - the blobs bucket (an Object Store bucket, see PutBlob) is created
//     like the others, but a user that may not create it connects without
//     it.
func (c *Conn) EnsureTopology(ctx context.Context) error {
	wants := c.streamConfigs()
	var v1 []versionOne
	for _, want := range wants {
		have, err := c.ensureStream(ctx, want)
		if err != nil {
			return err
		}
		if have != nil {
			v1 = append(v1, versionOne{want: want, have: *have})
		}
	}
	if len(v1) > 0 {
		if err := c.migrate(ctx, v1); err != nil {
			return err
		}
	}
	for _, b := range allBuckets {
		if err := c.ensureBucket(ctx, c.bucketConfig(b)); err != nil {
			return err
		}
	}
	// The blobs bucket is optional for a user that may not create it: a
	// client without it reads every result but no blob, and a worker
	// checks it with BlobsReady.
	var missing *MissingError
	if err := c.ensureBlobs(ctx); err != nil && !errors.As(err, &missing) {
		return err
	}
	return nil
}

// versionOne is a stream created by protocol version 1: the configuration
// wanted and the one it has.
type versionOne struct {
	want, have jetstream.StreamConfig
}

// streamConfig reads the configuration of stream (jetstream.ErrStreamNotFound
// when it does not exist, ErrPermissionDenied when this user may not read it).
func (c *Conn) streamConfig(ctx context.Context, name string) (*jetstream.StreamConfig, error) {
	var cfg *jetstream.StreamConfig
	err := c.den.guard(ctx, []string{apiStreamInfo(name)}, func(ctx context.Context) error {
		s, err := c.js.Stream(ctx, name)
		if err != nil {
			return err
		}
		have := s.CachedInfo().Config
		cfg = &have
		return nil
	})
	return cfg, err
}

// ensureStream reads stream want.Name and creates it when it does not exist.
// It returns the existing configuration when the stream was created by
// protocol version 1 (to be migrated), else nil.
func (c *Conn) ensureStream(ctx context.Context, want jetstream.StreamConfig) (*jetstream.StreamConfig, error) {
	have, err := c.streamConfig(ctx, want.Name)
	switch {
	case err == nil:
		return checkStream(*have, want)
	case errors.Is(err, ErrPermissionDenied):
		return nil, nil // not this user's to check
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, fmt.Errorf("bus: read stream %s: %w", want.Name, err)
	}
	err = c.den.guard(ctx, []string{apiStreamCreate(want.Name)}, func(ctx context.Context) error {
		_, err := c.js.CreateStream(ctx, want)
		return err
	})
	switch {
	case err == nil:
		return nil, nil
	case errors.Is(err, ErrPermissionDenied):
		return nil, &MissingError{Kind: "stream", Name: want.Name, Cause: err}
	case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
		// Created by another component since it was read: check that one.
		if have, err = c.streamConfig(ctx, want.Name); err != nil {
			return nil, fmt.Errorf("bus: read stream %s: %w", want.Name, err)
		}
		return checkStream(*have, want)
	}
	return nil, fmt.Errorf("bus: create stream %s: %w", want.Name, err)
}

// checkStream compares an existing stream with the wanted configuration. It
// returns have when the stream was created by protocol version 1.
func checkStream(have, want jetstream.StreamConfig) (*jetstream.StreamConfig, error) {
	reasons := streamDiff(have, want)
	version := have.Metadata[protocol.MetadataProtocol]
	if version == protocol.Version && want.AllowDirect && !have.AllowDirect {
		reasons = append(reasons, "direct gets are not allowed (allow_direct false), want allowed")
	}
	if len(reasons) > 0 {
		return nil, &IncompatibleError{Kind: "stream", Name: want.Name, Reasons: reasons}
	}
	switch version {
	case protocol.Version:
		return nil, nil
	case "":
		return &have, nil
	}
	return nil, &VersionError{Kind: "stream", Name: want.Name, Version: version}
}

// streamDiff lists the differences that break Capstan's semantics; tuning
// such as MaxAge or replicas is the operator's to change. A stream that
// copies its messages elsewhere (republish, mirror, sources) or rewrites
// their subjects is refused whoever created it: republished into
// $KV.<p>_personalities.> it would write personalities.
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
	return append(r, copyDiff(have)...)
}

// copyDiff lists what makes a stream copy or rewrite its messages.
func copyDiff(have jetstream.StreamConfig) []string {
	var r []string
	if have.RePublish != nil {
		r = append(r, fmt.Sprintf("it republishes its messages to %q, want no republish", have.RePublish.Destination))
	}
	if have.Mirror != nil {
		r = append(r, fmt.Sprintf("it mirrors stream %s, want no mirror", have.Mirror.Name))
	}
	if len(have.Sources) > 0 {
		r = append(r, fmt.Sprintf("it sources %d other streams, want none", len(have.Sources)))
	}
	if have.SubjectTransform != nil {
		r = append(r, "it transforms subjects, want no transform")
	}
	return r
}

// ensureBucket reads bucket want.Bucket and creates it when it does not
// exist, as ensureStream does for streams.
func (c *Conn) ensureBucket(ctx context.Context, want jetstream.KeyValueConfig) error {
	stream := kvStream(want.Bucket)
	have, err := c.streamConfig(ctx, stream)
	switch {
	case err == nil:
		return checkBucket(*have, want)
	case errors.Is(err, ErrPermissionDenied):
		return nil // not this user's to check
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("bus: read bucket %s: %w", want.Bucket, err)
	}
	err = c.den.guard(ctx, []string{apiStreamCreate(stream)}, func(ctx context.Context) error {
		_, err := c.js.CreateKeyValue(ctx, want)
		return err
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrPermissionDenied):
		return &MissingError{Kind: "bucket", Name: want.Bucket, Cause: err}
	case errors.Is(err, jetstream.ErrBucketExists), errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
		if have, err = c.streamConfig(ctx, stream); err != nil {
			return fmt.Errorf("bus: read bucket %s: %w", want.Bucket, err)
		}
		return checkBucket(*have, want)
	}
	return fmt.Errorf("bus: create bucket %s: %w", want.Bucket, err)
}

// checkBucket compares the stream of an existing bucket with the wanted
// bucket configuration.
func checkBucket(have jetstream.StreamConfig, want jetstream.KeyValueConfig) error {
	var reasons []string
	if have.MaxAge != want.TTL {
		reasons = append(reasons, fmt.Sprintf("ttl is %s, want %s", have.MaxAge, want.TTL))
	}
	if want.LimitMarkerTTL > 0 && have.SubjectDeleteMarkerTTL == 0 {
		reasons = append(reasons, "per-key TTLs are not enabled (limit marker TTL unset)")
	}
	reasons = append(reasons, copyDiff(have)...)
	if len(reasons) > 0 {
		return &IncompatibleError{Kind: "bucket", Name: want.Bucket, Reasons: reasons}
	}
	return nil
}
