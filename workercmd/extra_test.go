package workercmd

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

func weatherTool() tool.Tool {
	return tool.Tool{Name: "weather", Description: "says it is sunny",
		Execute: func(context.Context, json.RawMessage, *tool.Context) (tool.Result, error) {
			return tool.Result{Value: "sunny"}, nil
		}}
}

// TestRunHostsExtraToolsAndWarnsWithoutDefault runs the binary's Run with a
// tool of its own on a server that has no personality at all: the tool is
// in the catalog next to the built-ins, and the log says how to add the
// default personality.
func TestRunHostsExtraToolsAndWarnsWithoutDefault(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	env := map[string]string{"CAPSTAN_NATS_URL": url, "CAPSTAN_NATS_CREDS": bustest.Creds(url), "CAPSTAN_HTTP_ADDR": "off",
		"CAPSTAN_WORKER_ID": "extra-1", "CAPSTAN_LOG_FORMAT": "json", "CAPSTAN_SHUTDOWN_GRACE": "0s"}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, nil, func(k string) string { return env[k] }, io.Discard, logs, weatherTool())
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("worker did not stop")
		}
	}()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `"msg":"worker ready"`) }, 30*time.Second, 10*time.Millisecond, "%s", logs)

	var warning struct{ Level, Msg, Personality string }
	for line := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(line, `no personality \"default\" exists`) {
			require.NoError(t, json.Unmarshal([]byte(line), &warning))
		}
	}
	require.Equal(t, "WARN", warning.Level, "no warning about the default personality: %s", logs)
	require.Equal(t, "default", warning.Personality)
	require.Contains(t, warning.Msg, `add one: put a file with "id: default" in the personalities directory`)
	require.Contains(t, warning.Msg, "CAPSTAN_PERSONALITIES_DIR")

	conn := bustest.Conn(t, url, "")
	tkv, err := conn.KV(ctx, bus.Tools)
	require.NoError(t, err)
	for _, name := range []string{"weather", "echo", "read_file"} {
		e, found, err := tkv.Get(ctx, name)
		require.NoError(t, err)
		require.True(t, found, "tool %s not in the catalog", name)
		var ce protocol.CatalogEntry
		require.NoError(t, json.Unmarshal(e.Value, &ce))
		require.Contains(t, ce.Workers, "extra-1")
	}
}

func TestRunRefusesAnExtraToolNamedLikeABuiltIn(t *testing.T) {
	t.Parallel()
	dup := weatherTool()
	dup.Name = "echo"
	err := Run(context.Background(), nil, func(k string) string { return map[string]string{"CAPSTAN_HTTP_ADDR": "off"}[k] }, io.Discard, io.Discard, dup)
	require.EqualError(t, err, `tool "echo" is named like a built-in tool: give it another name`)
}
