package memory

import (
	"testing"

	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

// TestSchemasMatchArgs keeps each tool's explicit schema and the
// arguments type tool.Typed decodes into in step.
func TestSchemasMatchArgs(t *testing.T) {
	t.Parallel()
	require.NoError(t, tool.CheckSchema[keyArgs](Get().Schema), "%s", Get().Name)
	require.NoError(t, tool.CheckSchema[setArgs](Set().Schema), "%s", Set().Name)
	require.NoError(t, tool.CheckSchema[keyArgs](Delete().Schema), "%s", Delete().Name)
	require.NoError(t, tool.CheckSchema[listArgs](List().Schema), "%s", List().Name)
}
