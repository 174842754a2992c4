package mcphost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
	"github.com/capstanhq/capstan/tool"
	"sigs.k8s.io/yaml"
)

// Definition is one hosted MCP server, read from a file of
// CAPSTAN_MCP_SERVERS_DIR (docs/mcp.md). Exactly one of Command and URL is
// set. It is immutable once parsed.
type Definition struct {
	// Name is the <server> of mcp__<server>__<tool>: ^[A-Za-z0-9-]+$.
	Name string
	// File is the file the definition was read from, for messages.
	File string
	// Command is a stdio server's argv, run without a shell.
	Command []string
	// URL is a streamable HTTP server's endpoint.
	URL string
	// Env holds plain variables added to a stdio server's clean environment.
	Env map[string]string
	// SecretEnv maps a stdio server's variable to the secret ref its value
	// is resolved from.
	SecretEnv map[string]string
	// SecretHeaders maps an HTTP header of a url server to a template whose
	// {{ref}} placeholders are resolved from secret refs.
	SecretHeaders map[string]string
	// Network lists the host patterns the server may reach.
	Network []string
	// Read and Write are the paths a stdio server may read and write.
	Read, Write []string
	// Process lists the binaries a stdio server may start (besides
	// Command[0], which is always allowed).
	Process []string
	// Secrets lists the secret ref patterns the server's secret_env and
	// secret_headers may use.
	Secrets []string
	// Untrusted marks the results of the server's tools as untrusted
	// output (default true).
	Untrusted bool
	// ProgressAudience is the audience of the server's progress
	// notifications (default user).
	ProgressAudience tool.Audience
	// Timeout bounds one call of the server's tools (default and maximum:
	// the worker's call timeout).
	Timeout time.Duration
}

// Stdio reports whether the server is started as a child process (Command)
// rather than reached over streamable HTTP (URL).
func (d *Definition) Stdio() bool { return len(d.Command) > 0 }

// Capabilities returns the server's declaration as a tool declaration: the
// capabilities every one of its tools is hosted with, checked against a
// personality like any tool's. A stdio server's process list holds its
// command's binary first, and its secrets_raw the refs of secret_env.
func (d *Definition) Capabilities() tool.Capabilities {
	var c tool.Capabilities
	if len(d.Network) > 0 {
		c.Network = &tool.Network{AllowedHosts: slices.Clone(d.Network)}
	}
	if len(d.Read) > 0 || len(d.Write) > 0 {
		c.FSReach = &tool.FSReach{}
		if len(d.Read) > 0 {
			c.FSReach.Read = tool.Paths(d.Read...)
		}
		if len(d.Write) > 0 {
			c.FSReach.Write = tool.Paths(d.Write...)
		}
	}
	if d.Stdio() {
		bins := []string{d.Command[0]}
		for _, b := range d.Process {
			if !slices.Contains(bins, b) {
				bins = append(bins, b)
			}
		}
		c.Process = &tool.Process{AllowedBinaries: bins}
	}
	c.Secrets = slices.Clone(d.Secrets)
	// A stdio server gets secret_env values in its environment: raw values,
	// not injected at egress, so they are declared as such (security.md
	// section 4) and dispatcher explain lists them under raw secrets.
	for _, ref := range d.SecretEnv {
		if !slices.Contains(c.SecretsRaw, ref) {
			c.SecretsRaw = append(c.SecretsRaw, ref)
		}
	}
	slices.Sort(c.SecretsRaw)
	return c
}

// secretRefs returns every secret ref the definition resolves (secret_env
// values and the placeholders of secret_headers), sorted and unique.
func (d *Definition) secretRefs() []string {
	var refs []string
	for _, ref := range d.SecretEnv {
		refs = append(refs, ref)
	}
	refs = append(refs, d.headerRefs()...)
	slices.Sort(refs)
	return slices.Compact(refs)
}

var serverNameRE = regexp.MustCompile(`^[A-Za-z0-9-]+$`)

// MaxNameLen is the longest server name: with "mcp__", "__" and a tool name
// a hosted tool's name must stay within 128 characters.
const MaxNameLen = 64

// Problem is one reason a definition is invalid; its message names the key.
type Problem struct {
	Key     string
	Message string
}

// parser walks one decoded definition and collects every problem.
type parser struct {
	maxTimeout time.Duration
	problems   []Problem
}

