package worker

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/worker/internal/callexec"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Config configures a worker. The zero value of every field means its
// documented default (docs/operations.md).
type Config struct {
	// NATSURL lists NATS servers, comma-separated. Empty starts an embedded
	// JetStream server on EmbeddedPort with its store in DataDir; it requires
	// the credentials it writes to <DataDir>/embedded.creds.
	NATSURL string
	// NATSConn, when set, is the NATS connection the worker uses instead
	// of dialing NATSURL or starting an embedded server (NATSURL and
	// NATSCreds must then be empty). The caller keeps owning it: the
	// worker does not close it. It must be allowed what a worker does
	// (docs/operations.md, "NATS users").
	NATSConn *nats.Conn
	// NATSCreds is an optional credentials file for NATSURL: a NATS
	// credentials file or an NKey user seed file (such as another worker's
	// embedded.creds). Not used with an embedded server.
	NATSCreds string
	// DataDir is the embedded server's JetStream store and credentials file;
	// default ./.capstan. It is on every personality's file floor.
	DataDir string
	// EmbeddedPort is the embedded server's port: 0 = 4222, -1 = random.
	EmbeddedPort int
	// Prefix is the subject prefix; default "capstan".
	Prefix string
	// PersonalitiesDir holds *.yaml/*.yml/*.json personality files loaded into
	// the personalities bucket at start.
	PersonalitiesDir string
	// MCPServersDir holds *.yaml/*.yml MCP server definitions, one server
	// each (CAPSTAN_MCP_SERVERS_DIR, docs/mcp.md): the worker starts them
	// and hosts their tools as mcp__<server>__<tool>. An invalid file stops
	// New, naming the file and every problem. Tools (CAPSTAN_TOOLS) does
	// not filter them.
	MCPServersDir string
	// DefaultPersonality applies to calls that name none; default "default".
	DefaultPersonality string
	// WorkerID identifies the worker; default hostname-pid.
	WorkerID string
	// Concurrency is how many calls run at once; default 64.
	Concurrency int
	// Pool is the pool served; default "default".
	Pool string
	// Tools lists the tool names hosted; empty hosts every tool given to New.
	Tools []string
	// MaxDeliver is how many deliveries a call gets before it is abandoned; default 5.
	MaxDeliver int
	// AckWait is how long a delivered call may go without an ack or a
	// heartbeat before it is redelivered; default 30s, at least 3s. Running
	// calls are heart-beaten every AckWait/3 and their leases live 2/3 of
	// it. Every worker of a pool must use the same value.
	AckWait time.Duration
	// CallTimeout is the default and maximum execution time per call; default 60s.
	CallTimeout time.Duration
	// ShutdownGrace is the drain time before in-flight calls are cancelled and
	// handed back; default 30s.
	ShutdownGrace time.Duration
	// SecretsBackend is vault, file, env or none; default env.
	SecretsBackend string
	// SecretsFile is the file of the file backend.
	SecretsFile string
	// SecretsEnvPrefix is the env backend's prefix; default CAPSTAN_SECRET_.
	SecretsEnvPrefix string
	// Vault configures the vault secrets backend (SecretsBackend "vault").
	Vault VaultConfig
	// SecretCacheTTL is how long a resolved secret is reused; default 60s.
	SecretCacheTTL time.Duration
	// Getenv reads the env secrets backend's variables; default os.Getenv.
	Getenv func(string) string
	// Home is the value of ${HOME} in personalities and the home of the
	// file floor (~/.ssh, ...); default the user's home.
	Home string
	// ProcessNetwork is what a call whose process grant includes network
	// gets where the machine allows no user namespace
	// (CAPSTAN_PROCESS_NETWORK): "" or "confined" refuses it,
	// "unconfined" lets its children use TCP and UDP to any host.
	ProcessNetwork string
	// MinFreeDisk is the free space of DataDir's file system below which
	// the worker hands back calls that start processes or write files
	// (CAPSTAN_MIN_FREE_DISK; security.md, "Disk"), and /readyz says so;
	// other calls keep running. 0 means DefaultMinFreeDisk (2 GiB); a
	// negative value turns the check off.
	MinFreeDisk int64
	// MetricsPersonalityLabel labels capstan_calls_waiting and
	// capstan_calls_running by personality
	// (CAPSTAN_METRICS_PERSONALITY_LABEL); off, they are the pool's totals
	// (one series per personality can be many).
	MetricsPersonalityLabel bool
	// ResultMaxBytes caps a result message, headers included
	// (CAPSTAN_RESULT_MAX_BYTES); default DefaultResultMaxBytes (1 MiB), at
	// least MinResultMaxBytes. The server's max payload caps it further.
	ResultMaxBytes int
	// StructuredMaxBytes caps a result's structured payload, as JSON
	// (CAPSTAN_STRUCTURED_MAX_BYTES); a larger one is left out of the
	// message (and stored as a blob where allowed); default
	// DefaultStructuredMaxBytes (256 KiB).
	StructuredMaxBytes int
	// Blobs configures large outputs stored by reference (CAPSTAN_BLOB_*).
	Blobs BlobConfig
	// StreamReplicas is the replica count of the streams and buckets this
	// worker creates when they do not exist yet (3 on a 3-node cluster);
	// default 1. Existing ones are left as they are.
	StreamReplicas int
	// Logger receives one line per call outcome; default slog.Default().
	// Lines logged for a call carry its trace_id and span_id.
	Logger *slog.Logger
	// TracerProvider makes the worker's spans (a consumer span per delivery
	// and its children); default otel.GetTracerProvider(), a no-op unless
	// the program set one.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the worker's metrics (docs/operations.md);
	// default otel.GetMeterProvider(), a no-op unless the program set one.
	MeterProvider metric.MeterProvider

	// mcpPrivateURLs lets hosted url servers be reached on loopback: set
	// only by the tests (export_test.go), never by a program.
	mcpPrivateURLs bool
}

