package weather_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/capstanhq/capstan/examples/weather"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

func TestSchemaMatchesArgs(t *testing.T) {
	t.Parallel()
	tl := weather.Tool()
	require.NoError(t, tl.Validate())
	require.NoError(t, tool.CheckSchema[weather.Args](tl.Schema))
}

// TestPersonalityAllowsTheTool: the example personality lets the example
// tool run (toolset, permission, network).
func TestPersonalityAllowsTheTool(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("personality.yaml")
	require.NoError(t, err)
	p, err := capability.Parse(data, capability.Env{Home: t.TempDir()})
	require.NoError(t, err)
	tl := weather.Tool()
	require.Empty(t, capability.Validate([]*tool.Tool{&tl}, p))
	require.Nil(t, capability.ToolsetGate(&tl, p, nil))
	require.Nil(t, capability.PermissionGate(&tl, p))
}

func TestWithoutNetworkTheToolSaysSo(t *testing.T) {
	t.Parallel()
	res, err := weather.Tool().Execute(context.Background(), json.RawMessage(`{"city":"Oslo"}`), &tool.Context{})
	require.NoError(t, err)
	require.Equal(t, tool.Fail(tool.CodeNotAvailable, "network capability not configured"), res)
}

// TestDocsShowTheseFiles keeps docs/writing-tools.md equal to the files it
// shows, so that its code compiles and is tested.
func TestDocsShowTheseFiles(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "writing-tools.md"))
	require.NoError(t, err)
	for _, f := range []string{"weather.go", filepath.Join("cmd", "weather-worker", "main.go"), "personality.yaml"} {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Contains(t, string(doc), string(src), "docs/writing-tools.md must show %s as it is", f)
	}
}
