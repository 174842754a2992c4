package echo_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/tool"
	"github.com/stretchr/testify/require"
)

func TestEcho(t *testing.T) {
	t.Parallel()
	e := echo.Tool()
	require.NoError(t, e.Validate())
	require.True(t, e.Capabilities.IsZero(), "echo touches nothing")

	var mu sync.Mutex
	var got []tool.Progress
	tc := &tool.Context{EmitFunc: func(p tool.Progress) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, p)
		return nil
	}}
	res, err := e.Execute(context.Background(), json.RawMessage(`{"text":"héllo <b>","progress":[{"message":"a","percent":50,"audience":"user"},{"message":"b"}]}`), tc)
	require.NoError(t, err)
	require.Equal(t, tool.OK("héllo <b>"), res)
	require.Len(t, got, 2)
	require.Equal(t, tool.AudienceUser, got[0].Audience)
	require.InDelta(t, 50, *got[0].Percent, 0)
	require.Equal(t, tool.Audience(""), got[1].Audience, "the worker applies the internal default")
}

func TestEchoSleepHonoursCancellation(t *testing.T) {
	t.Parallel()
	cause := errors.New("cancelled: by request")
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel(cause) }()
	_, err := echo.Tool().Execute(ctx, json.RawMessage(`{"text":"x","sleep_ms":600000}`), &tool.Context{})
	require.ErrorIs(t, err, cause)
}