// BlobConfig configures which full outputs a worker stores by reference in
// the blobs bucket when the result message carries only a cut of them
// (docs/protocol.md, "Large outputs by reference"). A personality may
// forbid blobs for its calls (budget.blobs: false).
type BlobConfig struct {
	// Off stores no blob at all (CAPSTAN_BLOBS=off).
	Off bool
	// Tools lists the tools whose outputs may be stored (CAPSTAN_BLOB_TOOLS);
	// empty or ["*"] means every hosted tool.
	Tools []string
	// MinBytes is the smallest full output stored (CAPSTAN_BLOB_MIN_BYTES):
	// a smaller one is cheap to ask for again in parts; default
	// DefaultBlobMinBytes (64 KiB); -1 stores any cut output.
	MinBytes int
	// MaxBytes is the largest full output stored (CAPSTAN_BLOB_MAX_BYTES);
	// a larger one is not stored at all; default DefaultBlobMaxBytes
	// (64 MiB), at most MaxBlobMaxBytes.
	MaxBytes int
}

// Blob size defaults and bounds (BlobConfig).
const (
	DefaultBlobMinBytes = 64 << 10
	DefaultBlobMaxBytes = 64 << 20
	MaxBlobMaxBytes     = 1 << 30
)

// VaultConfig configures the vault secrets backend: KV v2 secrets, ref
// "a/b/c" being field "c" of "<Mount>/data/<Prefix>/a/b". The worker logs in
// with Token or with AppRole (RoleID and SecretID), renews the token and logs
// in again when renewal ends. TLS verification is always on; the Vault
// client library's own environment variables are not read.
type VaultConfig struct {
	// Addr is Vault's address (VAULT_ADDR); default https://127.0.0.1:8200.
	Addr string
	// Token is a Vault token (VAULT_TOKEN); exclusive with RoleID.
	Token string
	// RoleID and SecretID log in with AppRole (VAULT_ROLE_ID, VAULT_SECRET_ID).
	RoleID, SecretID string
	// CACert is a PEM file of CAs that verify Vault's certificate (VAULT_CACERT).
	CACert string
	// Namespace is the Vault Enterprise namespace (VAULT_NAMESPACE).
	Namespace string
	// Mount is the KV v2 mount (CAPSTAN_VAULT_MOUNT); default "secret".
	Mount string
	// Prefix is the path below the mount that refs live under
	// (CAPSTAN_VAULT_PREFIX); default "capstan", "-" for none.
	Prefix string
}

// Secrets backends.
const (
	SecretsVault = "vault"
	SecretsFile  = "file"
	SecretsEnv   = "env"
	SecretsNone  = "none"
)

