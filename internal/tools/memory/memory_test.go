package memory_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/argschema"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/kv"
	"github.com/capstanhq/capstan/internal/tools/memory"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tool/tooltest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const keyInvalidMsg = "KV_KEY_INVALID: key must be 1 to 1024 bytes of UTF-8"

func ctxT(t *testing.T) context.Context { return tooltest.Context(t, 30*time.Second) }

// storage returns the Storage bucket of a fresh embedded server.
func storage(t *testing.T) *bus.KV {
	t.Helper()
	c := bustest.Conn(t, bustest.Server(t), "")
	b, err := c.KV(ctxT(t), bus.Storage)
	require.NoError(t, err)
	return b
}

// session returns the tool context of a call of session id: its KV accessor
// is built from the grant that capability.Resolve gives the memory tools,
// as the worker builds it.
func session(t *testing.T, b *bus.KV, id string) *tool.Context {
	t.Helper()
	get := memory.Get()
	g, err := capability.Resolve(&get, nil, capability.CallView{Tool: get.Name, SessionID: id, PersonalityID: "p"})
	require.NoError(t, err)
	require.Equal(t, &capability.StorageGrant{Scope: tool.ScopeSession, ScopeID: "session:" + id}, g.Storage)
	return &tool.Context{SessionID: id, KV: kv.New(b, g.Storage, nil)}
}

var (
	kvGet    = memory.Get()
	kvSet    = memory.Set()
	kvDelete = memory.Delete()
	kvList   = memory.List()
)

// run calls tl with args and requires no Go error.
func run(t *testing.T, tl tool.Tool, tc *tool.Context, args string) tool.Result {
	t.Helper()
	res, err := tl.Execute(ctxT(t), json.RawMessage(args), tc)
	require.NoError(t, err, "%s %s", tl.Name, args)
	return res
}

func withStructured(r tool.Result, s map[string]any) tool.Result {
	r.Structured = s
	return r
}

func found(v string) tool.Result { return withStructured(tool.OK(v), map[string]any{"found": true}) }

func missing(k string) tool.Result {
	return withStructured(tool.OK(`(no value for key "`+k+`")`), map[string]any{"found": false})
}

func TestExactOutputs(t *testing.T) {
	t.Parallel()
	tc := session(t, storage(t), "s1")
	steps := []struct {
		tool tool.Tool
		args string
		want tool.Result
	}{
		{kvGet, `{"key":"name"}`, missing("name")},
		{kvList, `{}`, tool.OK("(no keys)")},
		{kvList, ``, tool.OK("(no keys)")},
		{kvSet, `{"key":"name","value":"Ada Lovelace"}`, tool.OK("Stored name")},
		{kvGet, `{"key":"name"}`, found("Ada Lovelace")},
		{kvSet, `{"key":"name","value":"Grace"}`, tool.OK("Stored name")},
		{kvGet, `{"key":"name"}`, found("Grace")},
		{kvSet, `{"key":"empty","value":""}`, tool.OK("Stored empty")},
		{kvGet, `{"key":"empty"}`, found("")},
		{kvSet, `{"key":"multi line","value":"a\nb\n"}`, tool.OK("Stored multi line")},
		{kvGet, `{"key":"multi line"}`, found("a\nb\n")},
		{kvSet, `{"key":"quote\"d","value":"ünï 😀"}`, tool.OK(`Stored quote"d`)},
		{kvGet, `{"key":"quote\"d"}`, found("ünï 😀")},
		{kvGet, `{"key":"quote"}`, missing("quote")},
		{kvList, `{}`, tool.OK("empty\nmulti line\nname\nquote\"d")},
		{kvDelete, `{"key":"name"}`, tool.OK("Deleted name")},
		{kvGet, `{"key":"name"}`, missing("name")},
		{kvDelete, `{"key":"name"}`, tool.OK("Deleted name")},
		{kvDelete, `{"key":"never set"}`, tool.OK("Deleted never set")},
		{kvList, `{"prefix":""}`, tool.OK("empty\nmulti line\nquote\"d")},
	}
	for i, s := range steps {
		require.Equal(t, s.want, run(t, s.tool, tc, s.args), "step %d: %s %s", i, s.tool.Name, s.args)
	}
}

