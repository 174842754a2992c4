// Package callexec is the executor of one delivered call: the worker's pool
// hands it a delivery (Services.Handle) and it takes the call from decode to
// ack, in the order the call lives. It depends only on the small interfaces
// it declares here (bus operations, tools, policy lookup, rate limits, the
// in-flight book, leases, the audit log, the accessors' backends) and on the
// observation middleware; the pool builds Services once, at Run, and an
// Executor per delivery.
package callexec

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/pipeline"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/ratelimit"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/worker/internal/cancelbook"
	"github.com/capstanhq/capstan/worker/internal/lease"
	"github.com/capstanhq/capstan/worker/internal/observe"
	"github.com/capstanhq/capstan/worker/internal/toolset"
)

// OpTimeout bounds each bus operation a call handler makes (publish, KV, ack).
const OpTimeout = 10 * time.Second

// ResultRetryLimit is how long a worker retries publishing a computed result
// that fails for a reason retrying may cure (the server is unreachable, a
// stream has no leader): then the call is dead-lettered and answered with
// an abandonment result, or, when even that cannot be published, handed
// back for a later delivery (docs/reliability.md, "Publishing results").
const ResultRetryLimit = time.Minute

// ShutdownMargin is how long after the shutdown grace a worker's Run takes
// at most: calls handed back, leases released, the catalog left. Every bus
// operation still waiting then gives up, so a worker whose NATS server is
// gone exits within ShutdownGrace + ShutdownMargin.
const ShutdownMargin = 3 * time.Second

// Ledger is the results stream: the call's stored result, and the publish
// of the first (and only) one.
type Ledger interface {
	LastMsg(ctx context.Context, stream, subject string) (*bus.Msg, error)
	PublishFirst(ctx context.Context, subject string, data []byte, hdr bus.Header) error
}

// Publisher publishes to a stream (dead letters, progress, audit records),
// within the server's max payload.
type Publisher interface {
	Publish(ctx context.Context, subject string, data []byte, hdr bus.Header, msgID string) (duplicate bool, err error)
	MaxPayload() int
}

// Streams reads and trims the streams: an abandoned call, and whether a
// stream exists at all.
type Streams interface {
	GetMsg(ctx context.Context, stream string, seq uint64) (*bus.Msg, error)
	DeleteMsg(ctx context.Context, stream string, seq uint64) error
	StreamExists(ctx context.Context, stream string) (bool, error)
}

// BlobStore stores full outputs by reference.
type BlobStore interface {
	PutBlob(ctx context.Context, name, nuid, contentType string, data []byte) (protocol.BlobRef, error)
}

// Bus is every bus operation a call makes (a *bus.Conn).
type Bus interface {
	Ledger
	Publisher
	Streams
	BlobStore
}

// Tools finds a hosted tool by name.
type Tools interface {
	Lookup(name string) (*toolset.Hosted, bool)
}

// MCP answers for the tools of hosted MCP servers.
type MCP interface {
	// Unavailable is the refusal of a tool whose server is not up, or "".
	Unavailable(name string) string
	// SendTo is the denial of a call whose grant may not send the
	// server's secrets to its host, or nil.
	SendTo(name string, g *capability.Grant) error
}

// Policies looks up a personality (the policy watch, read through on a
// miss).
type Policies interface {
	Current(ctx context.Context, id string) (*capability.Personality, error)
}

// Disk holds back calls that need disk while the data directory's file
// system is short of space.
type Disk interface {
	// Low is the reason to hand a call that needs disk back, or nil.
	Low() error
}

// Limiter is the fleet-wide rate limit.
type Limiter interface {
	Allow(ctx context.Context, personality, tool string, requests int, window time.Duration) (ratelimit.Decision, error)
}

// Book is the in-flight book of the calls this worker runs.
type Book interface {
	Add(id string, r *cancelbook.Call) (bool, uint64)
	Remove(id string)
}

// Leases takes and keeps the leases of exclusive calls.
type Leases interface {
	Take(callCtx context.Context, callID string) (*lease.Lease, error)
	Heartbeat(m *bus.Msg, l *lease.Lease, r *cancelbook.Call) (stop func())
}

// Audits is the audit log's group commit.
type Audits interface {
	Write(subject string, record []byte) <-chan error
	WriteThen(subject string, record []byte, then func(error))
}

// Failures is the failures bucket: the last infrastructure failure of a
// call, for its abandonment.
type Failures interface {
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Get(ctx context.Context, key string) (bus.Entry, bool, error)
}

// SendResult publishes a call's result (Services.PublishResult unless a
// test holds it); it returns the size of the published body.
type SendResult func(ctx context.Context, personality, callID string, res *protocol.Result, callHeader bus.Header) (int, error)

// Settings are the worker's settings a call reads.
type Settings struct {
	WorkerID           string
	DefaultPersonality string
	CallTimeout        time.Duration
	ResultMaxBytes     int
	StructuredMaxBytes int
	// SecretsBackend names the configured backend, for the fail-closed
	// refusal.
	SecretsBackend string
	Blobs          BlobSettings
	// RetryLimit is how long a result's publish is retried
	// (ResultRetryLimit; tests shorten it).
	RetryLimit time.Duration
}