func (p *parser) addf(key, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if key != "" {
		msg = key + ": " + msg
	}
	p.problems = append(p.problems, Problem{Key: key, Message: msg})
}

// Parse reads one definition (YAML or JSON), strictly: an unknown key, a
// value of the wrong type, and every rule of docs/mcp.md broken is a
// problem. maxTimeout is the worker's call timeout: the default and the
// largest allowed timeout. On any problem it returns nil and all of them,
// in document order.
func Parse(data []byte, maxTimeout time.Duration) (*Definition, []Problem) {
	p := &parser{maxTimeout: maxTimeout}
	d := p.parse(data)
	if len(p.problems) > 0 {
		return nil, p.problems
	}
	return d, nil
}

// The keys of a definition, in the order of docs/mcp.md.
var definitionKeys = []string{"name", "command", "url", "env", "secret_env", "secret_headers", "capabilities",
	"untrusted", "progress_audience", "timeout"}

func (p *parser) parse(data []byte) *Definition {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		p.addf("", "not valid YAML or JSON: %v", err)
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		p.addf("", "not valid YAML or JSON: %v", err)
		return nil
	}
	doc, ok := p.object(root, "", definitionKeys...)
	if !ok {
		return nil
	}
	d := &Definition{Untrusted: true, ProgressAudience: tool.AudienceUser, Timeout: p.maxTimeout}
	if v, ok := field(doc, "name"); !ok {
		p.addf("name", "is required")
	} else if s, ok := p.str(v, "name"); ok {
		switch {
		case !serverNameRE.MatchString(s):
			p.addf("name", "%q must match ^[A-Za-z0-9-]+$", s)
		case len(s) > MaxNameLen:
			p.addf("name", "%q is longer than %d characters", s, MaxNameLen)
		}
		d.Name = s
	}
	p.transport(doc, d)
	p.capabilities(doc, d)
	p.envs(doc, d)
	if v, ok := field(doc, "untrusted"); ok {
		if b, ok := v.(bool); ok {
			d.Untrusted = b
		} else {
			p.addf("untrusted", "must be true or false")
		}
	}
	if v, ok := field(doc, "progress_audience"); ok {
		if s, ok := p.str(v, "progress_audience"); ok {
			switch a := tool.Audience(s); a {
			case tool.AudienceUser, tool.AudienceInternal, tool.AudienceDashboard:
				d.ProgressAudience = a
			default:
				p.addf("progress_audience", "%q must be user, internal or dashboard", s)
			}
		}
	}
	if v, ok := field(doc, "timeout"); ok {
		if s, ok := p.str(v, "timeout"); ok {
			t, err := time.ParseDuration(s)
			switch {
			case err != nil:
				p.addf("timeout", "%q is not a duration such as 30s or 2m", s)
			case t <= 0:
				p.addf("timeout", "must be positive, got %s", s)
			case t > p.maxTimeout:
				p.addf("timeout", "%s must be at most CAPSTAN_CALL_TIMEOUT (%s)", s, p.maxTimeout)
			default:
				d.Timeout = t
			}
		}
	}
	return d
}

// transport reads command and url: exactly one of them.
func (p *parser) transport(doc map[string]any, d *Definition) {
	cv, hasCommand := field(doc, "command")
	uv, hasURL := field(doc, "url")
	switch {
	case hasCommand && hasURL:
		p.addf("", "command and url are exclusive: a server is either started (command) or reached (url)")
	case !hasCommand && !hasURL:
		p.addf("", "one of command (a stdio server) or url (a streamable HTTP server) is required")
	}
	if hasCommand {
		argv, ok := p.strList(cv, "command")
		switch {
		case ok && len(argv) == 0:
			p.addf("command", "must name the server's binary and its arguments")
		case ok:
			bin := argv[0]
			if strings.ContainsRune(bin, '/') && !filepath.IsAbs(bin) {
				p.addf("command[0]", "%q must be a bare name (found on the worker's trusted PATH) or an absolute path", bin)
			}
			for i, a := range argv {
				if strings.ContainsRune(a, 0) {
					p.addf(index("command", i), "must not contain a NUL byte")
				}
			}
			d.Command = argv
		}
	}
	if hasURL {
		if s, ok := p.str(uv, "url"); ok {
			if _, _, _, err := capability.CheckURL(s); err != nil {
				p.addf("url", "%q: %s", s, strings.TrimPrefix(err.Error(), tool.ErrHostNotAllowed.Error()+": "))
			} else {
				d.URL = s
			}
		}
	}
}