func TestListIsSortedAndFiltered(t *testing.T) {
	t.Parallel()
	tc := session(t, storage(t), "s1")
	for _, k := range []string{"task/2", "b", "task/10", "Z", "task/1", "a.b", "é", "task", "a"} {
		require.Equal(t, tool.OK("Stored "+k), run(t, kvSet, tc, `{"key":"`+k+`","value":"v"}`))
	}
	tests := []struct {
		prefix string
		want   string
	}{
		{"", "Z\na\na.b\nb\ntask\ntask/1\ntask/10\ntask/2\né"},
		{"task/", "task/1\ntask/10\ntask/2"},
		{"task", "task\ntask/1\ntask/10\ntask/2"},
		{"a", "a\na.b"},
		{"é", "é"},
		{"z", "(no keys)"},
		{"task/3", "(no keys)"},
	}
	for _, tt := range tests {
		args, err := json.Marshal(map[string]string{"prefix": tt.prefix})
		require.NoError(t, err)
		require.Equal(t, tool.OK(tt.want), run(t, kvList, tc, string(args)), "prefix %q", tt.prefix)
	}
}

func TestTTLExpiry(t *testing.T) {
	t.Parallel()
	tc := session(t, storage(t), "s1")
	require.Equal(t, tool.OK("Stored short"), run(t, kvSet, tc, `{"key":"short","value":"x","ttl_seconds":1}`))
	require.Equal(t, tool.OK("Stored long"), run(t, kvSet, tc, `{"key":"long","value":"y","ttl_seconds":3600}`))
	require.Equal(t, tool.OK("Stored forever"), run(t, kvSet, tc, `{"key":"forever","value":"z"}`))
	require.Equal(t, found("x"), run(t, kvGet, tc, `{"key":"short"}`))
	ctx := ctxT(t)
	// gone reports whether short has no value. It runs in require's polling
	// goroutine, so it must not call t or require.
	gone := func() bool {
		res, err := kvGet.Execute(ctx, json.RawMessage(`{"key":"short"}`), tc)
		return err == nil && res.Value == `(no value for key "short")`
	}
	require.Eventually(t, gone, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, missing("short"), run(t, kvGet, tc, `{"key":"short"}`))
	require.Equal(t, tool.OK("forever\nlong"), run(t, kvList, tc, `{}`))
	require.Equal(t, found("y"), run(t, kvGet, tc, `{"key":"long"}`))

	// Setting without ttl_seconds again keeps the value for good.
	require.Equal(t, tool.OK("Stored short"), run(t, kvSet, tc, `{"key":"short","value":"again"}`))
	require.Never(t, gone, 1500*time.Millisecond, 100*time.Millisecond)
	require.Equal(t, found("again"), run(t, kvGet, tc, `{"key":"short"}`))
}

func TestSessionsAreIsolated(t *testing.T) {
	t.Parallel()
	b := storage(t)
	s1, s2 := session(t, b, "s1"), session(t, b, "s2")
	require.Equal(t, tool.OK("Stored k"), run(t, kvSet, s1, `{"key":"k","value":"one"}`))
	require.Equal(t, missing("k"), run(t, kvGet, s2, `{"key":"k"}`))
	require.Equal(t, tool.OK("(no keys)"), run(t, kvList, s2, `{}`))
	require.Equal(t, tool.OK("Stored k"), run(t, kvSet, s2, `{"key":"k","value":"two"}`))
	require.Equal(t, found("one"), run(t, kvGet, s1, `{"key":"k"}`))
	require.Equal(t, found("two"), run(t, kvGet, s2, `{"key":"k"}`))
	require.Equal(t, tool.OK("Deleted k"), run(t, kvDelete, s2, `{"key":"k"}`))
	require.Equal(t, found("one"), run(t, kvGet, s1, `{"key":"k"}`))

	// Another call of session s1 (a new accessor) sees the same store.
	require.Equal(t, found("one"), run(t, kvGet, session(t, b, "s1"), `{"key":"k"}`))
}

