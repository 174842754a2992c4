package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
)

// Two dispatchers in local mode on one data dir would each start a server
// on the same JetStream store. The first takes the data dir's lock and
// writes its server's URL next to it while it runs; a second one joins that
// server (and its pool) instead: `dispatcher approvals approve` in a second
// terminal decides the call a first `dispatcher call` waits for.

// localLockFile and localURLFile are under the data dir.
const (
	localLockFile = "local.lock"
	localURLFile  = "local.url"
)

// errLocalBusy is returned by lockLocal when another process holds the lock.
var errLocalBusy = errors.New("another dispatcher runs local mode on this data dir")

// lockLocal takes the data dir's local-mode lock; release gives it up and
// removes the URL file.
func lockLocal(dataDir string) (release func(), err error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dataDir, localLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := tryLock(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		_ = os.Remove(filepath.Join(dataDir, localURLFile))
		_ = f.Close() // releases the lock
	}, nil
}

// writeLocalURL records the URL of local mode's server for a second dispatcher.
func writeLocalURL(dataDir, url string) error {
	return os.WriteFile(filepath.Join(dataDir, localURLFile), []byte(url+"\n"), 0o600)
}

// joinLocal connects to the server of the local mode that holds dataDir's
// lock, with the credentials its server wrote there.
func (a *app) joinLocal(ctx context.Context, cfg Config, dataDir string) (*client.Client, func(), error) {
	data, err := os.ReadFile(filepath.Join(dataDir, localURLFile))
	url := strings.TrimSpace(string(data))
	if err != nil || url == "" {
		return nil, nil, fmt.Errorf("local mode: another dispatcher runs local mode on %s and has not said where its server listens yet; try again, or set CAPSTAN_DATA_DIR to another directory", dataDir)
	}
	c, err := a.newClient(ctx, cfg, url, bus.EmbeddedCredsFile(dataDir))
	if err != nil {
		return nil, nil, fmt.Errorf("local mode: joining the local mode of another dispatcher on %s (%s): %w", dataDir, url, err)
	}
	fmt.Fprintf(a.stderr, "capstan: local mode: joined the embedded server and pool of another dispatcher using %s (%s)\n", dataDir, url)
	return c, c.Close, nil
}