var workerIDRE = regexp.MustCompile(`^[A-Za-z0-9_=-]([A-Za-z0-9_=.-]{0,254}[A-Za-z0-9_=-])?$`)

func (c Config) withDefaults() Config {
	c.DataDir = cmp.Or(c.DataDir, ".capstan")
	c.Prefix = cmp.Or(c.Prefix, protocol.DefaultPrefix)
	c.DefaultPersonality = cmp.Or(c.DefaultPersonality, "default")
	if c.WorkerID == "" {
		host, _ := os.Hostname()
		c.WorkerID = cmp.Or(host, "worker") + "-" + strconv.Itoa(os.Getpid())
	}
	c.Concurrency = cmp.Or(c.Concurrency, 64)
	c.MinFreeDisk = cmp.Or(c.MinFreeDisk, DefaultMinFreeDisk)
	c.Pool = cmp.Or(c.Pool, protocol.DefaultPool)
	c.MaxDeliver = cmp.Or(c.MaxDeliver, 5)
	c.AckWait = cmp.Or(c.AckWait, bus.DefaultAckWait)
	c.CallTimeout = cmp.Or(c.CallTimeout, 60*time.Second)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, 30*time.Second)
	c.SecretsBackend = cmp.Or(c.SecretsBackend, SecretsEnv)
	c.SecretsEnvPrefix = cmp.Or(c.SecretsEnvPrefix, "CAPSTAN_SECRET_")
	c.SecretCacheTTL = cmp.Or(c.SecretCacheTTL, 60*time.Second)
	c.StreamReplicas = cmp.Or(c.StreamReplicas, 1)
	c.ResultMaxBytes = cmp.Or(c.ResultMaxBytes, DefaultResultMaxBytes)
	c.StructuredMaxBytes = cmp.Or(c.StructuredMaxBytes, DefaultStructuredMaxBytes)
	c.Blobs.MinBytes = cmp.Or(c.Blobs.MinBytes, DefaultBlobMinBytes)
	if c.Blobs.MinBytes < 0 {
		c.Blobs.MinBytes = 0
	}
	c.Blobs.MaxBytes = cmp.Or(c.Blobs.MaxBytes, DefaultBlobMaxBytes)
	if len(c.Blobs.Tools) == 1 && c.Blobs.Tools[0] == "*" {
		c.Blobs.Tools = nil
	}
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if c.Home == "" {
		c.Home, _ = os.UserHomeDir()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	for _, dir := range []*string{&c.PersonalitiesDir, &c.MCPServersDir} {
		if *dir != "" {
			if abs, err := filepath.Abs(*dir); err == nil {
				*dir = abs
			}
		}
	}
	return c
}

// FieldError is a Config field that New refuses. Field is the field's Go
// path in Config ("Concurrency", "Blobs.MaxBytes"); the message starts
// with "Config." and the path, and may name other fields the same way. A
// program that fills Config from elsewhere (environment variables, flags)
// finds the field with errors.As and names its own setting.
type FieldError struct {
	// Field is the field's path below Config.
	Field string
	// Err says what is wrong with the value.
	Err error
}

// Error returns "Config.<Field> <reason>".
func (e *FieldError) Error() string { return "Config." + e.Field + " " + e.Err.Error() }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErrorf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

