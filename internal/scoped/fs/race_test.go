package fs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
)

// Rounds of the race tests: how many accesses each makes while the racer
// swaps, enough for thousands of swaps to interleave with every step of a
// resolution (a naive Lstat-then-open reader leaks the secret dozens of
// times in as many rounds), bounded so the tests stay quick under -race.
// Writes sync the file, so they get fewer rounds.
const (
	raceRounds      = 1500
	raceWriteRounds = 150
)

// racer swaps the directory entries a and b (both in one directory) until
// stop is closed, with renameat2(RENAME_EXCHANGE) so that the name always
// exists, or, where the filesystem lacks it, by renaming through a third
// name. It returns how many swaps it made once stopped.
func racer(t *testing.T, a, b string, stop <-chan struct{}) func() int64 {
	t.Helper()
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		tmp := a + ".swap"
		for {
			select {
			case <-stop:
				return
			default:
			}
			err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
				_ = os.Rename(a, tmp)
				_ = os.Rename(b, a)
				err = os.Rename(tmp, b)
			}
			if err != nil {
				t.Errorf("racer: %v", err)
				return
			}
			swaps.Add(1)
		}
	})
	return func() int64 {
		wg.Wait()
		return swaps.Load()
	}
}

// TestSymlinkSwapRaceRead: r/race/target flips between a regular file
// inside the reach and a symlink to a secret outside it while ReadFile and
// Stat run on it. Not one read returns the secret, and Stat never reports
// the secret file.
func TestSymlinkSwapRaceRead(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	require.NoError(t, os.MkdirAll(tr.p("r/race"), 0o755))
	require.NoError(t, os.WriteFile(tr.p("r/race/target"), []byte("inside"), 0o644))
	require.NoError(t, os.Symlink(tr.p("secret.txt"), tr.p("r/race/alt")))
	secretInfo, err := os.Stat(tr.p("secret.txt"))
	require.NoError(t, err)
	fsys := scopedfs.New(tr.grant(), tr.cfg, nil)

	stop := make(chan struct{})
	wait := racer(t, tr.p("r/race/target"), tr.p("r/race/alt"), stop)
	var ok, refused int
	for range raceRounds {
		data, _, err := fsys.ReadFile(context.Background(), "race/target")
		if err == nil {
			require.Equal(t, "inside", string(data), "a read escaped the reach")
			ok++
		} else {
			refused++
		}
		if fi, _, err := fsys.Stat(context.Background(), "race/target"); err == nil {
			require.False(t, os.SameFile(secretInfo, fi), "stat escaped the reach")
		}
	}
	close(stop)
	t.Logf("%d reads, %d refused or failed, %d swaps", ok, refused, wait())
}

// TestDirectorySwapRaceRead: r/race/dir flips between a directory inside
// the reach and a symlink to a directory outside it, while a file below it
// is read and the directory listed. Nothing outside is ever returned.
func TestDirectorySwapRaceRead(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	require.NoError(t, os.MkdirAll(tr.p("r/race/dir"), 0o755))
	require.NoError(t, os.WriteFile(tr.p("r/race/dir/f.txt"), []byte("inside"), 0o644))
	require.NoError(t, os.MkdirAll(tr.p("outside"), 0o755))
	require.NoError(t, os.WriteFile(tr.p("outside/f.txt"), []byte("OUTSIDE"), 0o644))
	require.NoError(t, os.WriteFile(tr.p("outside/only-outside.txt"), []byte("OUTSIDE"), 0o644))
	require.NoError(t, os.Symlink(tr.p("outside"), tr.p("r/race/alt")))
	fsys := scopedfs.New(tr.grant(), tr.cfg, nil)

	stop := make(chan struct{})
	wait := racer(t, tr.p("r/race/dir"), tr.p("r/race/alt"), stop)
	var ok int
	for range raceRounds {
		data, _, err := fsys.ReadFile(context.Background(), "race/dir/f.txt")
		if err == nil {
			require.Equal(t, "inside", string(data), "a read escaped the reach")
			ok++
		}
		entries, _, err := fsys.ReadDir(context.Background(), "race/dir")
		if err == nil {
			for _, e := range entries {
				require.NotEqual(t, "only-outside.txt", e.Name(), "a listing escaped the reach")
			}
		}
	}
	close(stop)
	t.Logf("%d reads, %d swaps", ok, wait())
}

// TestSymlinkSwapRaceWrite: w/race/target flips between a regular file in
// the write reach and a symlink to a file outside it while WriteFile runs;
// and w/race/dir between a directory and a symlink to an outside
// directory. The outside files never change and no file appears outside.
func TestSymlinkSwapRaceWrite(t *testing.T) {
	t.Parallel()
	tr := newTree(t)
	require.NoError(t, os.MkdirAll(tr.p("w/race/dir"), 0o755))
	require.NoError(t, os.WriteFile(tr.p("w/race/target"), []byte("inside"), 0o644))
	require.NoError(t, os.Symlink(tr.p("secret.txt"), tr.p("w/race/alt")))
	require.NoError(t, os.MkdirAll(tr.p("outside"), 0o755))
	require.NoError(t, os.Symlink(tr.p("outside"), tr.p("w/race/altdir")))
	g := tr.grant()
	g.WorkingDir = tr.p("w")
	fsys := scopedfs.New(g, tr.cfg, nil)

	stop := make(chan struct{})
	waitFile := racer(t, tr.p("w/race/target"), tr.p("w/race/alt"), stop)
	waitDir := racer(t, tr.p("w/race/dir"), tr.p("w/race/altdir"), stop)
	for range raceWriteRounds {
		_, _ = fsys.WriteFile(context.Background(), "race/target", []byte("written"))
		_, _ = fsys.WriteFile(context.Background(), "race/dir/new.txt", []byte("written"))
	}
	close(stop)
	t.Logf("%d file swaps, %d directory swaps", waitFile(), waitDir())

	secret, err := os.ReadFile(tr.p("secret.txt"))
	require.NoError(t, err)
	require.Equal(t, "SECRET", string(secret), "a write escaped through the file link")
	entries, err := os.ReadDir(tr.p("outside"))
	require.NoError(t, err)
	require.Empty(t, entries, "a write escaped through the directory link")
	info, err := os.Lstat(tr.p("secret.txt"))
	require.NoError(t, err)
	require.True(t, info.Mode().IsRegular(), "the outside file was not replaced")
	matches, err := filepath.Glob(tr.p("*.tmp"))
	require.NoError(t, err)
	require.Empty(t, matches)
}
