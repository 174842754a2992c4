package file_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/argschema"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/tools/file"
	"github.com/capstanhq/capstan/tool"
)

func TestDeclarations(t *testing.T) {
	t.Parallel()
	tools := file.Tools()
	names := make([]string, len(tools))
	for i, tl := range tools {
		names[i] = tl.Name
		require.NoError(t, tl.Validate(), tl.Name)
		require.Equal(t, "file", tl.Toolset, tl.Name)
		require.NotEmpty(t, tl.Description, tl.Name)
		require.False(t, tl.AlwaysInclude, tl.Name)
		require.Empty(t, tl.Permissions, tl.Name)
	}
	require.Equal(t, []string{"read_file", "write_file", "patch_file", "search_files"}, names)

	readOnly := tool.Capabilities{FSReach: &tool.FSReach{Read: tool.FromPersonality()}}
	readWrite := tool.Capabilities{FSReach: &tool.FSReach{Read: tool.FromPersonality(), Write: tool.FromPersonality()}}
	tests := []struct {
		tool      tool.Tool
		caps      tool.Capabilities
		untrusted bool
		maxChars  int
	}{
		{file.ReadFile(), readOnly, true, 40000},
		{file.WriteFile(), readWrite, false, 0},
		{file.PatchFile(), readWrite, false, 0},
		{file.SearchFiles(), readOnly, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.tool.Name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.caps, tt.tool.Capabilities)
			require.Equal(t, tt.untrusted, tt.tool.OutputIsUntrusted)
			require.Equal(t, tt.maxChars, tt.tool.MaxResultChars)
			caps, err := json.Marshal(tt.tool.Capabilities)
			require.NoError(t, err)
			if tt.caps.FSReach.Write != nil {
				require.JSONEq(t, `{"fs_reach":{"read":"from-personality","write":"from-personality"}}`, string(caps))
			} else {
				require.JSONEq(t, `{"fs_reach":{"read":"from-personality"}}`, string(caps))
			}
		})
	}
}

func TestSchemas(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tool tool.Tool
		args string
		want string // "" = valid
	}{
		{"read minimal", file.ReadFile(), `{"path":"a.txt"}`, ""},
		{"read range", file.ReadFile(), `{"path":"a.txt","start_line":1,"end_line":9}`, ""},
		{"read no path", file.ReadFile(), `{}`, "args.path is required (required)"},
		{"read empty path", file.ReadFile(), `{"path":""}`, "args.path must be at least 1 character long, got 0 (minLength)"},
		{"read path type", file.ReadFile(), `{"path":3}`, "args.path must be a string, got number (type)"},
		{"read start_line zero", file.ReadFile(), `{"path":"a","start_line":0}`, "args.start_line must be at least 1 (minimum)"},
		{"read end_line fraction", file.ReadFile(), `{"path":"a","end_line":1.5}`, "args.end_line must be an integer, got number (type)"},
		{"read unknown field", file.ReadFile(), `{"path":"a","offset":1}`, "args.offset is not allowed (additionalProperties)"},
		{"write ok", file.WriteFile(), `{"path":"a","content":""}`, ""},
		{"write no content", file.WriteFile(), `{"path":"a"}`, "args.content is required (required)"},
		{"write content type", file.WriteFile(), `{"path":"a","content":null}`, "args.content must be a string, got null (type)"},
		{"write unknown field", file.WriteFile(), `{"path":"a","content":"x","mode":"0644"}`, "args.mode is not allowed (additionalProperties)"},
		{"patch ok", file.PatchFile(), `{"path":"a","old_text":"x","new_text":""}`, ""},
		{"patch no new_text", file.PatchFile(), `{"path":"a","old_text":"x"}`, "args.new_text is required (required)"},
		{"patch empty old_text", file.PatchFile(), `{"path":"a","old_text":"","new_text":"y"}`, "args.old_text must be at least 1 character long, got 0 (minLength)"},
		{"patch unknown field", file.PatchFile(), `{"path":"a","old_text":"x","new_text":"y","all":true}`, "args.all is not allowed (additionalProperties)"},
		{"search ok", file.SearchFiles(), `{"pattern":"x","path":"src","glob":"*.go","max_results":200}`, ""},
		{"search no pattern", file.SearchFiles(), `{"path":"."}`, "args.pattern is required (required)"},
		{"search max_results above", file.SearchFiles(), `{"pattern":"x","max_results":201}`, "args.max_results must be at most 200 (maximum)"},
		{"search max_results zero", file.SearchFiles(), `{"pattern":"x","max_results":0}`, "args.max_results must be at least 1 (minimum)"},
		{"search unknown field", file.SearchFiles(), `{"pattern":"x","regex":true}`, "args.regex is not allowed (additionalProperties)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := argschema.Compile(tt.tool.Name, tt.tool.Schema)
			require.NoError(t, err)
			err = s.Validate(json.RawMessage(tt.args))
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, "invalid arguments: "+tt.want)
		})
	}
}