func (c Config) validate() error {
	var errs []error
	if c.NATSConn != nil && (c.NATSURL != "" || c.NATSCreds != "") {
		errs = append(errs, fieldErrorf("NATSConn", "is set: Config.NATSURL and Config.NATSCreds must be empty"))
	}
	for _, tok := range []struct{ field, value string }{{"Prefix", c.Prefix}, {"Pool", c.Pool}, {"DefaultPersonality", c.DefaultPersonality}} {
		if !protocol.ValidToken(tok.value) {
			errs = append(errs, fieldErrorf(tok.field, "%q must match ^[A-Za-z0-9_-]{1,128}$", tok.value))
		}
	}
	if c.Concurrency < 1 {
		errs = append(errs, fieldErrorf("Concurrency", "must be at least 1, got %d", c.Concurrency))
	}
	if c.StreamReplicas < 1 || c.StreamReplicas > 5 {
		errs = append(errs, fieldErrorf("StreamReplicas", "must be 1 to 5, got %d", c.StreamReplicas))
	}
	if c.MaxDeliver < 1 {
		errs = append(errs, fieldErrorf("MaxDeliver", "must be at least 1, got %d", c.MaxDeliver))
	}
	if c.AckWait < bus.MinAckWait {
		errs = append(errs, fieldErrorf("AckWait", "must be at least %s, got %s", bus.MinAckWait, c.AckWait))
	}
	if c.CallTimeout <= 0 {
		errs = append(errs, fieldErrorf("CallTimeout", "must be positive, got %s", c.CallTimeout))
	}
	if c.SecretCacheTTL < 0 {
		errs = append(errs, fieldErrorf("SecretCacheTTL", "must not be negative, got %s", c.SecretCacheTTL))
	}
	if c.ShutdownGrace < 0 {
		errs = append(errs, fieldErrorf("ShutdownGrace", "must not be negative, got %s", c.ShutdownGrace))
	}
	if c.ResultMaxBytes < MinResultMaxBytes {
		errs = append(errs, fieldErrorf("ResultMaxBytes", "must be at least %d, got %d", MinResultMaxBytes, c.ResultMaxBytes))
	}
	if c.StructuredMaxBytes < 1 {
		errs = append(errs, fieldErrorf("StructuredMaxBytes", "must be at least 1, got %d", c.StructuredMaxBytes))
	}
	if c.Blobs.MaxBytes < 1 || c.Blobs.MaxBytes > MaxBlobMaxBytes {
		errs = append(errs, fieldErrorf("Blobs.MaxBytes", "must be 1 to %d, got %d", MaxBlobMaxBytes, c.Blobs.MaxBytes))
	}
	if c.Blobs.MinBytes > c.Blobs.MaxBytes {
		errs = append(errs, fieldErrorf("Blobs.MinBytes", "(%d) must not exceed Config.Blobs.MaxBytes (%d)", c.Blobs.MinBytes, c.Blobs.MaxBytes))
	}
	if _, err := process.ParseNetworkMode(c.ProcessNetwork); err != nil {
		errs = append(errs, &FieldError{Field: "ProcessNetwork", Err: err})
	}
	switch c.SecretsBackend {
	case SecretsVault, SecretsFile, SecretsEnv, SecretsNone:
	default:
		errs = append(errs, fieldErrorf("SecretsBackend", "%q must be vault, file, env or none", c.SecretsBackend))
	}
	if c.SecretsBackend == SecretsFile && c.SecretsFile == "" {
		errs = append(errs, fieldErrorf("SecretsFile", "must be set when Config.SecretsBackend is %q", SecretsFile))
	}
	if !workerIDRE.MatchString(c.WorkerID) {
		errs = append(errs, fieldErrorf("WorkerID", "%q must be 1 to 256 of A-Z a-z 0-9 _ = - . and must not start or end with a dot", c.WorkerID))
	}
	return errors.Join(errs...)
}

// Size limits of what the worker publishes (docs/reliability.md, "Result
// size"). Every message also stays under the server's max payload: the
// result limit is the smaller of Config.ResultMaxBytes and the max payload
// the connection reports.
const (
	// DefaultResultMaxBytes is Config.ResultMaxBytes when unset: 1 MiB, the
	// max payload of a stock nats-server, so that results fit any server
	// and any client's buffers, also where the server allows more.
	DefaultResultMaxBytes = callexec.DefaultResultMaxBytes
	// MinResultMaxBytes is the smallest ResultMaxBytes accepted.
	MinResultMaxBytes = callexec.MinResultMaxBytes
	// DefaultStructuredMaxBytes is Config.StructuredMaxBytes when unset: a
	// structured payload whose JSON is larger is left out of the message.
	DefaultStructuredMaxBytes = callexec.DefaultStructuredMaxBytes
	// ProgressMaxChars caps a progress event's message (code points; the
	// rest is cut as the budget trim cuts).
	ProgressMaxChars = callexec.ProgressMaxChars
	// ReasonMaxChars caps a failure reason: the Capstan-Dead-Reason header,
	// the stored failure of a call, the reason of an abandonment result.
	ReasonMaxChars = callexec.ReasonMaxChars
	// AuditMaxBytes caps one audit message (a batch of records), headers
	// included; the server's max payload caps it further.
	AuditMaxBytes = callexec.AuditMaxBytes
)

// DefaultMinFreeDisk is Config.MinFreeDisk's default: 2 GiB.
const DefaultMinFreeDisk = 2 << 30
