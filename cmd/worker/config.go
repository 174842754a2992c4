package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/worker"
)

// Config is the worker binary's configuration, from the environment
// (docs/operations.md lists every variable).
type Config struct {
	NATSURL            string        `env:"CAPSTAN_NATS_URL"`
	NATSCreds          string        `env:"CAPSTAN_NATS_CREDS"`
	DataDir            string        `env:"CAPSTAN_DATA_DIR" envDefault:"./.capstan"`
	Prefix             string        `env:"CAPSTAN_SUBJECT_PREFIX" envDefault:"capstan"`
	PersonalitiesDir   string        `env:"CAPSTAN_PERSONALITIES_DIR"`
	DefaultPersonality string        `env:"CAPSTAN_DEFAULT_PERSONALITY" envDefault:"default"`
	WorkerID           string        `env:"CAPSTAN_WORKER_ID"`
	Concurrency        int           `env:"CAPSTAN_CONCURRENCY" envDefault:"64"`
	Pool               string        `env:"CAPSTAN_POOL" envDefault:"default"`
	Tools              []string      `env:"CAPSTAN_TOOLS" envSeparator:","`
	MaxDeliver         int           `env:"CAPSTAN_MAX_DELIVER" envDefault:"5"`
	CallTimeout        time.Duration `env:"CAPSTAN_CALL_TIMEOUT" envDefault:"60s"`
	ShutdownGrace      time.Duration `env:"CAPSTAN_SHUTDOWN_GRACE" envDefault:"30s"`
	SecretsBackend     string        `env:"CAPSTAN_SECRETS_BACKEND" envDefault:"env"`
	SecretsFile        string        `env:"CAPSTAN_SECRETS_FILE"`
	SecretsEnvPrefix   string        `env:"CAPSTAN_SECRETS_ENV_PREFIX" envDefault:"CAPSTAN_SECRET_"`
	HTTPAddr           string        `env:"CAPSTAN_HTTP_ADDR" envDefault:"127.0.0.1:9464"`
	LogLevel           string        `env:"CAPSTAN_LOG_LEVEL" envDefault:"info"`
	LogFormat          string        `env:"CAPSTAN_LOG_FORMAT"`
}

// validate rejects values that the worker package would read as "use the
// default" (zero), so an explicit CAPSTAN_CONCURRENCY=0 is an error, not 64.
func (c Config) validate() error {
	var errs []error
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("CAPSTAN_CONCURRENCY must be at least 1, got %d", c.Concurrency))
	}
	if c.MaxDeliver < 1 {
		errs = append(errs, fmt.Errorf("CAPSTAN_MAX_DELIVER must be at least 1, got %d", c.MaxDeliver))
	}
	if c.CallTimeout <= 0 {
		errs = append(errs, fmt.Errorf("CAPSTAN_CALL_TIMEOUT must be positive, got %s", c.CallTimeout))
	}
	if c.ShutdownGrace < 0 {
		errs = append(errs, fmt.Errorf("CAPSTAN_SHUTDOWN_GRACE must not be negative, got %s", c.ShutdownGrace))
	}
	for name, v := range map[string]string{"CAPSTAN_DATA_DIR": c.DataDir, "CAPSTAN_SUBJECT_PREFIX": c.Prefix, "CAPSTAN_POOL": c.Pool, "CAPSTAN_DEFAULT_PERSONALITY": c.DefaultPersonality, "CAPSTAN_SECRETS_BACKEND": c.SecretsBackend} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s must not be empty", name))
		}
	}
	return errors.Join(errs...)
}

func (c Config) worker() worker.Config {
	tools := make([]string, 0, len(c.Tools))
	for _, t := range c.Tools {
		if t != "" {
			tools = append(tools, t)
		}
	}
	return worker.Config{
		NATSURL: c.NATSURL, NATSCreds: c.NATSCreds, DataDir: c.DataDir, Prefix: c.Prefix,
		PersonalitiesDir: c.PersonalitiesDir, DefaultPersonality: c.DefaultPersonality, WorkerID: c.WorkerID,
		Concurrency: c.Concurrency, Pool: c.Pool, Tools: tools, MaxDeliver: c.MaxDeliver,
		CallTimeout: c.CallTimeout, ShutdownGrace: max(c.ShutdownGrace, time.Millisecond), SecretsBackend: c.SecretsBackend,
		SecretsFile: c.SecretsFile, SecretsEnvPrefix: c.SecretsEnvPrefix,
	}
}
