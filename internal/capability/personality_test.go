package capability

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const fullDoc = `
id: researcher                      # [A-Za-z0-9_-]+
toolset: [read_file, fetch_url]
mcp_servers: [github]
plugins: []
permissions: ["weather:read"]
fs_reach:
  workdir: ${HOME}/agents/${PERSONALITY}
  read: ["${WORKDIR}", /srv/shared/, "${HOME}/notes/../docs"]
  write: ["${WORKDIR}/out"]
safety:
  network:
    allow: ["*.github.com", "api.openai.com"]
    deny: ["gist.github.com"]
    allow_private_urls: false
secrets: {allow: ["providers/github/*"]}
process: {allow: [git, ls], limits: {memory: 512MiB, pids: 128, cpu: 1.5, tmp: 64MiB}}
scheduling: {priority: 2, weight: 5, max_concurrency: 8}
approval:
  require: [{tool: http_request, when: {method: [POST, DELETE]}}, {tool: "mcp__github__*"}]
  timeout: 30m
  approvers: [oncall]
rate_limits:
  fetch_url: {requests: 100, window: 1h}
  terminal: {requests: 5, window: 7d}
budget: {result_chars: 40000}
`

func TestParseFullDocument(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(fullDoc), Env{Home: "/home/w"})
	require.NoError(t, err)
	require.Equal(t, &Personality{
		ID:          "researcher",
		Toolset:     []string{"read_file", "fetch_url"},
		MCPServers:  []string{"github"},
		Plugins:     []string{},
		Permissions: []string{"weather:read"},
		FSReach: FSReach{
			Workdir: "/home/w/agents/researcher",
			Read:    []string{"/home/w/agents/researcher", "/srv/shared", "/home/w/docs"},
			Write:   []string{"/home/w/agents/researcher/out"},
		},
		Network:       NetworkPolicy{Allow: []string{"*.github.com", "api.openai.com"}, Deny: []string{"gist.github.com"}},
		Secrets:       &Ceiling{Allow: []string{"providers/github/*"}},
		Process:       &Ceiling{Allow: []string{"git", "ls"}},
		ProcessLimits: ProcessLimits{MemoryBytes: 512 << 20, MemoryText: "512MiB", Pids: 128, CPU: 1.5, TmpBytes: 64 << 20, TmpText: "64MiB"},
		Scheduling:    Scheduling{Priority: 2, Weight: 5, MaxConcurrency: 8},
		Approval: &Approval{
			Require:   []ApprovalRule{{Tool: "http_request", When: map[string][]any{"method": {"POST", "DELETE"}}}, {Tool: "mcp__github__*"}},
			Timeout:   30 * time.Minute,
			Approvers: []string{"oncall"},
		},
		RateLimits: map[string]RateLimit{
			"fetch_url": {Requests: 100, Window: time.Hour, WindowText: "1h"},
			"terminal":  {Requests: 5, Window: 7 * 24 * time.Hour, WindowText: "7d"},
		},
		BudgetChars: 40000,
	}, p)
}

func TestParseSecretsSendTo(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(`
id: a
secrets:
  allow: ["providers/github/*", "http/*"]
  send_to:
    "providers/github/*": [api.github.com, "*.githubusercontent.com"]
    "http/openai": [api.openai.com]
    "http/none": []
    "http/null": null
`), Env{})
	require.NoError(t, err)
	require.Equal(t, &Ceiling{Allow: []string{"providers/github/*", "http/*"}}, p.Secrets)
	require.Equal(t, map[string][]string{
		"providers/github/*": {"api.github.com", "*.githubusercontent.com"},
		"http/openai":        {"api.openai.com"},
		"http/none":          {},
	}, p.SendTo, "a null host list is absent, like every null key")
	d, err := NewSecretDestinations(p.SendTo)
	require.NoError(t, err)
	require.True(t, d.Allows("providers/github/token", endpoint(t, "https", "api.github.com", 0)))

	// send_to alone: no ceiling, the declarations stand.
	p, err = Parse([]byte("id: a\nsecrets: {send_to: {'*': ['127.0.0.1:*']}}"), Env{})
	require.NoError(t, err)
	require.Nil(t, p.Secrets)
	require.Equal(t, map[string][]string{"*": {"127.0.0.1:*"}}, p.SendTo)

	// No send_to: nothing is sent anywhere.
	p, err = Parse([]byte("id: a\nsecrets: {allow: ['*']}"), Env{})
	require.NoError(t, err)
	require.Nil(t, p.SendTo)
}

