package reads_test

import (
	"context"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/scoped/reads"
	"github.com/stretchr/testify/require"
)

func TestRecordsAreSharedPerSession(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	ctx := context.Background()
	kvA, err := bustest.Conn(t, url, "").KV(ctx, bus.ReadRecords)
	require.NoError(t, err)
	kvB, err := bustest.Conn(t, url, "").KV(ctx, bus.ReadRecords) // another worker
	require.NoError(t, err)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	require.NoError(t, reads.New(kvA, "cli:repo").Record(ctx, "/srv/a.txt", at))
	got, found, err := reads.New(kvB, "cli:repo").Recorded(ctx, "/srv/a.txt")
	require.NoError(t, err)
	require.True(t, found)
	require.True(t, at.Equal(got))
	_, found, err = reads.New(kvB, "cli:other").Recorded(ctx, "/srv/a.txt")
	require.NoError(t, err)
	require.False(t, found, "sessions do not see each other's records")
	_, found, err = reads.New(kvB, "cli:repo").Recorded(ctx, "/srv/b.txt")
	require.NoError(t, err)
	require.False(t, found)
}