func TestNotGranted(t *testing.T) {
	t.Parallel()
	want := tool.Fail(tool.CodeNotAvailable, "Storage capability not configured for this personality.")
	require.Equal(t, memory.MsgNoKV, want.Error)
	for _, c := range []struct {
		tool tool.Tool
		args string
	}{
		{kvGet, `{"key":"k"}`},
		{kvSet, `{"key":"k","value":"v"}`},
		{kvDelete, `{"key":"k"}`},
		{kvList, `{}`},
	} {
		require.Equal(t, want, run(t, c.tool, &tool.Context{SessionID: "s1"}, c.args), c.tool.Name)
	}
}

func TestKeyInvalidPropagates(t *testing.T) {
	t.Parallel()
	var denied []error
	b := storage(t)
	g := &capability.StorageGrant{Scope: tool.ScopeSession, ScopeID: "session:s1"}
	tc := &tool.Context{KV: kv.New(b, g, func(err error) { denied = append(denied, err) })}
	// 1024 characters fit the schema; 2048 bytes do not fit the store.
	long, err := json.Marshal(strings.Repeat("é", 1024))
	require.NoError(t, err)
	for _, c := range []struct {
		tool tool.Tool
		args string
	}{
		{kvGet, `{"key":` + string(long) + `}`},
		{kvSet, `{"key":` + string(long) + `,"value":"v"}`},
		{kvDelete, `{"key":` + string(long) + `}`},
		{kvList, `{"prefix":` + string(long) + `}`},
		{kvGet, `{"key":""}`}, // below the schema's minLength: for direct callers
	} {
		_, err := c.tool.Execute(ctxT(t), json.RawMessage(c.args), tc)
		require.ErrorIs(t, err, tool.ErrKVKeyInvalid, c.tool.Name)
		require.EqualError(t, err, keyInvalidMsg, c.tool.Name)
		code, ok := tool.DenialCode(err)
		require.True(t, ok)
		require.Equal(t, "KV_KEY_INVALID", code)
	}
	require.Len(t, denied, 5, "the accessor reported every denial")
}

func TestDeclarations(t *testing.T) {
	t.Parallel()
	tools := memory.Tools()
	names := make([]string, len(tools))
	for i, tl := range tools {
		names[i] = tl.Name
		require.NoError(t, tl.Validate(), tl.Name)
		require.Equal(t, "memory", tl.Toolset, tl.Name)
		require.Equal(t, tool.Capabilities{Storage: &tool.Storage{Scope: tool.ScopeSession, Kind: "kv"}}, tl.Capabilities, tl.Name)
		require.False(t, tl.OutputIsUntrusted, tl.Name)
		require.NotEmpty(t, tl.Description, tl.Name)
		_, err := argschema.Compile(tl.Name, tl.Schema)
		require.NoError(t, err, tl.Name)
	}
	require.Equal(t, []string{"kv_get", "kv_set", "kv_delete", "kv_list"}, names)
}

