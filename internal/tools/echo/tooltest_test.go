package echo_test

import (
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tool/tooltest"
	"github.com/stretchr/testify/require"
)

// TestRunAsTheWorkerDoes runs echo through the worker's steps: a sleep
// longer than the call's time ends in the worker's timeout failure.
func TestRunAsTheWorkerDoes(t *testing.T) {
	t.Parallel()
	out := tooltest.Run(t, echo.Tool(), `{"text":"hi"}`)
	require.Equal(t, "hi", out.Result.Value)
	out = tooltest.Run(t, echo.Tool(), `{"text":"hi","sleep_ms":5000}`, tooltest.Timeout(50*time.Millisecond))
	require.Equal(t, tool.CodeExecutionFailed, out.Result.Code)
	require.Equal(t, "timed out after 50ms", out.Result.Error)
}
