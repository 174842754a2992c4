package workercmd

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/worker"
	"github.com/dustin/go-humanize"
)

// Config is the worker binary's configuration, from the environment
// (docs/operations.md lists every variable).
type Config struct {
	NATSURL            string        `env:"CAPSTAN_NATS_URL"`
	NATSCreds          string        `env:"CAPSTAN_NATS_CREDS"`
	DataDir            string        `env:"CAPSTAN_DATA_DIR" envDefault:"./.capstan"`
	Prefix             string        `env:"CAPSTAN_SUBJECT_PREFIX" envDefault:"capstan"`
	PersonalitiesDir   string        `env:"CAPSTAN_PERSONALITIES_DIR"`
	MCPServersDir      string        `env:"CAPSTAN_MCP_SERVERS_DIR"`
	DefaultPersonality string        `env:"CAPSTAN_DEFAULT_PERSONALITY" envDefault:"default"`
	WorkerID           string        `env:"CAPSTAN_WORKER_ID"`
	Concurrency        int           `env:"CAPSTAN_CONCURRENCY" envDefault:"64"`
	Pool               string        `env:"CAPSTAN_POOL" envDefault:"default"`
	Tools              []string      `env:"CAPSTAN_TOOLS" envSeparator:","`
	MaxDeliver         int           `env:"CAPSTAN_MAX_DELIVER" envDefault:"5"`
	AckWait            time.Duration `env:"CAPSTAN_ACK_WAIT" envDefault:"30s"`
	CallTimeout        time.Duration `env:"CAPSTAN_CALL_TIMEOUT" envDefault:"60s"`
	ShutdownGrace      time.Duration `env:"CAPSTAN_SHUTDOWN_GRACE" envDefault:"30s"`
	SecretsBackend     string        `env:"CAPSTAN_SECRETS_BACKEND" envDefault:"env"`
	SecretsFile        string        `env:"CAPSTAN_SECRETS_FILE"`
	SecretsEnvPrefix   string        `env:"CAPSTAN_SECRETS_ENV_PREFIX" envDefault:"CAPSTAN_SECRET_"`
	SecretCacheTTL     time.Duration `env:"CAPSTAN_SECRET_CACHE_TTL" envDefault:"60s"`
	VaultAddr          string        `env:"VAULT_ADDR"`
	VaultToken         string        `env:"VAULT_TOKEN"`
	VaultRoleID        string        `env:"VAULT_ROLE_ID"`
	VaultSecretID      string        `env:"VAULT_SECRET_ID"`
	VaultCACert        string        `env:"VAULT_CACERT"`
	VaultNamespace     string        `env:"VAULT_NAMESPACE"`
	VaultSkipVerify    string        `env:"VAULT_SKIP_VERIFY"`
	VaultMount         string        `env:"CAPSTAN_VAULT_MOUNT" envDefault:"secret"`
	VaultPrefix        string        `env:"CAPSTAN_VAULT_PREFIX" envDefault:"capstan"`
	HTTPAddr           string        `env:"CAPSTAN_HTTP_ADDR" envDefault:"127.0.0.1:9464"`
	StreamReplicas     int           `env:"CAPSTAN_STREAM_REPLICAS" envDefault:"1"`
	ResultMaxBytes     int           `env:"CAPSTAN_RESULT_MAX_BYTES" envDefault:"1048576"`
	StructuredMaxBytes int           `env:"CAPSTAN_STRUCTURED_MAX_BYTES" envDefault:"262144"`
	Blobs              string        `env:"CAPSTAN_BLOBS" envDefault:"on"`
	BlobTools          []string      `env:"CAPSTAN_BLOB_TOOLS" envSeparator:","`
	BlobMinBytes       int           `env:"CAPSTAN_BLOB_MIN_BYTES" envDefault:"65536"`
	BlobMaxBytes       int           `env:"CAPSTAN_BLOB_MAX_BYTES" envDefault:"67108864"`
	ProcessNetwork     string        `env:"CAPSTAN_PROCESS_NETWORK" envDefault:"confined"`
	MinFreeDisk        string        `env:"CAPSTAN_MIN_FREE_DISK" envDefault:"2GiB"`
	MetricsPersonality bool          `env:"CAPSTAN_METRICS_PERSONALITY_LABEL" envDefault:"false"`
	LogLevel           string        `env:"CAPSTAN_LOG_LEVEL" envDefault:"info"`
	LogFormat          string        `env:"CAPSTAN_LOG_FORMAT"`
}

