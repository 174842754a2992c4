package shell_test

import (
	"encoding/json"
	"testing"

	"github.com/capstanhq/capstan/internal/argschema"
	"github.com/capstanhq/capstan/internal/tools/shell"
	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

func TestDeclarations(t *testing.T) {
	t.Parallel()
	tools := shell.Tools()
	require.Len(t, tools, 2)
	term, rp := tools[0], tools[1]

	require.Equal(t, "terminal", term.Name)
	require.Equal(t, "terminal", term.Toolset)
	require.Equal(t, 20000, term.MaxResultChars)
	require.True(t, term.OutputIsUntrusted)
	personality := func(binary string) tool.Capabilities {
		return tool.Capabilities{
			Network: &tool.Network{AllowedHosts: []string{"*"}},
			FSReach: &tool.FSReach{Read: tool.FromPersonality(), Write: tool.FromPersonality()},
			Process: &tool.Process{AllowedBinaries: []string{binary}},
		}
	}
	require.Equal(t, personality("bash"), term.Capabilities)

	require.Equal(t, "run_process", rp.Name)
	require.Equal(t, "terminal", rp.Toolset)
	require.Equal(t, personality("*"), rp.Capabilities)

	for _, tl := range tools {
		require.NoError(t, tl.Validate(), tl.Name)
		require.NotEmpty(t, tl.Description, tl.Name)
		require.Empty(t, tl.Permissions, tl.Name)
		require.False(t, tl.AlwaysInclude, tl.Name)
		_, err := argschema.Compile(tl.Name, tl.Schema)
		require.NoError(t, err, tl.Name)
	}
}

func TestSchemas(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tool tool.Tool
		args string
		want string // "" = valid; else a substring of the error
	}{
		{shell.Terminal(), `{"command":"ls"}`, ""},
		{shell.Terminal(), `{"command":"ls","cwd":"","timeout_ms":1}`, ""},
		{shell.Terminal(), `{"command":"ls","cwd":"/x","timeout_ms":600000}`, ""},
		{shell.Terminal(), `{}`, "args.command is required (required)"},
		{shell.Terminal(), `{"command":""}`, "args.command must be at least"},
		{shell.Terminal(), `{"command":5}`, "args.command"},
		{shell.Terminal(), `{"command":"ls","cwd":1}`, "args.cwd"},
		{shell.Terminal(), `{"command":"ls","timeout_ms":0}`, "args.timeout_ms must be at least 1 (minimum)"},
		{shell.Terminal(), `{"command":"ls","timeout_ms":600001}`, "args.timeout_ms must be at most 600000 (maximum)"},
		{shell.Terminal(), `{"command":"ls","timeout_ms":1.5}`, "args.timeout_ms"},
		{shell.Terminal(), `{"command":"ls","timeout_ms":"100"}`, "args.timeout_ms"},
		{shell.Terminal(), `{"command":"ls","shell":"zsh"}`, "args.shell is not allowed (additionalProperties)"},

		{shell.RunProcess(), `{"binary":"git"}`, ""},
		{shell.RunProcess(), `{"binary":"git","args":[],"env":{},"cwd":"a","timeout_ms":60000}`, ""},
		{shell.RunProcess(), `{"binary":"git","args":["status","-s"],"env":{"GIT_DIR":"/x"}}`, ""},
		{shell.RunProcess(), `{"args":["x"]}`, "args.binary is required (required)"},
		{shell.RunProcess(), `{"binary":""}`, "args.binary must be at least"},
		{shell.RunProcess(), `{"binary":"git","args":"status"}`, "args.args"},
		{shell.RunProcess(), `{"binary":"git","args":[1]}`, "args.args[0]"},
		{shell.RunProcess(), `{"binary":"git","env":{"A":1}}`, "args.env.A"},
		{shell.RunProcess(), `{"binary":"git","env":["A=1"]}`, "args.env"},
		{shell.RunProcess(), `{"binary":"git","env":{"A=B":"1"}}`, `args.env["A=B"] is not allowed (additionalProperties)`},
		{shell.RunProcess(), `{"binary":"git","env":{"":"1"}}`, `args.env[""] is not allowed (additionalProperties)`},
		{shell.RunProcess(), `{"binary":"git","env":{"NUL\u0000":"1"}}`, `is not allowed (additionalProperties)`},
		{shell.RunProcess(), `{"binary":"git","env":{"A":"1","B=":"2","C":3}}`, "args.env.C"},
		{shell.RunProcess(), `{"binary":"git","timeout_ms":0}`, "args.timeout_ms must be at least 1 (minimum)"},
		{shell.RunProcess(), `{"binary":"git","timeout_ms":600001}`, "args.timeout_ms must be at most 600000 (maximum)"},
		{shell.RunProcess(), `{"binary":"git","stdin":"x"}`, "args.stdin is not allowed (additionalProperties)"},
	}
	for _, tt := range tests {
		t.Run(tt.tool.Name+" "+tt.args, func(t *testing.T) {
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

func TestExecuteChecksArgsAgain(t *testing.T) {
	t.Parallel()
	// For callers that skip the schema (the worker never does).
	tc := &tool.Context{Process: runner("*")}
	tests := []struct {
		tool tool.Tool
		args string
		want string
	}{
		{shell.Terminal(), `{"command":"ls","timeout_ms":0}`, "invalid arguments: args.timeout_ms must be a whole number from 1 to 600000"},
		{shell.Terminal(), `{"command":"ls","timeout_ms":1.5}`, "invalid arguments: args.timeout_ms must be a whole number from 1 to 600000"},
		{shell.RunProcess(), `{"binary":"ls","timeout_ms":600001}`, "invalid arguments: args.timeout_ms must be a whole number from 1 to 600000"},
		{shell.RunProcess(), `{"binary":"ls","args":"x"}`, "invalid arguments: args.args must be an array, got string"},
	}
	for _, tt := range tests {
		got := mustExec(t, tt.tool, tt.args, tc)
		require.Equal(t, tool.CodeInputInvalid, got.Code, tt.args)
		require.Contains(t, got.Error, tt.want, tt.args)
	}
	// A whole number written with a fraction or exponent is accepted.
	got := mustExec(t, shell.Terminal(), `{"command":"echo x","timeout_ms":1e4}`, &tool.Context{Process: runner("bash")})
	require.Equal(t, tool.OK("x\n"), got)
}