// TestNoCapability: every tool is refused cleanly without an fs accessor,
// and with a grant that does not reach the path.
func TestNoCapability(t *testing.T) {
	t.Parallel()
	args := map[string]string{
		"read_file":    `{"path":"a.txt"}`,
		"write_file":   `{"path":"a.txt","content":"x"}`,
		"patch_file":   `{"path":"a.txt","old_text":"a","new_text":"b"}`,
		"search_files": `{"pattern":"a"}`,
	}
	for _, tl := range file.Tools() {
		t.Run(tl.Name+" without accessor", func(t *testing.T) {
			t.Parallel()
			res, err := tl.Execute(context.Background(), json.RawMessage(args[tl.Name]), &tool.Context{WorkingDir: t.TempDir()})
			require.NoError(t, err)
			require.Equal(t, tool.Fail(tool.CodeNotAvailable, "Filesystem capability not configured for this personality."), res)
		})
		t.Run(tl.Name+" with an empty grant", func(t *testing.T) {
			t.Parallel()
			e := newEnvGrant(t, func(dir string) *capability.FSGrant { return &capability.FSGrant{WorkingDir: dir} })
			e.write(t, "a.txt", "a")
			mode, target := "read", e.p("a.txt")
			switch tl.Name {
			case "write_file":
				mode = "write"
			case "search_files":
				target = e.dir
			}
			require.Equal(t, tool.Fail(tool.CodeExecutionFailed, `Filesystem boundary: `+mode+` of "`+target+
				`" is outside this personality's fs_reach allowlist.`), e.run(t, tl, args[tl.Name]))
		})
	}
}

// TestExecuteChecksArgs: Execute refuses bad args itself when called
// without the worker's schema validation.
func TestExecuteChecksArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tool tool.Tool
		args string
		want string
	}{
		{"read not an object", file.ReadFile(), `[]`, "invalid arguments: args must be an object, got array"},
		{"read invalid JSON", file.ReadFile(), `{`, "invalid arguments: args must be a JSON object: unexpected end of JSON input"},
		{"read start_line type", file.ReadFile(), `{"path":"a","start_line":"1"}`, "invalid arguments: args.start_line must be an integer, got string"},
		{"write content type", file.WriteFile(), `{"path":"a","content":1}`, "invalid arguments: args.content must be a string, got number"},
		{"read empty path", file.ReadFile(), `{}`, "invalid arguments: args.path is required and must not be empty"},
		{"read start_line zero", file.ReadFile(), `{"path":"a","start_line":0}`, "invalid arguments: args.start_line must be at least 1 (minimum)"},
		{"read end_line zero", file.ReadFile(), `{"path":"a","end_line":0}`, "invalid arguments: args.end_line must be at least 1 (minimum)"},
		{"write empty path", file.WriteFile(), `{"content":"x"}`, "invalid arguments: args.path is required and must not be empty"},
		{"write no content", file.WriteFile(), `{"path":"a"}`, "invalid arguments: args.content is required"},
		{"patch empty path", file.PatchFile(), `{"old_text":"a","new_text":"b"}`, "invalid arguments: args.path is required and must not be empty"},
		{"patch empty old_text", file.PatchFile(), `{"path":"a","old_text":"","new_text":"b"}`, "invalid arguments: args.old_text is required and must not be empty"},
		{"patch no new_text", file.PatchFile(), `{"path":"a","old_text":"a"}`, "invalid arguments: args.new_text is required"},
		{"search empty pattern", file.SearchFiles(), `{"pattern":""}`, "invalid arguments: args.pattern is required and must not be empty"},
		{"search max_results zero", file.SearchFiles(), `{"pattern":"a","max_results":0}`, "invalid arguments: args.max_results must be between 1 and 200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			require.Equal(t, tool.Fail(tool.CodeInputInvalid, tt.want), e.run(t, tt.tool, tt.args))
		})
	}
}
