package logging_test

import (
	"bytes"
	"testing"

	"github.com/capstanhq/capstan/internal/logging"
	"github.com/stretchr/testify/require"
)

func TestNew(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l, err := logging.New(&buf, "warn", "", false)
	require.NoError(t, err)
	l.Info("hidden")
	l.Warn("shown", "call_id", "c1")
	require.NotContains(t, buf.String(), "hidden")
	require.Contains(t, buf.String(), `"call_id":"c1"`, "json off a terminal")
	buf.Reset()
	l, err = logging.New(&buf, "", "", true)
	require.NoError(t, err)
	l.Info("x", "tool", "echo")
	require.Contains(t, buf.String(), "tool=echo", "text on a terminal")
	_, err = logging.New(&buf, "loud", "", false)
	require.EqualError(t, err, `CAPSTAN_LOG_LEVEL: "loud" must be debug, info, warn or error`)
	_, err = logging.New(&buf, "", "xml", false)
	require.EqualError(t, err, `CAPSTAN_LOG_FORMAT: "xml" must be text or json`)
}
