package bus

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
)

// TestDeployNATSConfigs parses the cluster configuration of
// docker-compose.yml with nats-server's own parser.
func TestDeployNATSConfigs(t *testing.T) {
	t.Parallel()
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("nats-%d", i)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			opts, err := server.ProcessConfigFile(filepath.Join("..", "..", "deploy", "nats", name+".conf"))
			require.NoError(t, err)
			require.Equal(t, name, opts.ServerName)
			require.True(t, opts.JetStream)
			require.True(t, opts.SyncAlways, "sync_interval: always")
			require.Equal(t, "/data/jetstream", opts.StoreDir)
			require.Equal(t, int32(8<<20), opts.MaxPayload)
			require.Equal(t, "capstan", opts.Cluster.Name)
			require.Equal(t, 6222, opts.Cluster.Port)
			require.Len(t, opts.Routes, 3)
			for j, r := range opts.Routes {
				require.Equal(t, fmt.Sprintf("nats-%d:6222", j+1), r.Host)
			}
		})
	}
}
