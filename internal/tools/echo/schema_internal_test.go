package echo

import (
	"testing"

	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

// TestSchemasMatchArgs keeps each tool's explicit schema and the
// arguments type tool.Typed decodes into in step.
func TestSchemasMatchArgs(t *testing.T) {
	t.Parallel()
	require.NoError(t, tool.CheckSchema[args](Tool().Schema), "%s", Tool().Name)
}
