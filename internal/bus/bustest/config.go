package bustest

import (
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ConfigServer starts a real nats-server from a deployment configuration file
// (for example deploy/nats/nats-1.conf), parsed by nats-server's own parser
// with its includes, users, permissions and environment variable references
// (set the variables before calling). Only what cannot run in a test is
// changed: one node instead of a cluster (no cluster listener, no routes),
// a random port on 127.0.0.1, no monitoring port, the store in a test temp
// dir, no fsync on every write (durability is not what such tests check), no
// signal handlers and no logs. Each adjust, when given, then changes the
// parsed options (for example one user's permissions, or an administrator
// added for the test). The server is shut down when the test ends;
// ConfigServer returns its URL without a user (see UserURL).
func ConfigServer(t testing.TB, file string, adjust ...func(*server.Options)) string {
	t.Helper()
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("load %s: %v", file, err)
	}
	for _, a := range adjust {
		a(opts)
	}
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.Cluster = server.ClusterOpts{}
	opts.Routes, opts.RoutesStr = nil, ""
	opts.StoreDir = t.TempDir()
	opts.SyncAlways = false
	opts.NoSigs, opts.NoLog = true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("start %s: %v", file, err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		t.Fatalf("server of %s not ready in 15s", file)
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns.ClientURL()
}

// UserURL returns serverURL with user and password in it, as
// CAPSTAN_NATS_URL takes them.
func UserURL(serverURL, user, password string) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		panic("bustest: " + err.Error())
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}
