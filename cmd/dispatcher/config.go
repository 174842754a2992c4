package main

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/envconfig"

	"github.com/capstanhq/capstan/internal/protocol"
)

// Config is the dispatcher's whole configuration, read from the environment
// (docs/operations.md). The local-mode fields configure the in-process
// worker pool started when CAPSTAN_NATS_URL is unset and no server answers on
// nats://127.0.0.1:4222. The help tag feeds the usage text.
type Config struct {
	NATSURL            string        `env:"CAPSTAN_NATS_URL" help:"NATS servers, comma-separated; unset = local mode"`
	NATSCreds          string        `env:"CAPSTAN_NATS_CREDS" help:"credentials file (NATS .creds or NKey seed); unset: <data dir>/embedded.creds for a loopback server"`
	InboxPrefix        string        `env:"CAPSTAN_NATS_INBOX_PREFIX" help:"prefix of reply subjects (default _INBOX); a tenant's NATS user sets the one it may subscribe to, e.g. _INBOX_researcher"`
	DataDir            string        `env:"CAPSTAN_DATA_DIR" envDefault:".capstan" help:"embedded server's store and embedded.creds (local mode's, or a local worker's)"`
	Prefix             string        `env:"CAPSTAN_SUBJECT_PREFIX" envDefault:"capstan" help:"subject prefix"`
	DefaultPersonality string        `env:"CAPSTAN_DEFAULT_PERSONALITY" envDefault:"default" help:"personality put in the subjects of calls that name none (and read by result, cancel and progress without --personality)"`
	Concurrency        int           `env:"CAPSTAN_CONCURRENCY" envDefault:"64" help:"local mode: calls run at once"`
	CallTimeout        time.Duration `env:"CAPSTAN_CALL_TIMEOUT" envDefault:"60s" help:"local mode: default and maximum execution time per call"`
	ShutdownGrace      time.Duration `env:"CAPSTAN_SHUTDOWN_GRACE" envDefault:"30s" help:"local mode: drain time before in-flight calls are cancelled"`
	MaxDeliver         int           `env:"CAPSTAN_MAX_DELIVER" envDefault:"5" help:"local mode: deliveries before a call is abandoned"`
	StreamReplicas     int           `env:"CAPSTAN_STREAM_REPLICAS" envDefault:"1" help:"replicas of the streams and buckets created when none exist yet (1 to 5)"`
	PersonalitiesDir   string        `env:"CAPSTAN_PERSONALITIES_DIR" help:"local mode: personality files loaded at start"`
	MCPServersDir      string        `env:"CAPSTAN_MCP_SERVERS_DIR" help:"local mode: MCP server definitions whose tools the pool hosts (docs/mcp.md)"`
	Tools              []string      `env:"CAPSTAN_TOOLS" help:"local mode: comma-separated tools hosted (default all built-ins)"`
	LogLevel           string        `env:"CAPSTAN_LOG_LEVEL" help:"local mode and mcp: debug, info, warn or error (default warn; info logs every MCP call)"`
	LogFormat          string        `env:"CAPSTAN_LOG_FORMAT" help:"local mode and mcp: text or json (default text on a TTY, else json)"`
	ApproverName       string        `env:"CAPSTAN_APPROVER_NAME" help:"approvals approve and deny: the decider's name recorded with the decision (default: the NATS user, else local)"`
}

// loadConfig reads Config through getenv (an empty value counts as unset)
// and checks it. Every problem is reported in one error, each naming its
// variable.
func loadConfig(getenv func(string) string) (Config, error) {
	var cfg Config
	if err := envconfig.Parse(&cfg, getenv); err != nil {
		var pe *envconfig.Error
		if errors.As(err, &pe) {
			return Config{}, &configError{problems: pe.Problems}
		}
		return Config{}, &configError{problems: []string{err.Error()}}
	}
	if problems := cfg.check(); len(problems) > 0 {
		return Config{}, &configError{problems: problems}
	}
	return cfg, nil
}

// configError lists configuration problems, each "VARIABLE: reason".
type configError struct{ problems []string }

func (e *configError) Error() string {
	return "invalid configuration: " + strings.Join(e.problems, "; ")
}

func (c *Config) check() []string {
	var p []string
	bad := func(name, format string, args ...any) { p = append(p, name+": "+fmt.Sprintf(format, args...)) }
	if !protocol.ValidToken(c.Prefix) {
		bad("CAPSTAN_SUBJECT_PREFIX", "%q must match ^[A-Za-z0-9_-]{1,128}$", c.Prefix)
	}
	if c.InboxPrefix != "" && !protocol.ValidToken(c.InboxPrefix) {
		bad("CAPSTAN_NATS_INBOX_PREFIX", "%q must match ^[A-Za-z0-9_-]{1,128}$", c.InboxPrefix)
	}
	if !protocol.ValidToken(c.DefaultPersonality) {
		bad("CAPSTAN_DEFAULT_PERSONALITY", "%q must match ^[A-Za-z0-9_-]{1,128}$", c.DefaultPersonality)
	}
	if c.Concurrency < 1 {
		bad("CAPSTAN_CONCURRENCY", "must be at least 1, got %d", c.Concurrency)
	}
	if c.StreamReplicas < 1 || c.StreamReplicas > 5 {
		bad("CAPSTAN_STREAM_REPLICAS", "must be 1 to 5, got %d", c.StreamReplicas)
	}
	if c.MaxDeliver < 1 {
		bad("CAPSTAN_MAX_DELIVER", "must be at least 1, got %d", c.MaxDeliver)
	}
	if c.CallTimeout <= 0 {
		bad("CAPSTAN_CALL_TIMEOUT", "must be positive, got %s", c.CallTimeout)
	}
	if c.ShutdownGrace < 0 {
		bad("CAPSTAN_SHUTDOWN_GRACE", "must not be negative, got %s", c.ShutdownGrace)
	}
	tools := c.Tools[:0]
	for _, t := range c.Tools {
		t = strings.TrimSpace(t)
		if !protocol.ValidToken(t) {
			bad("CAPSTAN_TOOLS", "tool name %q must match ^[A-Za-z0-9_-]{1,128}$", t)
			continue
		}
		tools = append(tools, t)
	}
	c.Tools = tools
	if c.LogLevel != "" {
		if _, err := c.slogLevel(); err != nil {
			bad("CAPSTAN_LOG_LEVEL", "%q must be debug, info, warn or error", c.LogLevel)
		}
	}
	if f := strings.ToLower(c.LogFormat); f != "" && f != "text" && f != "json" {
		bad("CAPSTAN_LOG_FORMAT", "%q must be text or json", c.LogFormat)
	}
	return p
}

// slogLevel is CAPSTAN_LOG_LEVEL, warn when unset: the in-process pool must
// not clutter the dispatcher's output.
func (c *Config) slogLevel() (slog.Level, error) {
	if c.LogLevel == "" {
		return slog.LevelWarn, nil
	}
	var l slog.Level
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
		err := l.UnmarshalText([]byte(c.LogLevel))
		return l, err
	}
	return 0, errors.New("unknown level")
}

// configVar describes one variable of Config.
type configVar struct {
	field, name, def, help string
}

// configVars lists Config's variables in declaration order.
func configVars() []configVar {
	t := reflect.TypeFor[Config]()
	out := make([]configVar, 0, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		out = append(out, configVar{field: f.Name, name: name, def: f.Tag.Get("envDefault"), help: f.Tag.Get("help")})
	}
	return out
}