// validate rejects the explicit zero values that the worker package would
// read as "use the default": CAPSTAN_CONCURRENCY=0 is an error, not 64. Every
// other range check is the worker package's.
func (c Config) validate() error {
	var errs []error
	for _, z := range []struct {
		name string
		zero bool
		want string
	}{
		{"CAPSTAN_CONCURRENCY", c.Concurrency == 0, "must be at least 1, got 0"},
		{"CAPSTAN_MAX_DELIVER", c.MaxDeliver == 0, "must be at least 1, got 0"},
		{"CAPSTAN_STREAM_REPLICAS", c.StreamReplicas == 0, "must be 1 to 5, got 0"},
		{"CAPSTAN_CALL_TIMEOUT", c.CallTimeout == 0, "must be positive, got 0s"},
		{"CAPSTAN_ACK_WAIT", c.AckWait == 0, "must be at least 3s, got 0s"},
		{"CAPSTAN_DATA_DIR", c.DataDir == "", "must not be empty"},
		{"CAPSTAN_SUBJECT_PREFIX", c.Prefix == "", "must not be empty"},
		{"CAPSTAN_POOL", c.Pool == "", "must not be empty"},
		{"CAPSTAN_DEFAULT_PERSONALITY", c.DefaultPersonality == "", "must not be empty"},
		{"CAPSTAN_SECRETS_BACKEND", c.SecretsBackend == "", "must not be empty"},
		{"CAPSTAN_RESULT_MAX_BYTES", c.ResultMaxBytes == 0, "must be at least 16384, got 0"},
		{"CAPSTAN_STRUCTURED_MAX_BYTES", c.StructuredMaxBytes == 0, "must be at least 1, got 0"},
		{"CAPSTAN_BLOB_MAX_BYTES", c.BlobMaxBytes == 0, "must be 1 to 1073741824, got 0"},
	} {
		if z.zero {
			errs = append(errs, fmt.Errorf("%s %s", z.name, z.want))
		}
	}
	if c.Blobs != "on" && c.Blobs != "off" {
		errs = append(errs, fmt.Errorf("CAPSTAN_BLOBS %q must be on or off", c.Blobs))
	}
	if c.BlobMinBytes < 0 {
		errs = append(errs, fmt.Errorf("CAPSTAN_BLOB_MIN_BYTES must not be negative, got %d", c.BlobMinBytes))
	}
	if _, err := c.minFreeDisk(); err != nil {
		errs = append(errs, err)
	}
	if v, err := strconv.ParseBool(c.VaultSkipVerify); c.VaultSkipVerify != "" && (err != nil || v) {
		errs = append(errs, errors.New("VAULT_SKIP_VERIFY is not supported: the worker always verifies Vault's TLS certificate (give its CA with VAULT_CACERT)"))
	}
	return errors.Join(errs...)
}

// minFreeDisk parses CAPSTAN_MIN_FREE_DISK: a size such as 2GiB or 500MB;
// 0 turns the check off (-1 in the worker package, whose 0 means its
// default).
func (c Config) minFreeDisk() (int64, error) {
	n, err := humanize.ParseBytes(strings.TrimSpace(c.MinFreeDisk))
	if err != nil || n > math.MaxInt64 {
		return 0, fmt.Errorf("CAPSTAN_MIN_FREE_DISK %q is not a size (use a number with a unit, such as 2GiB or 500MB; 0 turns the check off)", c.MinFreeDisk)
	}
	if n == 0 {
		return -1, nil
	}
	return int64(n), nil
}

