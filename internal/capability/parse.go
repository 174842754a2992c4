package capability

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// docParser walks a decoded personality document and collects every problem.
type docParser struct {
	env      Env
	problems []Problem
}

// addf records a problem "<key>: <message>".
func (d *docParser) addf(key, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if key != "" {
		msg = key + ": " + msg
	}
	d.problems = append(d.problems, Problem{Key: key, Message: msg})
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

func index(key string, i int) string { return fmt.Sprintf("%s[%d]", key, i) }

func (d *docParser) parse(data []byte) *Personality {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		d.addf("", "document is not valid YAML or JSON: %v", err)
		return nil
	}
	if key, dup := duplicateKey(data); dup {
		// YAML tells '0' and 0 apart, JSON does not: which of the two
		// would win depended on map order.
		d.addf("", "document is not valid YAML or JSON: duplicate key %s (keys are compared as text: '0' and 0 are the same key)", key)
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		d.addf("", "document is not valid YAML or JSON: %v", err)
		return nil
	}
	doc, ok := d.object(root, "", "id", "toolset", "mcp_servers", "plugins", "permissions",
		"fs_reach", "safety", "secrets", "process", "scheduling", "approval", "rate_limits", "budget")
	if !ok {
		return nil
	}
	p := &Personality{BudgetChars: DefaultBudgetChars}
	if v, ok := field(doc, "id"); !ok {
		d.addf("id", "is required")
	} else if id, ok := d.str(v, "id"); ok {
		if !ValidID(id) {
			d.addf("id", "%q must match ^[A-Za-z0-9_-]+$ and be at most %d characters", id, MaxIDLen)
		}
		p.ID = id
	}
	p.Toolset = d.names(doc, "toolset")
	p.MCPServers = d.names(doc, "mcp_servers")
	p.Plugins = d.names(doc, "plugins")
	p.Permissions = d.names(doc, "permissions")
	d.fsReach(doc, p)
	d.safety(doc, p)
	p.Secrets, p.SendTo = d.secrets(doc)
	p.Process, p.ProcessLimits = d.process(doc)
	p.Scheduling = d.scheduling(doc)
	p.Approval = d.approval(doc)
	d.rateLimits(doc, p)
	if v, ok := field(doc, "budget"); ok {
		if b, ok := d.object(v, "budget", "result_chars", "blobs"); ok {
			if v, ok := field(b, "result_chars"); ok {
				if n, ok := d.integer(v, "budget.result_chars"); ok {
					p.BudgetChars = n
				}
			}
			if v, ok := field(b, "blobs"); ok {
				allowed, ok := v.(bool)
				if !ok {
					d.addf("budget.blobs", "must be true or false")
				}
				p.ForbidBlobs = ok && !allowed
			}
		}
	}
	return p
}

// field returns the value of key when it is present and not null.
func field(obj map[string]any, key string) (any, bool) {
	v, ok := obj[key]
	return v, ok && v != nil
}

// object checks that v is a mapping and reports its unknown keys, sorted.
func (d *docParser) object(v any, key string, known ...string) (map[string]any, bool) {
	obj, ok := v.(map[string]any)
	if !ok {
		if key == "" {
			d.addf("", "document must be a mapping of keys")
		} else {
			d.addf(key, "must be a mapping")
		}
		return nil, false
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !slices.Contains(known, k) {
			path := join(key, k)
			d.problems = append(d.problems, Problem{Key: path, Message: fmt.Sprintf("unknown key %q", path)})
		}
	}
	return obj, true
}

func (d *docParser) str(v any, key string) (string, bool) {
	s, ok := v.(string)
	if !ok {
		d.addf(key, "%s", notString(v))
	}
	return s, ok
}

// notString is the problem of a value that must be a string: a YAML 1.1
// boolean (yes, no, on, off, true, false) is named with the advice to
// quote it, a number is named.
func notString(v any) string {
	switch v := v.(type) {
	case bool:
		return fmt.Sprintf("must be a string, got the boolean %t: YAML 1.1 reads yes, no, on and off (and true, false) as booleans; "+
			"quote the value (\"yes\") to mean the word", v)
	case json.Number:
		return fmt.Sprintf("must be a string, got the number %s", v)
	}
	return "must be a string"
}

// integer reads a positive integer that fits an int.
func (d *docParser) integer(v any, key string) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		d.addf(key, "must be an integer greater than 0")
		return 0, false
	}
	i, err := n.Int64()
	if err != nil || i <= 0 || int64(int(i)) != i {
		d.addf(key, "must be an integer greater than 0")
		return 0, false
	}
	return int(i), true
}

// strList reads a list of non-empty strings. The result is non-nil for a
// present list, even an empty one.
func (d *docParser) strList(v any, key string) ([]string, bool) {
	items, ok := v.([]any)
	if !ok {
		d.addf(key, "must be a list of strings")
		return nil, false
	}
	out := make([]string, 0, len(items))
	valid := true
	for i, item := range items {
		s, ok := item.(string)
		switch {
		case !ok:
			d.addf(index(key, i), "%s", notString(item))
			valid = false
		case s == "":
			d.addf(index(key, i), "must not be empty")
			valid = false
		default:
			out = append(out, s)
		}
	}
	return out, valid
}

