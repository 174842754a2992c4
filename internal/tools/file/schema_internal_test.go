package file

import (
	"testing"

	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

// TestSchemasMatchArgs keeps each tool's explicit schema and the
// arguments type tool.Typed decodes into in step.
func TestSchemasMatchArgs(t *testing.T) {
	t.Parallel()
	require.NoError(t, tool.CheckSchema[readArgs](ReadFile().Schema), "%s", ReadFile().Name)
	require.NoError(t, tool.CheckSchema[writeArgs](WriteFile().Schema), "%s", WriteFile().Name)
	require.NoError(t, tool.CheckSchema[patchArgs](PatchFile().Schema), "%s", PatchFile().Name)
	require.NoError(t, tool.CheckSchema[searchArgs](SearchFiles().Schema), "%s", SearchFiles().Name)
}