// BlobSettings are Config.Blobs, defaulted.
type BlobSettings struct {
	Off                bool
	Tools              []string
	MinBytes, MaxBytes int
}

// Deps is what Services is built from; every field is required unless its
// comment says otherwise.
type Deps struct {
	Settings Settings
	Names    protocol.Names
	Bus      Bus
	Tools    Tools
	MCP      MCP
	Policies Policies
	Disk     Disk
	Limiter  Limiter
	Book     Book
	Leases   Leases
	// Timing is the pool consumer's (the heartbeat's interval).
	Timing   bus.Timing
	Audits   Audits
	Failures Failures
	// Approvals holds calls for approval and reads their decisions.
	Approvals Approvals
	// Backends are what the accessors of a call share.
	Backends pipeline.Backends
	// Secrets is the secrets backend (nil for none: fail closed).
	Secrets secrets.Backend
	// NetworkRefused is the refusal of a process grant with network on a
	// machine without network namespaces, or "".
	NetworkRefused func() string
	Obs            *observe.Observer
	Reducers       *shape.Reducers
	// Creds redacts the worker's own NATS credentials (the embedded
	// server's seed, or the JWT and seed of its credentials file) from
	// everything a call sends out (security.md section 1); nil for none.
	Creds   *shape.Redactor
	Runners *Runners
	Log     *slog.Logger
	// ExecBase is the parent of every call's context, cancelled with
	// cancelbook.ErrShutdown when the shutdown grace ends; Ops the parent
	// of every bus operation, ended ShutdownMargin after the grace.
	ExecBase, Ops context.Context
	// SendResult publishes results; nil uses PublishResult.
	SendResult SendResult
	// BlobsOn reports whether the blobs bucket exists.
	BlobsOn func() bool
	// ReleaseSlot frees the delivery's slot; Finished counts the end of
	// a delivery (it may come after the slot is free: the ack waits for
	// the audit record).
	ReleaseSlot, Finished func()
}

// Services are what every call's executor shares, built once per Run.
type Services struct {
	cfg            Settings
	names          protocol.Names
	bus            Bus
	tools          Tools
	mcp            MCP
	policies       Policies
	disk           Disk
	limiter        Limiter
	book           Book
	leases         Leases
	timing         bus.Timing
	audits         Audits
	failures       Failures
	approvals      Approvals
	backends       pipeline.Backends
	secrets        secrets.Backend
	networkRefused func() string
	obs            *observe.Observer
	reducers       *shape.Reducers
	creds          *shape.Redactor
	runners        *Runners
	log            *slog.Logger
	execBase, ops  context.Context
	sendResult     SendResult
	blobsOn        func() bool
	releaseSlot    func()
	finished       func()
}

// New returns the services of d.
func New(d Deps) *Services {
	s := &Services{cfg: d.Settings, names: d.Names, bus: d.Bus, tools: d.Tools, mcp: d.MCP, policies: d.Policies, disk: d.Disk,
		limiter: d.Limiter, book: d.Book, leases: d.Leases, timing: d.Timing, audits: d.Audits, failures: d.Failures, approvals: d.Approvals,
		backends: d.Backends, secrets: d.Secrets, networkRefused: d.NetworkRefused, obs: d.Obs, reducers: d.Reducers, creds: d.Creds,
		runners: d.Runners, log: d.Log, execBase: d.ExecBase, ops: d.Ops, sendResult: d.SendResult, blobsOn: d.BlobsOn,
		releaseSlot: d.ReleaseSlot, finished: d.Finished}
	if s.sendResult == nil {
		s.sendResult = s.PublishResult
	}
	return s
}

// Handle takes one delivered call from decode to its answer on a new
// Executor, and owns one slot until then (ReleaseSlot); the ack may
// follow later (complete), and then Finished. A panic of the worker's own
// handling is recovered: the call is handed back with backoff.
func (s *Services) Handle(m *bus.Msg) {
	e := &Executor{s: s, m: m}
	defer func() {
		if !e.detached {
			s.finished()
		}
	}()
	defer s.releaseSlot()
	e.ctx, e.cs = s.obs.StartCall(m)
	defer e.cs.End()
	defer e.recover()
	e.Run()
}

// recover turns a panic of the worker's own handling (not the tool's: a
// tool's panic is its execution_failed answer) into an infrastructure
// fault, retried with backoff and dead-lettered after MaxDeliver, so a
// poison call cannot take the worker down.
func (e *Executor) recover() {
	p := recover()
	if p == nil {
		return
	}
	s, m := e.s, e.m
	e.cs.Outcome = "panic"
	reason := fmt.Sprintf("worker panicked while handling the call: %v", p)
	s.recordFailure(e.ctx, e.call.CallID, reason)
	s.log.ErrorContext(e.ctx, "call handler panicked; call handed back", "subject", m.Subject, "call_id", e.call.CallID, "panic", fmt.Sprint(p))
	if !e.detached { // else the audit log acks it or hands it back
		_ = m.Nak(retryDelay(m.Deliveries))
	}
}

// opCtx bounds one bus operation: OpTimeout, and never past the end of the
// shutdown margin (ShutdownMargin after the grace), so that a worker whose
// NATS server is gone still exits in time.
func (s *Services) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.opsBase(), OpTimeout)
}