func (c Config) worker() worker.Config {
	tools := make([]string, 0, len(c.Tools))
	for _, t := range c.Tools {
		if t != "" {
			tools = append(tools, t)
		}
	}
	var blobTools []string
	for _, t := range c.BlobTools {
		if t = strings.TrimSpace(t); t != "" && t != "*" {
			blobTools = append(blobTools, t)
		}
	}
	minFree, _ := c.minFreeDisk() // checked by validate
	return worker.Config{
		NATSURL: c.NATSURL, NATSCreds: c.NATSCreds, DataDir: c.DataDir, Prefix: c.Prefix,
		PersonalitiesDir: c.PersonalitiesDir, MCPServersDir: c.MCPServersDir, DefaultPersonality: c.DefaultPersonality, WorkerID: c.WorkerID,
		Concurrency: c.Concurrency, Pool: c.Pool, Tools: tools, MaxDeliver: c.MaxDeliver, AckWait: c.AckWait,
		CallTimeout: c.CallTimeout, ShutdownGrace: zeroGrace(c.ShutdownGrace), SecretsBackend: c.SecretsBackend,
		SecretsFile: c.SecretsFile, SecretsEnvPrefix: c.SecretsEnvPrefix, SecretCacheTTL: noZero(c.SecretCacheTTL),
		StreamReplicas: c.StreamReplicas, ProcessNetwork: c.ProcessNetwork, MinFreeDisk: minFree, MetricsPersonalityLabel: c.MetricsPersonality,
		ResultMaxBytes: c.ResultMaxBytes, StructuredMaxBytes: c.StructuredMaxBytes,
		// CAPSTAN_BLOB_MIN_BYTES=0 stores every cut output: -1 in the
		// worker package, whose 0 means its default.
		Blobs: worker.BlobConfig{Off: c.Blobs == "off", Tools: blobTools, MinBytes: cmp.Or(c.BlobMinBytes, -1), MaxBytes: c.BlobMaxBytes},
		Vault: worker.VaultConfig{
			Addr: c.VaultAddr, Token: c.VaultToken, RoleID: c.VaultRoleID, SecretID: c.VaultSecretID,
			CACert: c.VaultCACert, Namespace: c.VaultNamespace, Mount: c.VaultMount, Prefix: c.VaultPrefix,
		},
	}
}

// noZero maps an explicit 0 (CAPSTAN_SECRET_CACHE_TTL=0: no caching) to the
// smallest duration the worker package accepts; 0 there means its default.
func noZero(d time.Duration) time.Duration {
	if d == 0 {
		return time.Nanosecond
	}
	return d
}

// zeroGrace maps CAPSTAN_SHUTDOWN_GRACE=0 (hand back at once) to the
// smallest grace the worker package accepts; 0 there means its default.
func zeroGrace(d time.Duration) time.Duration {
	if d == 0 {
		return time.Millisecond
	}
	return d
}

// configRef matches a worker.Config field named in a message: Config.Pool,
// Config.Blobs.MaxBytes.
var configRef = regexp.MustCompile(`\bConfig\.([A-Z][A-Za-z]*(?:\.[A-Z][A-Za-z]*)?)`)

// envNames maps worker.Config field paths to the variables that set them,
// from the env tags of Config: a field of a nested worker struct is the
// Config field that flattens it ("Blobs.MaxBytes" is BlobMaxBytes,
// "Vault.Mount" VaultMount).
var envNames = func() map[string]string {
	m := map[string]string{}
	for f := range reflect.TypeFor[Config]().Fields() {
		if env, ok := f.Tag.Lookup("env"); ok {
			m[f.Name] = env
		}
	}
	return m
}()

func envName(path string) (string, bool) {
	name := strings.Replace(strings.Replace(path, "Blobs.", "Blob", 1), "Vault.", "Vault", 1)
	env, ok := envNames[name]
	return env, ok
}

// envError is err with the worker.Config fields it names replaced by the
// variables that set them (worker.FieldError names Go fields).
type envError struct {
	msg string
	err error
}

func (e *envError) Error() string { return e.msg }
func (e *envError) Unwrap() error { return e.err }

func inEnvTerms(err error) error {
	if err == nil {
		return nil
	}
	msg := configRef.ReplaceAllStringFunc(err.Error(), func(ref string) string {
		if env, ok := envName(strings.TrimPrefix(ref, "Config.")); ok {
			return env
		}
		return ref
	})
	return &envError{msg: msg, err: err}
}