// capabilities reads the declaration and checks it against the transport.
func (p *parser) capabilities(doc map[string]any, d *Definition) {
	v, ok := field(doc, "capabilities")
	if ok {
		c, ok := p.object(v, "capabilities", "network", "fs_reach", "process", "secrets")
		if ok {
			p.capabilitySections(c, d)
		}
	}
	if d.URL != "" {
		if len(d.Read) > 0 || len(d.Write) > 0 {
			p.addf("capabilities.fs_reach", "a url server runs elsewhere: it has no filesystem reach on this machine")
		}
		if len(d.Process) > 0 {
			p.addf("capabilities.process", "a url server runs elsewhere: it starts no process on this machine")
		}
		scheme, host, port, _ := capability.CheckURL(d.URL)
		g, err := capability.NewNetworkGrant(d.Network, capability.NetworkPolicy{Allow: d.Network})
		if err == nil && g.Check(scheme, host, port) != nil {
			p.addf("url", "the host of %q is not covered by capabilities.network (declare it there)", d.URL)
		}
	}
}

func (p *parser) capabilitySections(c map[string]any, d *Definition) {
	if v, ok := field(c, "network"); ok {
		list, _ := p.strList(v, "capabilities.network")
		for i, h := range list {
			if h == "*" {
				continue
			}
			if _, err := capability.ParseHostPattern(h); err != nil {
				p.addf(index("capabilities.network", i), "%v", err)
			}
		}
		d.Network = list
	}
	if v, ok := field(c, "fs_reach"); ok {
		if fs, ok := p.object(v, "capabilities.fs_reach", "read", "write"); ok {
			d.Read = p.paths(fs, "read")
			d.Write = p.paths(fs, "write")
		}
	}
	if v, ok := field(c, "process"); ok {
		list, _ := p.strList(v, "capabilities.process")
		for i, b := range list {
			if strings.ContainsAny(b, "\x00\n\r") {
				p.addf(index("capabilities.process", i), "binary %q contains a control character", b)
			}
		}
		d.Process = list
	}
	if v, ok := field(c, "secrets"); ok {
		list, _ := p.strList(v, "capabilities.secrets")
		for i, s := range list {
			if err := capability.ValidateRefPattern(s); err != nil {
				p.addf(index("capabilities.secrets", i), "%v", err)
			}
		}
		d.Secrets = list
	}
}

// paths reads fs_reach.read or .write: absolute paths, cleaned.
func (p *parser) paths(fs map[string]any, dir string) []string {
	key := "capabilities.fs_reach." + dir
	v, ok := field(fs, dir)
	if !ok {
		return nil
	}
	if s, isStr := v.(string); isStr && s == "from-personality" {
		p.addf(key, "must be a list of absolute paths: a hosted server is shared by every personality, so it cannot take one's list")
		return nil
	}
	list, _ := p.strList(v, key)
	out := make([]string, 0, len(list))
	for i, s := range list {
		if !filepath.IsAbs(s) || strings.ContainsRune(s, 0) {
			p.addf(index(key, i), "path %q must be absolute", s)
			continue
		}
		out = append(out, filepath.Clean(s))
	}
	return out
}

// reservedHeaders are set by the streamable HTTP transport itself.
var reservedHeaders = []string{"Accept", "Connection", "Content-Length", "Content-Type", "Host", "Last-Event-Id",
	"Mcp-Protocol-Version", "Mcp-Session-Id", "Transfer-Encoding"}

