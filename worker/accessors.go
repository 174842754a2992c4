package worker

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/pipeline"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
	scopedkv "github.com/capstanhq/capstan/internal/scoped/kv"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/scoped/reads"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/tool"
)

// floorPaths are the worker's own files, never reachable by a tool.
func (c Config) floorPaths() []string {
	var out []string
	for _, p := range []string{c.PersonalitiesDir, c.MCPServersDir, c.SecretsFile, c.NATSCreds, c.DataDir} {
		if p == "" {
			continue
		}
		if abs, err := filepath.Abs(p); err == nil {
			out = append(out, abs)
		}
	}
	return out
}

// backends builds what the accessors share, once per worker: the secrets
// backend (nil for none, which fails closed), the binary resolver on
// the trusted PATH, and the file floor.
func (w *Worker) backends() error {
	switch w.cfg.SecretsBackend {
	case SecretsEnv:
		w.secrets = secrets.NewCache(secrets.NewEnv(w.cfg.SecretsEnvPrefix, w.cfg.Getenv), w.cfg.SecretCacheTTL, nil)
	case SecretsFile:
		b, err := secrets.NewFile(w.cfg.SecretsFile)
		if err != nil {
			return &FieldError{Field: "SecretsFile", Err: err}
		}
		w.secrets = secrets.NewCache(b, w.cfg.SecretCacheTTL, nil)
	case SecretsVault:
		vc := w.cfg.Vault
		v, err := secrets.NewVault(secrets.VaultConfig{
			Addr: vc.Addr, Token: vc.Token, RoleID: vc.RoleID, SecretID: vc.SecretID, CACert: vc.CACert,
			Namespace: vc.Namespace, Mount: vc.Mount, Prefix: vc.Prefix, Logger: w.log,
		})
		if err != nil {
			return fmt.Errorf("Config.SecretsBackend %q: %w", SecretsVault, &vaultConfigError{err})
		}
		w.vault = v
		w.secrets = secrets.NewCache(v, w.cfg.SecretCacheTTL, nil)
	}
	w.fsCfg = scopedfs.Config{Home: w.cfg.Home, Floor: w.cfg.floorPaths()}
	if err := w.fsCfg.Validate(); err != nil {
		return err
	}
	network, _ := process.ParseNetworkMode(w.cfg.ProcessNetwork) // checked by validate
	// Children keep to the same floor as the file accessor (security.md
	// section 1).
	floor := scopedfs.NewFloor(w.fsCfg.Home, w.fsCfg.Floor)
	w.procCfg = process.Config{TrustedPATH: process.DefaultTrustedPATH, Logger: w.log, Network: network, Floor: floor}
	if err := w.procCfg.Validate(); err != nil {
		return err
	}
	w.resolver = process.NewResolver(w.procCfg.TrustedPATH)
	for _, h := range w.tools.Order() {
		if h.Capabilities.Process != nil {
			w.resolveNames(h.Capabilities.Process.AllowedBinaries)
		}
	}
	return nil
}

// vaultConfigError names the fields of the secrets package's VaultConfig
// as the fields of Config.Vault they come from.
type vaultConfigError struct{ err error }

func (e *vaultConfigError) Error() string {
	return strings.ReplaceAll(e.err.Error(), "VaultConfig.", "Config.Vault.")
}

func (e *vaultConfigError) Unwrap() error { return e.err }

// preResolve resolves the bare binary names of a personality's process
// ceiling as soon as the worker sees it, so that they are looked up on the
// trusted PATH once, before any call runs them (capabilities.md, "Binaries").
func (w *Worker) preResolve(p *capability.Personality) {
	if p.Process != nil {
		w.resolveNames(p.Process.Allow)
	}
}

// resolveNames resolves every bare name of names on the trusted PATH; the
// resolver keeps each answer (found or not) for the worker's lifetime.
func (w *Worker) resolveNames(names []string) {
	for _, n := range names {
		if n != "*" && !strings.Contains(n, "/") {
			_, _ = w.resolver.Resolve(n)
		}
	}
}

// accessorBackends is what the accessors of every call share: the worker's
// backends, its tracing, and its read-record and storage buckets.
func (w *Worker) accessorBackends() pipeline.Backends {
	return pipeline.Backends{
		Secrets: w.secrets, FS: w.fsCfg, Process: w.procCfg, Resolver: w.resolver,
		Fetch:         fetch.Config{WrapTransport: w.obs.HTTPTransport},
		WrapInjection: w.obs.WrapInjection,
		Reads:         func(session string) tool.ReadRecords { return reads.New(w.kv.reads, session) },
		Storage: func(g *capability.StorageGrant, onDeny func(error)) tool.KV {
			return scopedkv.New(w.kv.storage, g, onDeny)
		},
	}
}
