package bus_test

import (
	"bytes"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/embedded"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// startServer starts an embedded server storing in dir, shut down at test end.
func startServer(t *testing.T, dir string) *embedded.Server {
	t.Helper()
	s, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	return s
}

// seedFile writes a new NKey user seed in the embedded.creds format to a
// file of its own and returns the path.
func seedFile(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	p := filepath.Join(t.TempDir(), "other.creds")
	require.NoError(t, os.WriteFile(p, append(seed, '\n'), 0o600))
	return p
}

func connectWith(t *testing.T, url, creds string) error {
	t.Helper()
	c, err := bus.Connect(ctxT(t), bus.Config{URL: url, Creds: creds, Name: t.Name(), ConnectTimeout: 5 * time.Second})
	if err == nil {
		c.Close()
	}
	return err
}

func TestEmbeddedServerWritesCredentials0600(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := startServer(t, dir)
	require.Equal(t, filepath.Join(dir, "embedded.creds"), s.CredsFile())
	require.Equal(t, s.CredsFile(), bus.EmbeddedCredsFile(dir))
	fi, err := os.Lstat(s.CredsFile())
	require.NoError(t, err)
	require.True(t, fi.Mode().IsRegular())
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	data, err := os.ReadFile(s.CredsFile())
	require.NoError(t, err)
	_, err = nkeys.ParseDecoratedUserNKey(data)
	require.NoError(t, err, "the file holds an NKey user seed")
	leftovers, err := filepath.Glob(filepath.Join(dir, ".embedded.creds.*"))
	require.NoError(t, err)
	require.Empty(t, leftovers, "no temporary file is left behind")

	require.NoError(t, connectWith(t, s.ClientURL(), s.CredsFile()), "bus.Connect with the seed file")
	// What the nats CLI does with --nkey <file>.
	opt, err := nats.NkeyOptionFromSeed(s.CredsFile())
	require.NoError(t, err)
	nc, err := nats.Connect(s.ClientURL(), opt)
	require.NoError(t, err)
	nc.Close()
	require.NoError(t, bus.Probe(s.ClientURL(), 5*time.Second, s.CredsFile()))
}

func TestEmbeddedServerRefusesAConnectionWithoutCredentials(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir())
	err := connectWith(t, s.ClientURL(), "")
	require.ErrorIs(t, err, bus.ErrNotAuthorized)
	require.ErrorIs(t, err, nats.ErrAuthorization)
	require.Contains(t, err.Error(), "Authorization Violation")

	err = bus.Probe(s.ClientURL(), 5*time.Second, "")
	require.ErrorIs(t, err, bus.ErrNotAuthorized, "a server that answers and refuses is not 'no server'")
	require.NotErrorIs(t, err, bus.ErrNoServer)
}

func TestEmbeddedServerRefusesAnotherSeed(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir())
	other := seedFile(t)
	require.ErrorIs(t, connectWith(t, s.ClientURL(), other), bus.ErrNotAuthorized)
	require.ErrorIs(t, bus.Probe(s.ClientURL(), 5*time.Second, other), bus.ErrNotAuthorized)
}

func TestEveryStartGeneratesNewCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1})
	require.NoError(t, err)
	oldSeed, err := os.ReadFile(first.CredsFile())
	require.NoError(t, err)
	old := filepath.Join(t.TempDir(), "old.creds")
	require.NoError(t, os.WriteFile(old, oldSeed, 0o600))
	first.Shutdown()

	second := startServer(t, dir)
	newSeed, err := os.ReadFile(second.CredsFile())
	require.NoError(t, err)
	require.NotEqual(t, oldSeed, newSeed)
	require.ErrorIs(t, connectWith(t, second.ClientURL(), old), bus.ErrNotAuthorized, "the old seed is refused")
	require.NoError(t, connectWith(t, second.ClientURL(), second.CredsFile()))
}

// TestReuseCredentialsKeepsTheSeed covers the test-only option: a restart
// with ReuseCredentials accepts the seed of the previous start, one without
// does not.
func TestReuseCredentialsKeepsTheSeed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1, ReuseCredentials: true})
	require.NoError(t, err, "no file yet: new credentials")
	seed, err := os.ReadFile(first.CredsFile())
	require.NoError(t, err)
	first.Shutdown()

	again := startServerWith(t, embedded.Config{DataDir: dir, Port: -1, ReuseCredentials: true})
	kept, err := os.ReadFile(again.CredsFile())
	require.NoError(t, err)
	require.Equal(t, seed, kept)
	require.NoError(t, connectWith(t, again.ClientURL(), again.CredsFile()))
}

func startServerWith(t *testing.T, cfg embedded.Config) *embedded.Server {
	t.Helper()
	s, err := embedded.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	return s
}