// envs reads env, secret_env and secret_headers.
func (p *parser) envs(doc map[string]any, d *Definition) {
	d.Env = p.strMap(doc, "env")
	d.SecretEnv = p.strMap(doc, "secret_env")
	d.SecretHeaders = p.strMap(doc, "secret_headers")
	if d.URL != "" {
		if d.Env != nil {
			p.addf("env", "only a stdio server (command) has an environment")
		}
		if d.SecretEnv != nil {
			p.addf("secret_env", "only a stdio server (command) has an environment; a url server takes secret_headers")
		}
	}
	if len(d.Command) > 0 && d.SecretHeaders != nil {
		p.addf("secret_headers", "only a url server is sent headers; a stdio server takes secret_env")
	}
	for _, env := range []struct {
		key string
		m   map[string]string
	}{{"env", d.Env}, {"secret_env", d.SecretEnv}} {
		for _, name := range slices.Sorted(maps.Keys(env.m)) {
			key := env.key + "." + name
			upper := strings.ToUpper(name)
			switch {
			case name == "" || strings.ContainsAny(name, "=\x00"):
				p.addf(env.key, "invalid variable name %q", name)
			case strings.HasPrefix(upper, "LD_") || strings.HasPrefix(upper, "DYLD_"):
				p.addf(key, "%s may not be set for a child process", name)
			case strings.ContainsRune(env.m[name], 0):
				p.addf(key, "must not contain a NUL byte")
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.SecretEnv)) {
		if _, dup := d.Env[name]; dup {
			p.addf("secret_env."+name, "is also set in env")
		}
		p.ref(d, "secret_env."+name, d.SecretEnv[name])
	}
	for _, name := range slices.Sorted(maps.Keys(d.SecretHeaders)) {
		if len(d.Command) > 0 {
			break // refused as a whole above
		}
		key := "secret_headers." + name
		if !validHeaderName(name) {
			p.addf("secret_headers", "invalid header name %q", name)
			continue
		}
		if slices.Contains(reservedHeaders, http.CanonicalHeaderKey(name)) {
			p.addf(key, "is set by the MCP transport and cannot be configured")
			continue
		}
		// The fetch accessor's check of an operator's secret header (it
		// injects them): a header the HTTP transport sets itself, a
		// template that does not parse or an invalid ref is refused here.
		if err := fetch.ValidateSecretHeader(name, d.SecretHeaders[name]); err != nil {
			p.addf(key, "%v", err)
			continue
		}
		t, _ := capability.ParseSecretTemplate(d.SecretHeaders[name])
		for _, ref := range t.Refs() {
			p.ref(d, key, ref)
		}
	}
}

// ref checks one secret ref used by key: valid, and declared.
func (p *parser) ref(d *Definition, key, ref string) {
	switch {
	case !capability.ValidRef(ref):
		p.addf(key, "invalid secret ref %q", ref)
	case !slices.ContainsFunc(d.Secrets, func(pat string) bool { return capability.RefMatch(pat, ref) }):
		p.addf(key, "secret ref %q is not covered by capabilities.secrets (declare it there)", ref)
	}
}

func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

// object checks that v is a mapping and reports its unknown keys, sorted.
func (p *parser) object(v any, key string, known ...string) (map[string]any, bool) {
	obj, ok := v.(map[string]any)
	if !ok {
		if key == "" {
			p.addf("", "a definition must be a mapping of keys")
		} else {
			p.addf(key, "must be a mapping")
		}
		return nil, false
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !slices.Contains(known, k) {
			path := join(key, k)
			p.problems = append(p.problems, Problem{Key: path, Message: fmt.Sprintf("unknown key %q", path)})
		}
	}
	return obj, true
}

func (p *parser) str(v any, key string) (string, bool) {
	s, ok := v.(string)
	if !ok {
		p.addf(key, "must be a string")
	}
	return s, ok
}

// strList reads a list of non-empty strings.
func (p *parser) strList(v any, key string) ([]string, bool) {
	items, ok := v.([]any)
	if !ok {
		p.addf(key, "must be a list of strings")
		return nil, false
	}
	out := make([]string, 0, len(items))
	valid := true
	for i, item := range items {
		s, ok := item.(string)
		switch {
		case !ok:
			p.addf(index(key, i), "must be a string")
			valid = false
		case s == "":
			p.addf(index(key, i), "must not be empty")
			valid = false
		default:
			out = append(out, s)
		}
	}
	return out, valid
}

// strMap reads an optional mapping of strings: nil when absent.
func (p *parser) strMap(doc map[string]any, key string) map[string]string {
	v, ok := field(doc, key)
	if !ok {
		return nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		p.addf(key, "must be a mapping of names to strings")
		return nil
	}
	out := make(map[string]string, len(obj))
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		s, ok := obj[k].(string)
		if !ok {
			p.addf(join(key, k), "must be a string")
			continue
		}
		out[k] = s
	}
	return out
}

// field returns the value of key when it is present and not null.
func field(obj map[string]any, key string) (any, bool) {
	v, ok := obj[key]
	return v, ok && v != nil
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

func index(key string, i int) string { return fmt.Sprintf("%s[%d]", key, i) }