// names reads an optional list of names: nil when absent.
func (d *docParser) names(doc map[string]any, key string) []string {
	v, ok := field(doc, key)
	if !ok {
		return nil
	}
	list, _ := d.strList(v, key)
	if list == nil {
		list = []string{}
	}
	return list
}

// checkedList reads an optional list whose entries check validates, naming
// the index of each bad entry.
func (d *docParser) checkedList(obj map[string]any, key, path string, check func(string) error) []string {
	v, ok := field(obj, key)
	if !ok {
		return nil
	}
	list, _ := d.strList(v, path)
	for i, s := range list {
		if err := check(s); err != nil {
			d.addf(index(path, i), "%v", err)
		}
	}
	return list
}

func (d *docParser) safety(doc map[string]any, p *Personality) {
	v, ok := field(doc, "safety")
	if !ok {
		return
	}
	safety, ok := d.object(v, "safety", "network")
	if !ok {
		return
	}
	v, ok = field(safety, "network")
	if !ok {
		return
	}
	n, ok := d.object(v, "safety.network", "allow", "deny", "allow_private_urls")
	if !ok {
		return
	}
	p.Network.Allow = d.checkedList(n, "allow", "safety.network.allow", checkHostPattern)
	p.Network.Deny = d.checkedList(n, "deny", "safety.network.deny", checkHostPattern)
	if v, ok := field(n, "allow_private_urls"); ok {
		b, ok := v.(bool)
		if !ok {
			d.addf("safety.network.allow_private_urls", "must be true or false")
		}
		p.Network.AllowPrivateURLs = b
	}
}

// secrets reads the optional secrets section: {allow?: [...], send_to?:
// {pattern: [host...]}}. allow is the ceiling (absent: none); a section
// with neither key is refused, as for process.
func (d *docParser) secrets(doc map[string]any) (*Ceiling, map[string][]string) {
	v, ok := field(doc, "secrets")
	if !ok {
		return nil, nil
	}
	obj, ok := d.object(v, "secrets", "allow", "send_to")
	if !ok {
		return nil, nil
	}
	var sendTo map[string][]string
	if sv, ok := field(obj, "send_to"); ok {
		sendTo = d.sendTo(sv)
		if _, ok := field(obj, "allow"); !ok {
			return nil, sendTo
		}
	}
	return d.allowList(obj, "secrets", ValidateRefPattern), sendTo
}

// sendTo reads secrets.send_to: a mapping from a secret pattern (the syntax
// of secrets.allow) to a list of host patterns (the syntax of
// safety.network.allow). Entries with a problem are left out.
func (d *docParser) sendTo(v any) map[string][]string {
	obj, ok := v.(map[string]any)
	if !ok {
		d.addf("secrets.send_to", "must be a mapping of secret patterns to lists of host patterns")
		return nil
	}
	out := make(map[string][]string, len(obj))
	for _, ref := range slices.Sorted(maps.Keys(obj)) {
		key := join("secrets.send_to", ref)
		before := len(d.problems)
		if err := ValidateRefPattern(ref); err != nil {
			d.addf(key, "%v", err)
		}
		hosts := d.checkedList(obj, ref, key, checkHostPattern)
		if len(d.problems) == before && hosts != nil {
			out[ref] = hosts
		}
	}
	return out
}

func checkHostPattern(s string) error { _, err := ParseHostPattern(s); return err }

// allowList reads the required allow list of the ceiling section obj.
func (d *docParser) allowList(obj map[string]any, key string, check func(string) error) *Ceiling {
	if _, ok := field(obj, "allow"); !ok {
		d.addf(join(key, "allow"), "is required (use [] to allow nothing)")
	}
	list := d.checkedList(obj, "allow", join(key, "allow"), check)
	if list == nil {
		list = []string{}
	}
	return &Ceiling{Allow: list}
}

// process reads the optional process section: {allow?: [...], limits?:
// {...}}. allow is the ceiling (absent: none); a section with neither key
// is refused, as for secrets.
func (d *docParser) process(doc map[string]any) (*Ceiling, ProcessLimits) {
	limits := DefaultProcessLimits()
	v, ok := field(doc, "process")
	if !ok {
		return nil, limits
	}
	obj, ok := d.object(v, "process", "allow", "limits")
	if !ok {
		return nil, limits
	}
	if lv, ok := field(obj, "limits"); ok {
		limits = d.processLimits(lv)
		if _, ok := field(obj, "allow"); !ok {
			return nil, limits
		}
	}
	return d.allowList(obj, "process", validateBinaryEntry), limits
}