func TestSchemas(t *testing.T) {
	t.Parallel()
	tooLong, err := json.Marshal(strings.Repeat("k", 1025))
	require.NoError(t, err)
	bigValue, err := json.Marshal(strings.Repeat("v", memory.MaxValueChars+1))
	require.NoError(t, err)
	tests := []struct {
		tool tool.Tool
		args string
		want string // "" = valid; else a substring of the error
	}{
		{kvGet, `{"key":"k"}`, ""},
		{kvGet, `{}`, "args.key is required (required)"},
		{kvGet, `{"key":""}`, "args.key must be at least"},
		{kvGet, `{"key":` + string(tooLong) + `}`, "args.key must be at most"},
		{kvGet, `{"key":1}`, "args.key"},
		{kvGet, `{"key":"k","value":"v"}`, "args.value is not allowed (additionalProperties)"},

		{kvSet, `{"key":"k","value":""}`, ""},
		{kvSet, `{"key":"k","value":"v","ttl_seconds":1}`, ""},
		{kvSet, `{"key":"k","value":"v","ttl_seconds":315360000}`, ""},
		{kvSet, `{"value":"v"}`, "args.key is required (required)"},
		{kvSet, `{"key":"k"}`, "args.value is required (required)"},
		{kvSet, `{"key":"k","value":5}`, "args.value"},
		{kvSet, `{"key":"k","value":{"a":1}}`, "args.value"},
		{kvSet, `{"key":"k","value":` + string(bigValue) + `}`, "args.value must be at most"},
		{kvSet, `{"key":"k","value":"v","ttl_seconds":0}`, "args.ttl_seconds must be at least 1 (minimum)"},
		{kvSet, `{"key":"k","value":"v","ttl_seconds":-5}`, "args.ttl_seconds must be at least 1 (minimum)"},
		{kvSet, `{"key":"k","value":"v","ttl_seconds":315360001}`, "args.ttl_seconds must be at most 315360000 (maximum)"},
		{kvSet, `{"key":"k","value":"v","ttl_seconds":1.5}`, "args.ttl_seconds"},
		{kvSet, `{"key":"k","value":"v","ttl":1}`, "args.ttl is not allowed (additionalProperties)"},

		{kvDelete, `{"key":"k"}`, ""},
		{kvDelete, `{}`, "args.key is required (required)"},
		{kvDelete, `{"key":"k","prefix":"p"}`, "args.prefix is not allowed (additionalProperties)"},

		{kvList, `{}`, ""},
		{kvList, ``, ""},
		{kvList, `{"prefix":""}`, ""},
		{kvList, `{"prefix":"a/"}`, ""},
		{kvList, `{"prefix":` + string(tooLong) + `}`, "args.prefix must be at most"},
		{kvList, `{"prefix":null}`, "args.prefix"},
		{kvList, `{"key":"k"}`, "args.key is not allowed (additionalProperties)"},
	}
	for _, tt := range tests {
		name := tt.args
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(tt.tool.Name+" "+name, func(t *testing.T) {
			t.Parallel()
			s, err := argschema.Compile(tt.tool.Name, tt.tool.Schema)
			require.NoError(t, err)
			err = s.Validate(json.RawMessage(tt.args))
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, argschema.ErrInvalidArguments)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestExecuteChecksTTLAgain(t *testing.T) {
	t.Parallel()
	// For callers that skip the schema (the worker never does); no store is
	// touched, so the accessor's backend is never reached.
	tc := &tool.Context{KV: kv.New(nil, &capability.StorageGrant{Scope: tool.ScopeSession, ScopeID: "session:s"}, nil)}
	for _, ttl := range []string{"0", "1.5", "315360001", "-1"} {
		got := run(t, kvSet, tc, `{"key":"k","value":"v","ttl_seconds":`+ttl+`}`)
		require.Equal(t, tool.Fail(tool.CodeInputInvalid, "invalid arguments: args.ttl_seconds must be a whole number from 1 to 315360000"), got, ttl)
	}
	require.Equal(t, int64(315360000), int64(memory.MaxTTLSeconds))
}

func TestTTLWrittenAsWholeNumberWithExponent(t *testing.T) {
	t.Parallel()
	tc := session(t, storage(t), "s1")
	require.Equal(t, tool.OK("Stored k"), run(t, kvSet, tc, `{"key":"k","value":"v","ttl_seconds":1e2}`))
	require.Equal(t, found("v"), run(t, kvGet, tc, `{"key":"k"}`))
}