func TestParseMinimalAndJSON(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(`id: min`), Env{})
	require.NoError(t, err)
	require.Equal(t, &Personality{ID: "min", BudgetChars: 80000, ProcessLimits: DefaultProcessLimits(), Scheduling: DefaultScheduling()}, p)
	require.Nil(t, p.Toolset, "absent toolset is nil")

	p, err = Parse([]byte(`{"id":"j","toolset":[],"safety":{"network":{"allow":["*"],"allow_private_urls":true}},"process":{"allow":[]},"mcp_servers":null}`), Env{})
	require.NoError(t, err)
	require.NotNil(t, p.Toolset)
	require.Empty(t, p.Toolset)
	require.Nil(t, p.MCPServers, "null is absent")
	require.True(t, p.Network.AllowPrivateURLs)
	require.Equal(t, &Ceiling{Allow: []string{}}, p.Process)
}

func TestParseBlobs(t *testing.T) {
	t.Parallel()
	for doc, forbid := range map[string]bool{
		"id: a\n":                                        false,
		"id: a\nbudget: {blobs: true}":                   false,
		"id: a\nbudget: {blobs: null}":                   false,
		"id: a\nbudget: {blobs: false}":                  true,
		"id: a\nbudget: {result_chars: 9, blobs: false}": true,
	} {
		p, err := Parse([]byte(doc), Env{})
		require.NoError(t, err, doc)
		require.Equal(t, forbid, p.ForbidBlobs, doc)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		env  Env
		want []string
	}{
		{name: "unknown top-level key", doc: "id: a\ntoolsets: []", want: []string{`unknown key "toolsets"`}},
		{name: "unknown nested key", doc: "id: a\nsafety: {network: {alow: []}}", want: []string{`unknown key "safety.network.alow"`}},
		{name: "unknown keys sorted", doc: "id: a\nzz: 1\naa: 2\nbudget: {chars: 1}",
			want: []string{`unknown key "aa"`, `unknown key "zz"`, `unknown key "budget.chars"`}},
		{name: "id missing", doc: "toolset: []", want: []string{"id: is required"}},
		{name: "id invalid", doc: "id: a.b", want: []string{`id: "a.b" must match ^[A-Za-z0-9_-]+$ and be at most 128 characters`}},
		{name: "id too long", doc: "id: " + string(make129()), want: []string{"id: \"" + string(make129()) + "\" must match ^[A-Za-z0-9_-]+$ and be at most 128 characters"}},
		{name: "id not a string", doc: "id: [a]", want: []string{"id: must be a string"}},
		{name: "not a mapping", doc: "- a\n- b", want: []string{"document must be a mapping of keys"}},
		{name: "empty document", doc: "", want: []string{"document must be a mapping of keys"}},
		{name: "toolset not a list", doc: "id: a\ntoolset: read_file", want: []string{"toolset: must be a list of strings"}},
		{name: "toolset bad entries", doc: "id: a\ntoolset: [a, 1, '']", want: []string{`toolset[1]: must be a string, got the number 1`, "toolset[2]: must not be empty"}},
		{name: "YAML 1.1 yes is a boolean", doc: "id: a\nprocess: {allow: [git, yes]}", want: []string{`process.allow[1]: must be a string, got the boolean true: YAML 1.1 reads yes, no, on and off (and true, false) as booleans; quote the value ("yes") to mean the word`}},
		{name: "YAML 1.1 off is a boolean", doc: "id: a\ntoolset: [off]", want: []string{`toolset[0]: must be a string, got the boolean false: YAML 1.1 reads yes, no, on and off (and true, false) as booleans; quote the value ("yes") to mean the word`}},
		{name: "quoted yes is a string", doc: "id: a\nprocess: {allow: [\"yes\"]}\ntoolset: [1]", want: []string{`toolset[0]: must be a string, got the number 1`}},
		{name: "id a boolean", doc: "id: on", want: []string{`id: must be a string, got the boolean true: YAML 1.1 reads yes, no, on and off (and true, false) as booleans; quote the value ("yes") to mean the word`}},
		{name: "unknown substitution", doc: "id: a\nfs_reach: {read: ['${FOO}/x']}", env: Env{Home: "/h"},
			want: []string{"fs_reach.read[0]: unknown substitution ${FOO}"}},
		{name: "empty WORKDIR", doc: "id: a\nfs_reach: {read: ['${WORKDIR}']}",
			want: []string{"fs_reach.read[0]: substitution ${WORKDIR} is empty (fs_reach.workdir is missing or invalid)"}},
		{name: "empty HOME", doc: "id: a\nfs_reach: {workdir: '${HOME}/w'}",
			want: []string{"fs_reach.workdir: substitution ${HOME} is empty (the worker has no home directory)"}},
		{name: "PERSONALITY of invalid id", doc: "id: a.b\nfs_reach: {write: ['/x/${PERSONALITY}']}",
			want: []string{`id: "a.b" must match ^[A-Za-z0-9_-]+$ and be at most 128 characters`,
				"fs_reach.write[0]: substitution ${PERSONALITY} is empty (id is missing or invalid)"}},
		{name: "WORKDIR in workdir", doc: "id: a\nfs_reach: {workdir: '${WORKDIR}/x'}",
			want: []string{"fs_reach.workdir: ${WORKDIR} cannot be used in fs_reach.workdir"}},
		{name: "unterminated substitution", doc: "id: a\nfs_reach: {read: ['/x/${HOME']}", env: Env{Home: "/h"},
			want: []string{`fs_reach.read[0]: unterminated substitution in "/x/${HOME"`}},
		{name: "relative path", doc: "id: a\nfs_reach: {read: [data, /ok]}", want: []string{`fs_reach.read[0]: path "data" must be absolute`}},
		{name: "relative after substitution", doc: "id: a\nfs_reach: {read: ['${HOME}/x']}", env: Env{Home: "rel"},
			want: []string{`fs_reach.read[0]: path "rel/x" must be absolute`}},
		{name: "relative workdir", doc: "id: a\nfs_reach: {workdir: w}", want: []string{`fs_reach.workdir: path "w" must be absolute`}},
		{name: "bad host patterns", doc: "id: a\nsafety: {network: {allow: ['a.*.com', ok.com], deny: ['x:0']}}",
			want: []string{`safety.network.allow[0]: invalid host pattern "a.*.com": "*" is allowed only as the whole host or a leading "*." label`,
				`safety.network.deny[0]: invalid host pattern "x:0": port "0" must be a number from 1 to 65535`}},
		{name: "allow_private_urls not bool", doc: "id: a\nsafety: {network: {allow_private_urls: 'nope'}}",
			want: []string{"safety.network.allow_private_urls: must be true or false"}},
		{name: "bad secret pattern", doc: "id: a\nsecrets: {allow: ['a/../b', 'a/*/c']}",
			want: []string{`secrets.allow[0]: invalid secret pattern "a/../b": want a ref like a/b, a prefix like a/* or *`,
				`secrets.allow[1]: invalid secret pattern "a/*/c": want a ref like a/b, a prefix like a/* or *`}},
		{name: "ceiling without allow", doc: "id: a\nprocess: {}", want: []string{"process.allow: is required (use [] to allow nothing)"}},
		{name: "ceiling not a mapping", doc: "id: a\nsecrets: [a]", want: []string{"secrets: must be a mapping"}},
		{name: "secrets unknown key", doc: "id: a\nsecrets: {allow: [], sendto: {}}", want: []string{`unknown key "secrets.sendto"`}},
		{name: "secrets without allow or send_to", doc: "id: a\nsecrets: {}", want: []string{"secrets.allow: is required (use [] to allow nothing)"}},
		{name: "send_to not a mapping", doc: "id: a\nsecrets: {send_to: [api.github.com]}",
			want: []string{"secrets.send_to: must be a mapping of secret patterns to lists of host patterns"}},
		{name: "send_to bad secret pattern", doc: "id: a\nsecrets: {send_to: {'a/*/b': [x.com], '': [y.com]}}",
			want: []string{`secrets.send_to.: invalid secret pattern "": want a ref like a/b, a prefix like a/* or *`,
				`secrets.send_to.a/*/b: invalid secret pattern "a/*/b": want a ref like a/b, a prefix like a/* or *`}},
		{name: "send_to bad host patterns", doc: "id: a\nsecrets: {send_to: {'http/*': [ok.com, 'a.*.com', 'x:0', '']}}",
			want: []string{`secrets.send_to.http/*[3]: must not be empty`,
				`secrets.send_to.http/*[1]: invalid host pattern "a.*.com": "*" is allowed only as the whole host or a leading "*." label`,
				`secrets.send_to.http/*[2]: invalid host pattern "x:0": port "0" must be a number from 1 to 65535`}},
		{name: "send_to hosts not a list", doc: "id: a\nsecrets: {send_to: {'http/*': api.github.com}}",
			want: []string{"secrets.send_to.http/*: must be a list of strings"}},
		{name: "send_to and a bad allow", doc: "id: a\nsecrets: {allow: ['a/../b'], send_to: {'a/*': [1]}}",
			want: []string{"secrets.send_to.a/*[0]: must be a string, got the number 1",
				`secrets.allow[0]: invalid secret pattern "a/../b": want a ref like a/b, a prefix like a/* or *`}},
		{name: "process unknown key, once", doc: "id: a\nprocess: {allow: [], limit: {}}", want: []string{`unknown key "process.limit"`}},
		{name: "limits unknown key", doc: "id: a\nprocess: {limits: {mem: 1GiB}}", want: []string{`unknown key "process.limits.mem"`}},
		{name: "limits not a mapping", doc: "id: a\nprocess: {limits: 1GiB}", want: []string{"process.limits: must be a mapping"}},
		{name: "memory without unit is bytes, below the minimum", doc: "id: a\nprocess: {limits: {memory: '1024'}}",
			want: []string{`process.limits.memory: "1024" is below the minimum of 32MiB`}},
		{name: "memory not a size", doc: "id: a\nprocess: {limits: {memory: lots}}",
			want: []string{`process.limits.memory: "lots" is not a size (use a number with a unit, such as 512MiB or 2GiB)`}},
		{name: "memory a number", doc: "id: a\nprocess: {limits: {memory: 512}}", want: []string{"process.limits.memory: must be a size with a unit, such as 512MiB"}},
		{name: "memory negative", doc: "id: a\nprocess: {limits: {memory: -1GiB}}",
			want: []string{`process.limits.memory: "-1GiB" is not a size (use a number with a unit, such as 512MiB or 2GiB)`}},
		{name: "pids below the minimum", doc: "id: a\nprocess: {limits: {pids: 4}}", want: []string{"process.limits.pids: 4 is below the minimum of 16"}},
		{name: "pids zero", doc: "id: a\nprocess: {limits: {pids: 0}}", want: []string{"process.limits.pids: must be an integer greater than 0"}},
		{name: "pids fractional", doc: "id: a\nprocess: {limits: {pids: 2.5}}", want: []string{"process.limits.pids: must be an integer greater than 0"}},
		{name: "cpu zero", doc: "id: a\nprocess: {limits: {cpu: 0}}", want: []string{"process.limits.cpu: 0 is below the minimum of 0.01"}},
		{name: "cpu not a number", doc: "id: a\nprocess: {limits: {cpu: all}}", want: []string{"process.limits.cpu: must be a number of CPUs, such as 0.5 or 2"}},
		{name: "cpu a list", doc: "id: a\nprocess: {limits: {cpu: [1]}}", want: []string{"process.limits.cpu: must be a number of CPUs, such as 0.5 or 2"}},
		{name: "tmp below the minimum", doc: "id: a\nprocess: {limits: {tmp: 512KiB}}",
			want: []string{`process.limits.tmp: "512KiB" is below the minimum of 1MiB`}},
		{name: "tmp without unit is bytes, below the minimum", doc: "id: a\nprocess: {limits: {tmp: '4096'}}",
			want: []string{`process.limits.tmp: "4096" is below the minimum of 1MiB`}},
		{name: "tmp not a size", doc: "id: a\nprocess: {limits: {tmp: plenty}}",
			want: []string{`process.limits.tmp: "plenty" is not a size (use a number with a unit, such as 256MiB or 1GiB)`}},
		{name: "tmp a number", doc: "id: a\nprocess: {limits: {tmp: 256}}", want: []string{"process.limits.tmp: must be a size with a unit, such as 256MiB"}},
		{name: "tmp negative", doc: "id: a\nprocess: {limits: {tmp: -1MiB}}",
			want: []string{`process.limits.tmp: "-1MiB" is not a size (use a number with a unit, such as 256MiB or 1GiB)`}},
		{name: "tmp and memory both wrong", doc: "id: a\nprocess: {limits: {memory: 1MiB, tmp: [1]}}",
			want: []string{`process.limits.memory: "1MiB" is below the minimum of 32MiB`, "process.limits.tmp: must be a size with a unit, such as 256MiB"}},
		{name: "rate limit zero requests", doc: "id: a\nrate_limits: {t: {requests: 0, window: 1h}}",
			want: []string{"rate_limits.t.requests: must be an integer greater than 0"}},
		{name: "rate limit fractional requests", doc: "id: a\nrate_limits: {t: {requests: 1.5, window: 1h}}",
			want: []string{"rate_limits.t.requests: must be an integer greater than 0"}},
		{name: "rate limit missing fields", doc: "id: a\nrate_limits: {t: {burst: 1}}",
			want: []string{`unknown key "rate_limits.t.burst"`, "rate_limits.t.requests: is required", "rate_limits.t.window: is required"}},
		{name: "rate limit bad window", doc: "id: a\nrate_limits: {t: {requests: 1, window: 1y}}",
			want: []string{`rate_limits.t.window: invalid window "1y": want a duration like 30s, 15m, 1h or 7d`}},
		{name: "rate limit window number", doc: "id: a\nrate_limits: {t: {requests: 1, window: 60}}",
			want: []string{"rate_limits.t.window: must be a string, got the number 60"}},
		{name: "rate limits not a mapping", doc: "id: a\nrate_limits: [a]", want: []string{"rate_limits: must be a mapping of tool names"}},
		{name: "budget zero", doc: "id: a\nbudget: {result_chars: 0}", want: []string{"budget.result_chars: must be an integer greater than 0"}},
		{name: "budget negative", doc: "id: a\nbudget: {result_chars: -5}", want: []string{"budget.result_chars: must be an integer greater than 0"}},
		{name: "binary with control character", doc: "id: a\nprocess: {allow: [\"a\\nb\", '*', /usr/bin/git]}",
			want: []string{`process.allow[0]: binary "a\nb" contains a control character`}},
		{name: "budget not a number", doc: "id: a\nbudget: {result_chars: lots}", want: []string{"budget.result_chars: must be an integer greater than 0"}},
		{name: "budget not a mapping", doc: "id: a\nbudget: 5", want: []string{"budget: must be a mapping"}},
		{name: "blobs not a boolean", doc: "id: a\nbudget: {blobs: forbid}", want: []string{"budget.blobs: must be true or false"}},
		{name: "blobs as a string", doc: "id: a\nbudget: {blobs: \"false\"}", want: []string{"budget.blobs: must be true or false"}},
		{name: "safety not a mapping", doc: "id: a\nsafety: [1]", want: []string{"safety: must be a mapping"}},
		{name: "network not a mapping", doc: "id: a\nsafety: {network: 1}", want: []string{"safety.network: must be a mapping"}},
		{name: "fs_reach not a mapping", doc: "id: a\nfs_reach: /x", want: []string{"fs_reach: must be a mapping"}},
		{name: "workdir not a string", doc: "id: a\nfs_reach: {workdir: [/x]}", want: []string{"fs_reach.workdir: must be a string"}},
		{name: "NUL in path", doc: `{"id":"a","fs_reach":{"read":["/a\u0000b"]}}`, want: []string{"fs_reach.read[0]: path must not contain a NUL byte"}},
		{name: "empty rate limit name", doc: "id: a\nrate_limits: {'': {requests: 1, window: 1h}}", want: []string{"rate_limits: tool name must not be empty"}},
		{name: "rate limit entry not a mapping", doc: "id: a\nrate_limits: {t: 5}", want: []string{"rate_limits.t: must be a mapping"}},
		{name: "duplicate key", doc: "id: a\nid: b", want: []string{"document is not valid YAML or JSON"}},
		{name: "keys of the same text", doc: "id: a\nsecrets: {allow: [], send_to: {'0': [a.com], 0: []}}",
			want: []string{`document is not valid YAML or JSON: duplicate key "secrets.send_to.0" (keys are compared as text: '0' and 0 are the same key)`}},
		{name: "bad YAML", doc: "id: [a", want: []string{"document is not valid YAML or JSON"}},
		{name: "all problems at once", doc: "idd: a\nfs_reach: {read: [rel]}\nbudget: {result_chars: 0}",
			want: []string{`unknown key "idd"`, "id: is required", `fs_reach.read[0]: path "rel" must be absolute`,
				"budget.result_chars: must be an integer greater than 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse([]byte(tt.doc), tt.env)
			require.Nil(t, p)
			require.ErrorIs(t, err, ErrInvalidDocument)
			var de *DocumentError
			require.True(t, errors.As(err, &de))
			got := make([]string, len(de.Problems))
			for i, pr := range de.Problems {
				got[i] = pr.Message
			}
			if tt.name == "duplicate key" || tt.name == "bad YAML" {
				require.Len(t, got, 1)
				require.Contains(t, got[0], tt.want[0])
				return
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func make129() []byte {
	b := make([]byte, 129)
	for i := range b {
		b[i] = 'a'
	}
	return b
}

func TestDocumentError(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("id: a\nsafety: {network: {alow: []}}\nbudget: {result_chars: 0}"), Env{})
	require.EqualError(t, err, `invalid personality document: unknown key "safety.network.alow"; budget.result_chars: must be an integer greater than 0`)
	var de *DocumentError
	require.ErrorAs(t, err, &de)
	require.Equal(t, []Problem{
		{Key: "safety.network.alow", Message: `unknown key "safety.network.alow"`},
		{Key: "budget.result_chars", Message: "budget.result_chars: must be an integer greater than 0"},
	}, de.Problems)
}

func TestParseWindow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "1h", want: time.Hour},
		{in: "90s", want: 90 * time.Second},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "1s", want: time.Second},
		{in: "1d", want: 24 * time.Hour},
		{in: "7d", want: 7 * 24 * time.Hour},
		{in: "1d12h", want: 36 * time.Hour},
		{in: "1.5h", want: 90 * time.Minute},
		{in: "", err: `invalid window "": want a duration like 30s, 15m, 1h or 7d`},
		{in: "1y", err: `invalid window "1y": want a duration like 30s, 15m, 1h or 7d`},
		{in: "-1h", err: `invalid window "-1h": want a duration like 30s, 15m, 1h or 7d`},
		{in: "+1h", err: `invalid window "+1h": want a duration like 30s, 15m, 1h or 7d`},
		{in: "d", err: `invalid window "d": want a duration like 30s, 15m, 1h or 7d`},
		{in: "1.5d", err: `invalid window "1.5d": want a duration like 30s, 15m, 1h or 7d`},
		{in: "12h1d", err: `invalid window "12h1d": want a duration like 30s, 15m, 1h or 7d`},
		{in: "1dd", err: `invalid window "1dd": want a duration like 30s, 15m, 1h or 7d`},
		{in: "60", err: `invalid window "60": want a duration like 30s, 15m, 1h or 7d`},
		{in: "999999999d", err: `invalid window "999999999d": want a duration like 30s, 15m, 1h or 7d`},
		{in: "106751d24h", err: `invalid window "106751d24h": want a duration like 30s, 15m, 1h or 7d`},
		{in: "500ms", err: `invalid window "500ms": must be at least 1s`},
		{in: "0s", err: `invalid window "0s": must be at least 1s`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseWindow(tt.in)
			if tt.err != "" {
				require.EqualError(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestValidID(t *testing.T) {
	t.Parallel()
	require.True(t, ValidID("a-B_9"))
	require.False(t, ValidID(""))
	require.False(t, ValidID("a b"))
	require.False(t, ValidID(string(make129())))
	require.True(t, ValidID(string(make129()[:128])))
}

func TestParseProcessLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		doc         string
		wantCeiling *Ceiling
		want        ProcessLimits
	}{
		{name: "absent: defaults", doc: "id: a", want: ProcessLimits{MemoryBytes: 1 << 30, MemoryText: "1GiB", Pids: 256, TmpBytes: 256 << 20, TmpText: "256MiB"}},
		{name: "limits without a ceiling", doc: "id: a\nprocess: {limits: {memory: 2GiB}}",
			want: ProcessLimits{MemoryBytes: 2 << 30, MemoryText: "2GiB", Pids: 256, TmpBytes: 256 << 20, TmpText: "256MiB"}},
		{name: "SI units are decimal", doc: "id: a\nprocess: {allow: [git], limits: {memory: 800MB, cpu: 0.5, tmp: 2MB}}", wantCeiling: &Ceiling{Allow: []string{"git"}},
			want: ProcessLimits{MemoryBytes: 800_000_000, MemoryText: "800MB", Pids: 256, CPU: 0.5, TmpBytes: 2_000_000, TmpText: "2MB"}},
		{name: "spaces and case", doc: "id: a\nprocess: {limits: {memory: ' 1.5 gib ', pids: 1000, cpu: 2, tmp: ' 1 mib '}}",
			want: ProcessLimits{MemoryBytes: 3 << 29, MemoryText: "1.5 gib", Pids: 1000, CPU: 2, TmpBytes: 1 << 20, TmpText: "1 mib"}},
		{name: "cpu as a string", doc: "id: a\nprocess: {limits: {cpu: '0.25'}}",
			want: ProcessLimits{MemoryBytes: 1 << 30, MemoryText: "1GiB", Pids: 256, CPU: 0.25, TmpBytes: 256 << 20, TmpText: "256MiB"}},
		{name: "tmp alone", doc: "id: a\nprocess: {limits: {tmp: 1GiB}}",
			want: ProcessLimits{MemoryBytes: 1 << 30, MemoryText: "1GiB", Pids: 256, TmpBytes: 1 << 30, TmpText: "1GiB"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Parse([]byte(tt.doc), Env{})
			require.NoError(t, err)
			require.Equal(t, tt.wantCeiling, p.Process)
			require.Equal(t, tt.want, p.ProcessLimits)
		})
	}
}

func TestProcessLimitsWithDefaults(t *testing.T) {
	t.Parallel()
	require.Equal(t, DefaultProcessLimits(), ProcessLimits{}.WithDefaults())
	require.Equal(t, ProcessLimits{MemoryBytes: 64 << 20, MemoryText: "64 MiB", Pids: 256, TmpBytes: 256 << 20, TmpText: "256MiB"}, ProcessLimits{MemoryBytes: 64 << 20}.WithDefaults())
	require.Equal(t, ProcessLimits{MemoryBytes: 1 << 30, MemoryText: "1GiB", Pids: 20, CPU: 1, TmpBytes: 256 << 20, TmpText: "256MiB"}, ProcessLimits{Pids: 20, CPU: 1}.WithDefaults())
	require.Equal(t, ProcessLimits{MemoryBytes: 1 << 30, MemoryText: "1GiB", Pids: 256, TmpBytes: 8 << 20, TmpText: "8.0 MiB"}, ProcessLimits{TmpBytes: 8 << 20}.WithDefaults())
	require.Equal(t, "1MiB", ProcessLimits{TmpBytes: 1 << 20, TmpText: "1MiB"}.WithDefaults().TmpText, "the text as given")
}
