package web_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/argschema"
	"github.com/capstanhq/capstan/internal/tools/web"
	"github.com/capstanhq/capstan/tool"
)

func TestDeclarations(t *testing.T) {
	t.Parallel()
	tools := web.Tools()
	require.Len(t, tools, 2)
	fetchURL, httpReq := tools[0], tools[1]

	require.Equal(t, "fetch_url", fetchURL.Name)
	require.Equal(t, 100000, fetchURL.MaxResultChars)
	require.Equal(t, tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"*"}}}, fetchURL.Capabilities)

	require.Equal(t, "http_request", httpReq.Name)
	require.Equal(t, 100000, httpReq.MaxResultChars)
	require.Equal(t, tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"*"}}, Secrets: []string{"http/*"}}, httpReq.Capabilities)

	for _, tl := range tools {
		require.NoError(t, tl.Validate(), tl.Name)
		require.Equal(t, "web", tl.Toolset, tl.Name)
		require.True(t, tl.OutputIsUntrusted, tl.Name)
		require.NotEmpty(t, tl.Description, tl.Name)
		require.Empty(t, tl.Permissions, tl.Name)
		require.False(t, tl.AlwaysInclude, tl.Name)
		_, err := argschema.Compile(tl.Name, tl.Schema)
		require.NoError(t, err, tl.Name)
	}
}

func TestSchemas(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 8192)
	tests := []struct {
		tool tool.Tool
		args string
		want string // "" = valid; else a substring of the error
	}{
		{web.FetchURL(), `{"url":"https://example.com/a?b=c"}`, ""},
		{web.FetchURL(), `{"url":"HTTP://example.com","max_chars":1}`, ""},
		{web.FetchURL(), `{"url":"http://example.com","max_chars":100000}`, ""},
		{web.FetchURL(), `{}`, "args.url is required (required)"},
		{web.FetchURL(), `{"url":""}`, "args.url"},
		{web.FetchURL(), `{"url":5}`, "args.url must be a string"},
		{web.FetchURL(), `{"url":"example.com/x"}`, "args.url"},
		{web.FetchURL(), `{"url":"ftp://example.com/x"}`, "args.url must match the pattern"},
		{web.FetchURL(), `{"url":"http://x.test/` + long + `"}`, "args.url must be at most 8192 characters long"},
		{web.FetchURL(), `{"url":"http://x.test","max_chars":0}`, "args.max_chars must be at least 1 (minimum)"},
		{web.FetchURL(), `{"url":"http://x.test","max_chars":100001}`, "args.max_chars must be at most 100000 (maximum)"},
		{web.FetchURL(), `{"url":"http://x.test","max_chars":1.5}`, "args.max_chars"},
		{web.FetchURL(), `{"url":"http://x.test","max_chars":"10"}`, "args.max_chars"},
		{web.FetchURL(), `{"url":"http://x.test","method":"POST"}`, "args.method is not allowed (additionalProperties)"},

		{web.HTTPRequest(), `{"method":"GET","url":"https://api.test/v1"}`, ""},
		{web.HTTPRequest(), `{"method":"POST","url":"https://api.test/v1","headers":{"X-A":"1","Content-Type":"application/json"},"body":"{}","auth_secret":"http/api/token","auth_scheme":"token"}`, ""},
		{web.HTTPRequest(), `{"method":"HEAD","url":"https://api.test/v1","headers":{},"auth_secret":"http/x","auth_scheme":""}`, ""},
		{web.HTTPRequest(), `{"url":"https://api.test/v1"}`, "args.method is required (required)"},
		{web.HTTPRequest(), `{"method":"GET"}`, "args.url is required (required)"},
		{web.HTTPRequest(), `{"method":"get","url":"https://api.test/v1"}`, `args.method must be one of "GET", "POST", "PUT"`},
		{web.HTTPRequest(), `{"method":"TRACE","url":"https://api.test/v1"}`, "args.method must be one of"},
		{web.HTTPRequest(), `{"method":"GET","url":"file:///etc/passwd"}`, "args.url must match the pattern"},
		{web.HTTPRequest(), `{"method":"GET","url":"https://api.test/v1","headers":["X: 1"]}`, "args.headers must be an object"},
		{web.HTTPRequest(), `{"method":"GET","url":"https://api.test/v1","headers":{"X":1}}`, "args.headers.X must be a string"},
		{web.HTTPRequest(), `{"method":"GET","url":"https://api.test/v1","headers":{"Bad Name":"1"}}`, `has an invalid property name "Bad Name" (propertyNames)`},
		{web.HTTPRequest(), `{"method":"GET","url":"https://api.test/v1","headers":{"":"1"}}`, `has an invalid property name "" (propertyNames)`},
		{web.HTTPRequest(), `{"method":"GET","url":"https://api.test/v1","headers":{"X":"a\r\nInjected: 1"}}`, "args.headers.X must match the pattern"},
		{web.HTTPRequest(), `{"method":"GET","url":"https://api.test/v1","headers":{"X":"a\u0000"}}`, "args.headers.X must match the pattern"},
		{web.HTTPRequest(), `{"method":"GET","url":"https://api.test/v1","body":5}`, "args.body must be a string"},
		{web.HTTPRequest(), `{"method":"GET","url":"https://api.test/v1","auth_secret":""}`, "args.auth_secret must be at least 1 character long"},
		{web.HTTPRequest(), `{"method":"GET","url":"https://api.test/v1","auth_secret":"http/x","auth_scheme":"Bearer x"}`, "args.auth_scheme must match the pattern"},
		{web.HTTPRequest(), `{"method":"GET","url":"https://api.test/v1","auth_scheme":"Bearer"}`, `args.auth_secret is required when "auth_scheme" is present (dependentRequired)`},
		{web.HTTPRequest(), `{"method":"GET","url":"https://api.test/v1","timeout":5}`, "args.timeout is not allowed (additionalProperties)"},
	}
	for _, tt := range tests {
		t.Run(tt.tool.Name+" "+tt.args[:min(len(tt.args), 120)], func(t *testing.T) {
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

func TestFetchURLChecksArgsAgain(t *testing.T) {
	t.Parallel()
	// For callers that skip the schema (the worker never does).
	tc := &tool.Context{Fetch: fetcher(t, 0)}
	for args, want := range map[string]string{
		`{"url":"http://x.test","max_chars":0}`:      "invalid arguments: args.max_chars must be a whole number from 1 to 100000",
		`{"url":"http://x.test","max_chars":2.5}`:    "invalid arguments: args.max_chars must be a whole number from 1 to 100000",
		`{"url":"http://x.test","max_chars":100001}`: "invalid arguments: args.max_chars must be a whole number from 1 to 100000",
		`{"url":""}`:    "invalid arguments: args.url is required",
		`{"url":["x"]}`: "invalid arguments: args.url must be a string, got array",
	} {
		res, err := web.FetchURL().Execute(ctxT(t), json.RawMessage(args), tc)
		require.NoError(t, err)
		require.Equal(t, tool.CodeInputInvalid, res.Code, args)
		require.Contains(t, res.Error, want, args)
	}
}