func TestCredentialsFileReplacesWhatWasThere(t *testing.T) {
	t.Parallel()
	dir, elsewhere := t.TempDir(), t.TempDir()
	target := filepath.Join(elsewhere, "target")
	require.NoError(t, os.WriteFile(target, []byte("untouched"), 0o644))
	require.NoError(t, os.Symlink(target, filepath.Join(dir, "embedded.creds")))
	s := startServer(t, dir)
	fi, err := os.Lstat(s.CredsFile())
	require.NoError(t, err)
	require.True(t, fi.Mode().IsRegular(), "the planted symlink is replaced, not followed")
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "untouched", string(got))

	// A world-readable file left behind becomes 0600 at the next start.
	s.Shutdown()
	require.NoError(t, os.Chmod(s.CredsFile(), 0o644))
	s2 := startServer(t, dir)
	fi, err = os.Lstat(s2.CredsFile())
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

func TestEmbeddedServerRefusesASymlinkedDataDir(t *testing.T) {
	t.Parallel()
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.Symlink(real, link))
	_, err := embedded.Start(embedded.Config{DataDir: link, Port: -1})
	require.ErrorContains(t, err, "data dir "+link+" is a symbolic link")
	_, err = os.Stat(filepath.Join(real, "embedded.creds"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing was written")
}

// TestEmbeddedServerStopsWhenItCannotWriteTheCredentials: a path that cannot
// become a 0600 file stops the start; no server runs without its file.
func TestEmbeddedServerStopsWhenItCannotWriteTheCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "embedded.creds", "x"), 0o700))
	_, err := embedded.Start(embedded.Config{DataDir: dir, Port: -1})
	require.ErrorContains(t, err, "embedded server: write credentials")
	leftovers, err := filepath.Glob(filepath.Join(dir, ".embedded.creds.*"))
	require.NoError(t, err)
	require.Empty(t, leftovers, "the temporary file is removed")
}

func TestBadCredentialsFileErrorsNameTheFileNotTheContent(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir())
	dir := t.TempDir()
	akp, err := nkeys.CreateAccount()
	require.NoError(t, err)
	accountSeed, err := akp.Seed()
	require.NoError(t, err)
	ukp, err := nkeys.CreateUser()
	require.NoError(t, err)
	userSeed, err := ukp.Seed()
	require.NoError(t, err)
	cases := []struct {
		name    string
		content []byte // nil: no file
		want    string
	}{
		{"missing", nil, "no such file or directory"},
		{"garbage", []byte("password=hunter2-very-secret\n"), "is neither a NATS credentials file"},
		{"account seed", append(accountSeed, '\n'), "is neither a NATS credentials file"},
		{"damaged user seed", append(bytes.Clone(userSeed[:len(userSeed)-3]), "AAA\n"...), "is neither a NATS credentials file"},
		{"empty", []byte{}, "is neither a NATS credentials file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".creds")
			if tc.content != nil {
				require.NoError(t, os.WriteFile(p, tc.content, 0o600))
			}
			for what, err := range map[string]error{
				"Connect": connectWith(t, s.ClientURL(), p),
				"Probe":   bus.Probe(s.ClientURL(), 5*time.Second, p),
			} {
				require.Error(t, err, what)
				require.Contains(t, err.Error(), "credentials file "+p, what)
				require.Contains(t, err.Error(), tc.want, what)
				require.False(t, errors.Is(err, bus.ErrNoServer), what)
				if len(tc.content) > 0 {
					line := strings.TrimSpace(string(tc.content))
					require.NotContains(t, err.Error(), line, "%s: the content is not shown", what)
					require.NotContains(t, err.Error(), "hunter2", what)
				}
			}
		})
	}
}

func TestProbeTellsNoServerFromRefusal(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	err = bus.Probe("nats://"+addr, 500*time.Millisecond, "")
	require.ErrorIs(t, err, bus.ErrNoServer)
	require.NotErrorIs(t, err, bus.ErrNotAuthorized)
}

// TestFailedStartLeavesTheRunningServersCredentials: a second start on the
// port and data dir of a running server (a second worker without
// CAPSTAN_NATS_URL in the same directory) fails without replacing the
// running server's credentials file.
func TestFailedStartLeavesTheRunningServersCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startServer(t, dir)
	seed, err := os.ReadFile(first.CredsFile())
	require.NoError(t, err)
	_, portStr, err := net.SplitHostPort(strings.TrimPrefix(first.ClientURL(), "nats://"))
	require.NoError(t, err)
	port, err := strconv.Atoi(portStr)
	require.NoError(t, err)

	_, err = embedded.Start(embedded.Config{DataDir: dir, Port: port})
	require.ErrorContains(t, err, "address already in use")
	after, err := os.ReadFile(first.CredsFile())
	require.NoError(t, err)
	require.Equal(t, seed, after)
	require.NoError(t, bus.Probe(first.ClientURL(), 5*time.Second, first.CredsFile()))
}
