package worker

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/pipeline"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
	scopedkv "github.com/capstanhq/capstan/internal/scoped/kv"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/scoped/reads"
	scopedsecrets "github.com/capstanhq/capstan/internal/scoped/secrets"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/tool"
)

// denials records the capability denials raised while a call runs, by
// code only (never the detail, which may hold argument values), for the
// audit record.
type denials struct {
	mu    sync.Mutex
	codes []string
	// onAdd, when set, is told every code as it is added (tracing, metrics).
	onAdd func(code string)
}

func (d *denials) add(err error) {
	code, ok := tool.DenialCode(err)
	if !ok {
		return
	}
	d.mu.Lock()
	d.codes = append(d.codes, code)
	d.mu.Unlock()
	if d.onAdd != nil {
		d.onAdd(code)
	}
}

func (d *denials) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.codes)
}

// attach gives the tool exactly the accessors its resolved grant allows
// (pipeline.Attach).
func (w *Worker) attach(tc *tool.Context, g *capability.Grant, rec *denials) {
	pipeline.Attach(tc, g, w.accessorBackends(), rec.add)
}

// accessorBackends is what the accessors of a call share: the worker's
// backends, its tracing, and its read-record and storage buckets.
func (w *Worker) accessorBackends() pipeline.Backends {
	return pipeline.Backends{
		Secrets: w.secrets, FS: w.fsCfg, Process: w.procCfg, Resolver: w.resolver,
		Fetch: fetch.Config{WrapTransport: w.obs.HTTPTransport},
		WrapInjection: func(inj *scopedsecrets.Injection) fetch.Secrets {
			return w.obs.WrapInjection(inj)
		},
		Reads: func(session string) tool.ReadRecords { return reads.New(w.kv.reads, session) },
		Storage: func(g *capability.StorageGrant, onDeny func(error)) tool.KV {
			return scopedkv.New(w.kv.storage, g, onDeny)
		},
	}
}

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

// isInfra reports whether a tool's error is an infrastructure fault that
// must lead to redelivery rather than an answer.
func isInfra(err error) bool { return pipeline.IsInfra(err) }

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
	w.procCfg = process.Config{TrustedPATH: process.DefaultTrustedPATH, Logger: w.log, Network: network}
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

// networkRefused returns the refusal of a call whose process grant
// includes network on a machine that allows no network namespace for its
// children, unless CAPSTAN_PROCESS_NETWORK=unconfined (security.md
// section 1): "" when the call may run.
func (w *Worker) networkRefused(g *capability.Grant) string {
	if g.Process == nil || g.Network.Empty() {
		return ""
	}
	return w.procCfg.NetworkRefused()
}

// missingBackend returns the fail-closed refusal when the tool declares a
// capability whose backend is not configured, naming the backend.
func (w *Worker) missingBackend(t *tool.Tool) string {
	if len(t.Capabilities.Secrets) == 0 || w.secrets != nil {
		return ""
	}
	const sentence = "Tool %s declares capabilities but no capability backends are configured: "
	return fmt.Sprintf(sentence+"secrets backend (CAPSTAN_SECRETS_BACKEND=%s)", t.Name, w.cfg.SecretsBackend)
}

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