func (d *docParser) rateLimits(doc map[string]any, p *Personality) {
	v, ok := field(doc, "rate_limits")
	if !ok {
		return
	}
	obj, ok := v.(map[string]any)
	if !ok {
		d.addf("rate_limits", "must be a mapping of tool names")
		return
	}
	p.RateLimits = make(map[string]RateLimit, len(obj))
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		key := join("rate_limits", name)
		entry, ok := d.object(obj[name], key, "requests", "window")
		if !ok {
			continue
		}
		var rl RateLimit
		valid := name != ""
		if !valid {
			d.addf("rate_limits", "tool name must not be empty")
		}
		if v, ok := field(entry, "requests"); !ok {
			d.addf(join(key, "requests"), "is required")
			valid = false
		} else if rl.Requests, ok = d.integer(v, join(key, "requests")); !ok {
			valid = false
		}
		if v, ok := field(entry, "window"); !ok {
			d.addf(join(key, "window"), "is required")
			valid = false
		} else if rl.WindowText, ok = d.str(v, join(key, "window")); !ok {
			valid = false
		} else if w, err := ParseWindow(rl.WindowText); err != nil {
			d.addf(join(key, "window"), "%v", err)
			valid = false
		} else {
			rl.Window = w
		}
		if valid {
			p.RateLimits[name] = rl
		}
	}
}

// fsReach reads fs_reach, substituting ${HOME} and ${PERSONALITY} in workdir
// and all three variables in read and write.
func (d *docParser) fsReach(doc map[string]any, p *Personality) {
	v, ok := field(doc, "fs_reach")
	if !ok {
		return
	}
	fs, ok := d.object(v, "fs_reach", "workdir", "read", "write")
	if !ok {
		return
	}
	vars := map[string]string{"HOME": d.env.Home, "PERSONALITY": ""}
	if ValidID(p.ID) {
		vars["PERSONALITY"] = p.ID
	}
	if v, ok := field(fs, "workdir"); ok {
		if s, ok := d.str(v, "fs_reach.workdir"); ok {
			p.FSReach.Workdir = d.path(s, "fs_reach.workdir", vars)
		}
	}
	vars["WORKDIR"] = p.FSReach.Workdir
	for _, dir := range []struct {
		key string
		dst *[]string
	}{{"read", &p.FSReach.Read}, {"write", &p.FSReach.Write}} {
		v, ok := field(fs, dir.key)
		if !ok {
			continue
		}
		key := join("fs_reach", dir.key)
		list, _ := d.strList(v, key)
		out := make([]string, 0, len(list))
		for i, s := range list {
			if abs := d.path(s, index(key, i), vars); abs != "" {
				out = append(out, abs)
			}
		}
		*dir.dst = out
	}
}

// path substitutes vars in s and returns the cleaned absolute result, or ""
// after recording a problem.
func (d *docParser) path(s, key string, vars map[string]string) string {
	var b strings.Builder
	ok := true
	for rest := s; rest != ""; {
		i := strings.Index(rest, "${")
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			d.addf(key, "unterminated substitution in %q", s)
			return ""
		}
		name := rest[i+2 : i+end]
		rest = rest[i+end+1:]
		value, known := vars[name]
		switch {
		case !known && name == "WORKDIR":
			d.addf(key, "${WORKDIR} cannot be used in fs_reach.workdir")
			ok = false
		case !known:
			d.addf(key, "unknown substitution ${%s}", name)
			ok = false
		case value == "":
			d.addf(key, "substitution ${%s} is empty (%s)", name, emptyReason[name])
			ok = false
		}
		b.WriteString(value)
	}
	if !ok {
		return ""
	}
	out := b.String()
	if strings.ContainsRune(out, 0) {
		d.addf(key, "path must not contain a NUL byte")
		return ""
	}
	if !filepath.IsAbs(out) {
		d.addf(key, "path %q must be absolute", out)
		return ""
	}
	return filepath.Clean(out)
}

var emptyReason = map[string]string{
	"HOME":        "the worker has no home directory",
	"PERSONALITY": "id is missing or invalid",
	"WORKDIR":     "fs_reach.workdir is missing or invalid",
}

// duplicateKey reports a mapping of the YAML document data with two keys
// of the same text (the string '0' and the number 0), naming the first
// such key path in sorted order. YAML keeps them apart; the JSON every
// document becomes cannot.
func duplicateKey(data []byte) (string, bool) {
	var root any
	if yamlv2.Unmarshal(data, &root) != nil {
		return "", false // YAMLToJSONStrict has said what is wrong
	}
	var dups []string
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch v := v.(type) {
		case map[any]any:
			seen := make(map[string]bool, len(v))
			for k, child := range v {
				name := fmt.Sprint(k)
				if seen[name] {
					dups = append(dups, strconv.Quote(join(path, name)))
				}
				seen[name] = true
				walk(child, join(path, name))
			}
		case []any:
			for i, child := range v {
				walk(child, index(path, i))
			}
		}
	}
	walk(root, "")
	if len(dups) == 0 {
		return "", false
	}
	slices.Sort(dups)
	return dups[0], true
}
